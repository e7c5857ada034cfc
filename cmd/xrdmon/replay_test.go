package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/file"
	"github.com/xrdmon/xrdmon/internal/source/sourcetest"
	"github.com/xrdmon/xrdmon/internal/store"
)

func writePcap(t *testing.T, path string, sender netip.AddrPort, pkts [][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps := make([]source.Packet, len(pkts))
	for i, p := range pkts {
		ps[i] = source.Packet{Data: p, Sender: sender, Received: time.Unix(1700000200, int64(i)*1000)}
	}
	if err := file.WritePcap(f, netip.MustParseAddrPort("127.0.0.1:9930"), ps); err != nil {
		t.Fatal(err)
	}
}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestReplayPcap: a pcap capture replays into exact records, and a second
// replay gives identical record ids; the summary counts every packet.
func TestReplayPcap(t *testing.T) {
	dir := t.TempDir()
	s := &session{stod: 1700000000, sid: 99}
	pkts := s.files(10, 1700000100)
	// An open that never closes: flushed at end of input.
	var extra session = *s
	pcap := filepath.Join(dir, "cap.pcap")
	writePcap(t, pcap, netip.MustParseAddrPort("[2001:db8::1]:40000"), append(pkts, openOnly(&extra)...))

	var ids [2][]string
	for i := range 2 {
		out := filepath.Join(dir, "out.jsonl")
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"replay", "--out", out, pcap}, &stdout, &stderr); code != 0 {
			t.Fatalf("replay exit %d: %s", code, stderr.String())
		}
		lines := readLines(t, out)
		if len(lines) != 11 {
			t.Fatalf("got %d records, want 11\n%s", len(lines), stderr.String())
		}
		partial := 0
		for _, l := range lines {
			ids[i] = append(ids[i], l["record_id"].(string))
			if l["reason"] == string(record.EndOfInput) {
				partial++
				if l["read_bytes"].(float64) != 777 {
					t.Errorf("partial record lost the xfr bytes: %v", l)
				}
			}
			if l["server_ip"] != "2001:db8::1" {
				t.Errorf("server_ip %v", l["server_ip"])
			}
		}
		if partial != 1 {
			t.Errorf("%d end_of_input records, want 1", partial)
		}
		sum := stderr.String()
		for _, want := range []string{"accounted", "0 rejected", "0 lost", "10 complete, 1 partial (end_of_input 1)"} {
			if !strings.Contains(sum, want) {
				t.Errorf("summary lacks %q:\n%s", want, sum)
			}
		}
	}
	if strings.Join(ids[0], ",") != strings.Join(ids[1], ",") {
		t.Error("record ids differ between two replays of the same capture")
	}
}

// openOnly returns a login, path and an f packet with an open and an xfr.
func openOnly(s *session) [][]byte {
	pkts := s.files(1, 1700000300)
	// Keep ident, u, d; rebuild the f packet without close and disc.
	out := pkts[:len(pkts)-1]
	return append(out, fOpenXfr(s, s.dict, s.dict+1))
}

// TestReplayRealPackets: the captured production packets replay with no
// rejection and no records (they hold no f-stream).
func TestReplayRealPackets(t *testing.T) {
	path := sourcetest.RealPacketsPath(t)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", "--schema", "gracc", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "11 handled, 11 accounted, 0 rejected") {
		t.Errorf("summary:\n%s", stderr.String())
	}
}

func TestReplayUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay"}, &stdout, &stderr); code != 2 {
		t.Errorf("no input: exit %d", code)
	}
	if code := run(context.Background(), []string{"replay", "--schema", "xml", "-"}, &stdout, &stderr); code != 2 {
		t.Errorf("bad schema: exit %d", code)
	}
	if code := run(context.Background(), []string{"replay", "/nonexistent/capture"}, &stdout, &stderr); code != 1 {
		t.Errorf("unreadable input: exit %d", code)
	}
}

