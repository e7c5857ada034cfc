package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// benchChildEnv makes this test binary act as xrdmon itself, so that
// `xrdmon bench` can start it as the collector (os.Executable is the test
// binary). It is checked in init, before the testing package parses flags.
const benchChildEnv = "XRDMON_TEST_BENCH_CHILD"

func init() {
	if os.Getenv(benchChildEnv) != "1" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func TestBenchQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts collectors and sends for several seconds")
	}
	t.Setenv(benchChildEnv, "1")
	dir := t.TempDir()
	csvPath, svgPath := filepath.Join(dir, "bench.csv"), filepath.Join(dir, "bench.svg")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := runBench(ctx, []string{"--quick", "--workdir", filepath.Join(dir, "work"), "--csv", csvPath, "--svg", svgPath}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("csv has %d lines, want a header and 2 steps:\n%s", len(rows), stdout.String())
	}
	col := make(map[string]int)
	for i, c := range rows[0] {
		col[c] = i
	}
	num := func(row []string, name string) float64 {
		t.Helper()
		i, ok := col[name]
		if !ok {
			t.Fatalf("no column %q", name)
		}
		v, err := strconv.ParseFloat(row[i], 64)
		if err != nil {
			t.Fatalf("column %s: %q: %v", name, row[i], err)
		}
		return v
	}
	for k, row := range rows[1:] {
		if want := []string{"clients=5", "clients=10"}[k]; row[col["step"]] != want {
			t.Errorf("row %d step %q, want %q", k, row[col["step"]], want)
		}
		for name, want := range map[string]float64{"missing": 0, "wrong_bytes": 0, "partial": 0, "unexpected": 0, "loss_pct": 0, "seq_gaps": 0, "kernel_drops": 0} {
			if got := num(row, name); got != want {
				t.Errorf("%s: %s = %g, want %g", row[0], name, got, want)
			}
		}
		for _, name := range []string{"sent", "offered_pps", "accepted_pps", "expected", "complete", "latency_p50_ms", "latency_p99_ms", "peak_rss_mib", "events_expected", "sim_speed"} {
			if got := num(row, name); got <= 0 {
				t.Errorf("%s: %s = %g, want > 0", row[0], name, got)
			}
		}
		if num(row, "events_stored") != num(row, "events_expected") {
			t.Errorf("%s: %g g-stream events stored of %g sent", row[0], num(row, "events_stored"), num(row, "events_expected"))
		}
		if num(row, "complete") != num(row, "expected") {
			t.Errorf("%s: complete %g of %g expected", row[0], num(row, "complete"), num(row, "expected"))
		}
		if num(row, "latency_p99_ms") < num(row, "latency_p50_ms") {
			t.Errorf("%s: p99 below p50", row[0])
		}
		// The CPU is sampled once the rollups have summed the whole log.
		if got := num(row, "rollups_caught_up_s"); got < 0 {
			t.Errorf("%s: rollups_caught_up_s = %g: the rollups did not catch up", row[0], got)
		}
		// Told, not bounded: a slow machine may make the rollups drop a batch.
		if got := num(row, "rollups_read_back"); got < 0 {
			t.Errorf("%s: rollups_read_back = %g: not measured", row[0], got)
		}
	}
	if !bytes.Contains(stdout.Bytes(), []byte("clients=10")) {
		t.Errorf("table on stdout lacks the second step:\n%s", stdout.String())
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Errorf("svg: %v, %.40q", err, svg)
	}
}

func TestBenchFlags(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{
		{"--scenario", "nonsense"},
		{"--target-cmd", "true"}, // no record location
		{"--target-cmd", "'unterminated", "--records-jsonl", "x"},
		{"extra"},
		{"--target", "nonsense"},
		{"--target", "null", "--target-cmd", "true"},
	} {
		if err := runBench(context.Background(), args, &out, &errb); err != errUsage {
			t.Errorf("%q: err %v, want errUsage", args, err)
		}
	}
}