// TestReplayEqualsCollect: one capture through `replay` and through
// `collect` with file_input gives the same records and events, byte for
// byte in the native schema: both run the same pipeline from the same
// correlation defaults (collect here with two shards, replay with one).
func TestReplayEqualsCollect(t *testing.T) {
	dir := t.TempDir()
	pcap := filepath.Join(dir, "cap.pcap")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"loadgen", "--pcap", pcap, "--servers", "6", "--duration", "40m",
		"--duplicate", "0.01", "--reorder", "0.02", "--loss", "0.005", "--restarts", "2", "--seed", "11"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("loadgen exit %d: %s", code, stderr.String())
	}

	out, evOut := filepath.Join(dir, "replay.jsonl"), filepath.Join(dir, "events.jsonl")
	stderr.Reset()
	if code := run(context.Background(), []string{"replay", "--out", out, "--events", evOut, pcap}, io.Discard, &stderr); code != 0 {
		t.Fatalf("replay exit %d: %s", code, stderr.String())
	}
	replayed, replayedEvents := readRaw(t, out), readRaw(t, evOut)
	if len(replayed) < 1000 || len(replayedEvents) == 0 {
		t.Fatalf("replay made %d records and %d events; the workload is too small\n%s", len(replayed), len(replayedEvents), stderr.String())
	}

	cfg := config.Default()
	cfg.FileInput.Paths = []string{pcap}
	cfg.FileInput.Flush = true // as replay: files open at the end become partial records
	cfg.Store.Path = filepath.Join(dir, "store")
	cfg.HTTP.Address = ""
	cfg.DNS.Enabled = false // replay names nothing
	cfg.Correlate.Shards = 2
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := collect(context.Background(), cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("collect: %v", err)
	}
	r, err := store.OpenReader(filepath.Join(cfg.Store.Path, "xrdmon.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var collected, collectedEvents []string
	for seq := int64(0); ; {
		es, err := r.Read(context.Background(), seq, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			seq = e.Seq
			if e.Record != nil {
				collected = append(collected, string(record.AppendJSON(nil, e.Record)))
			} else {
				collectedEvents = append(collectedEvents, string(record.AppendEventJSON(nil, e.Event)))
			}
		}
	}
	flushed := 0
	for _, l := range replayed {
		if strings.Contains(l, `"reason":"end_of_input"`) {
			flushed++
		}
	}
	if flushed == 0 {
		t.Error("no file open at the end of the capture: the test does not cover the flush")
	}
	sameLines(t, "records", replayed, collected)
	sameLines(t, "events", replayedEvents, collectedEvents)
	t.Logf("%d records and %d events identical; %d files open at the end", len(collected), len(collectedEvents), flushed)
}

func readRaw(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// sameLines fails unless a and b hold the same lines (in any order).
func sameLines(t *testing.T, what string, a, b []string) {
	t.Helper()
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	if len(a) != len(b) {
		t.Errorf("%s: replay %d, collect %d", what, len(a), len(b))
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			t.Fatalf("%s differ:\nreplay  %s\ncollect %s", what, a[i], b[i])
		}
	}
}

// TestReplayUseCaseLoss: replay's summary of the real use-case capture,
// whose packets are not in sequence order, counts the 47 missing numbers
// and shows the late packets that filled gaps.
func TestReplayUseCaseLoss(t *testing.T) {
	path := sourcetest.UseCaseCapturePath(t)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"47 lost (sequence gaps)", "7 reordered (late, filled a gap), 0 stale", "lost in fstream:              47"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestReplayRedirectsLinked: a workload with two redirectors whose
// r-stream is sent once a minute (so redirects reach the collector after
// the records of short transfers): every redirected transfer is linked,
// with its exact hop count and bounds that hold the true delay, and two
// replays (with time-driven commits falling anywhere) give the same
// records.
func TestReplayRedirectsLinked(t *testing.T) {
	dir := t.TempDir()
	pcap, truthFile := filepath.Join(dir, "cap.pcap"), filepath.Join(dir, "truth.json")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"loadgen", "--pcap", pcap, "--truth", truthFile, "--servers", "4",
		"--duration", "20m", "--redirectors", "2", "--redirect-delay", "300ms", "--redirect-window", "60s", "--seed", "5"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("loadgen exit %d: %s", code, stderr.String())
	}
	var truth struct{ Records []record.Record }
	b, err := os.ReadFile(truthFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &truth); err != nil {
		t.Fatal(err)
	}
	key := func(r *record.Record) string {
		return fmt.Sprint(r.ServerIP, "/", r.ServerStod, "/", r.ServerID, "/", r.FileID)
	}
	want := map[string]*record.Record{}
	for i := range truth.Records {
		want[key(&truth.Records[i])] = &truth.Records[i]
	}
	var runs [2][]string
	for i := range runs {
		out := filepath.Join(dir, fmt.Sprint("replay", i, ".jsonl"))
		if code := run(context.Background(), []string{"replay", "--out", out, pcap}, io.Discard, &stderr); code != 0 {
			t.Fatalf("replay exit %d: %s", code, stderr.String())
		}
		runs[i] = readRaw(t, out)
	}
	sameLines(t, "records of two replays", runs[0], runs[1])
	redirected, linked := 0, 0
	for _, l := range runs[0] {
		var r record.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		w := want[key(&r)]
		if w == nil || w.RedirectHops == 0 {
			continue
		}
		redirected++
		if r.RedirectHops == 0 {
			continue
		}
		linked++
		if r.RedirectHops != w.RedirectHops || w.RedirectDelayMS < r.RedirectDelayMS || w.RedirectDelayMS > r.RedirectDelayMaxMS {
			t.Errorf("%s: %d hops in [%d, %d] ms, truth %d hops %d ms", key(&r), r.RedirectHops, r.RedirectDelayMS, r.RedirectDelayMaxMS,
				w.RedirectHops, w.RedirectDelayMS)
		}
	}
	if redirected < 500 || linked != redirected {
		t.Errorf("%d of %d redirected transfers linked", linked, redirected)
	}
}

// TestReplayGC checks that replay lets its heap grow further than the
// default between collections (replayGC), and that GOGC and GOMEMLIMIT in
// the environment win over it.
func TestReplayGC(t *testing.T) {
	prevPercent := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(prevPercent)
		debug.SetMemoryLimit(prevLimit)
	})
	for _, tc := range []struct {
		gogc, gomemlimit string
		percent          int
		limit            int64
	}{
		{"", "", replayGCPercent, replayMemoryLimit},
		{"100", "", 100, math.MaxInt64},
		{"", "1GiB", 100, math.MaxInt64},
	} {
		t.Setenv("GOGC", tc.gogc)
		t.Setenv("GOMEMLIMIT", tc.gomemlimit)
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
		replayGC()
		if got := debug.SetGCPercent(100); got != tc.percent {
			t.Errorf("GOGC=%q GOMEMLIMIT=%q: GC percent %d, want %d", tc.gogc, tc.gomemlimit, got, tc.percent)
		}
		if got := debug.SetMemoryLimit(math.MaxInt64); got != tc.limit {
			t.Errorf("GOGC=%q GOMEMLIMIT=%q: memory limit %d, want %d", tc.gogc, tc.gomemlimit, got, tc.limit)
		}
	}
}