func TestSplitCommand(t *testing.T) {
	got, err := splitCommand(`python3 -m collector --port={udp_port} "a b" 'c "d"' e\ f`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"python3", "-m", "collector", "--port={udp_port}", "a b", `c "d"`, "e f"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	if _, err := splitCommand("  "); err == nil {
		t.Error("no error for an empty command")
	}
}

// readBenchCSV returns the rows of a bench CSV as maps by column.
func readBenchCSV(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]string
	for _, rec := range recs[1:] {
		row := make(map[string]string)
		for i, c := range recs[0] {
			row[c] = rec[i]
		}
		rows = append(rows, row)
	}
	return rows
}

func num(t *testing.T, row map[string]string, name string) float64 {
	t.Helper()
	s, ok := row[name]
	if !ok {
		t.Fatalf("no column %q", name)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("column %s: %q: %v", name, s, err)
	}
	return v
}

// TestBenchPregenerate runs a short step with pregenerated packets against
// the real collector: every record must match and be timed.
func TestBenchPregenerate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a collector and sends for several seconds")
	}
	t.Setenv(benchChildEnv, "1")
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "bench.csv")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := runBench(ctx, []string{"--pregenerate", "--scenario", "rate=3000", "--step-duration", "2s", "--quiet", "1s",
		"--max-settle", "20s", "--workdir", filepath.Join(dir, "work"), "--csv", csvPath}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	rows := readBenchCSV(t, csvPath)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1:\n%s", len(rows), stdout.String())
	}
	row := rows[0]
	if got := num(t, row, "sent"); got != 6000 {
		t.Errorf("sent %g, want 6000", got)
	}
	for name, want := range map[string]float64{"missing": 0, "wrong_bytes": 0, "partial": 0, "unexpected": 0, "loss_pct": 0, "seq_gaps": 0, "kernel_drops": 0} {
		if got := num(t, row, name); got != want {
			t.Errorf("%s = %g, want %g", name, got, want)
		}
	}
	if num(t, row, "expected") <= 0 || num(t, row, "complete") != num(t, row, "expected") {
		t.Errorf("complete %g of %g expected", num(t, row, "complete"), num(t, row, "expected"))
	}
	// Every record is timed from the sending of its packets (the Sent
	// hook, replayed by the pregenerated sender).
	if num(t, row, "latency_p50_ms") <= 0 {
		t.Errorf("no latency:\n%s", stdout.String())
	}
	if p50, p99 := num(t, row, "latency_p50_ms"), num(t, row, "latency_p99_ms"); p50 <= 0 || p99 < p50 {
		t.Errorf("latency p50 %g ms, p99 %g ms", p50, p99)
	}
	if num(t, row, "offered_pps") <= 0 || num(t, row, "sender_cpu_s_per_100k") < 0 {
		t.Errorf("offered %g, sender CPU %g", num(t, row, "offered_pps"), num(t, row, "sender_cpu_s_per_100k"))
	}
}

// TestBenchNull runs the null target: datagrams received instead of
// records.
func TestBenchNull(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the null receiver and sends for a few seconds")
	}
	t.Setenv(benchChildEnv, "1")
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "null.csv")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := runBench(ctx, []string{"--target", "null", "--pregenerate", "--scenario", "rate=5000,10000", "--step-duration", "1s",
		"--quiet", "1s", "--workdir", filepath.Join(dir, "work"), "--csv", csvPath}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	rows := readBenchCSV(t, csvPath)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2:\n%s", len(rows), stdout.String())
	}
	for _, row := range rows {
		if _, ok := row["expected"]; ok {
			t.Errorf("null target row has record columns: %v", row)
		}
		sent, recv, drops := num(t, row, "sent"), num(t, row, "received"), num(t, row, "kernel_drops")
		if sent <= 0 || recv+drops != sent {
			t.Errorf("%s: sent %g, received %g, dropped %g", row["step"], sent, recv, drops)
		}
	}
	if !bytes.Contains(stdout.Bytes(), []byte("received")) {
		t.Errorf("table lacks the received column:\n%s", stdout.String())
	}
}
