package jsonl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func records(from, n int) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		k := from + i
		out[i] = record.Record{
			RecordID: fmt.Sprintf("%032x", k), End: t0.Add(time.Duration(k) * time.Second),
			ServerIP: "192.0.2.1", User: "u", Path: fmt.Sprintf("/store/f%d", k), ReadBytes: int64(k),
		}
	}
	return out
}

// runUntil runs a new sink until the file holds want lines, then stops it.
func runUntil(t *testing.T, st *store.Store, path string, want int) {
	t.Helper()
	opts := DefaultOptions()
	opts.BatchSize = 7
	opts.PollInterval = time.Millisecond
	s, err := NewWithOptions(path, opts, st, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for countLines(path) < want && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	// Wait until the cursor has caught up too, so the stop is clean.
	last, _ := st.LastSeq(ctx)
	for time.Now().Before(deadline) {
		if c, _ := st.Cursor(ctx, s.Name()); c == last {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// countLines counts complete lines (a torn last line is not one).
func countLines(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte{'\n'})
}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d %q: %v", len(out)+1, sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// checkExactlyOnce asserts the file holds records 0..n-1 and the event, each
// once, records in order.
func checkExactlyOnce(t *testing.T, path string, n int, eventID string) {
	t.Helper()
	lines := readLines(t, path)
	seen := map[string]int{}
	next := 0
	for _, l := range lines {
		if id, ok := l["record_id"].(string); ok {
			seen[id]++
			if want := records(next, 1)[0].RecordID; id != want {
				t.Fatalf("record %s out of order, want %s", id, want)
			}
			next++
		} else if id, ok := l["event_id"].(string); ok {
			seen[id]++
		}
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s written %d times", id, c)
		}
	}
	if next != n || seen[eventID] != 1 || len(lines) != n+1 {
		t.Fatalf("file has %d lines, %d records, event %d times; want %d records and the event", len(lines), next, seen[eventID], n)
	}
}

func TestExactlyOnceAcrossRestart(t *testing.T) {
	st := sinktest.OpenStore(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "out", "records.jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	ev := record.Event{EventID: "ev1", Type: record.EventTPC, Provider: "P", Time: t0,
		ServerIP: "192.0.2.1", Data: json.RawMessage(`{"k":1}`), Valid: true}
	if err := st.Append(ctx, records(0, 20), []record.Event{ev}); err != nil {
		t.Fatal(err)
	}
	runUntil(t, st, path, 21)

	// More records while the sink is down, then a restart.
	if err := st.Append(ctx, records(20, 30), nil); err != nil {
		t.Fatal(err)
	}
	runUntil(t, st, path, 51)
	checkExactlyOnce(t, path, 50, "ev1")
	if c, _ := st.Cursor(ctx, "jsonl:"+path); c != 51 {
		t.Fatalf("cursor = %d, want 51", c)
	}
}

// TestStoppedBeforeStart: a sink stopped before it has even opened its
// file (collect of a short file, whose input ends first) still writes the
// whole log.
func TestStoppedBeforeStart(t *testing.T) {
	st := sinktest.OpenStore(t)
	ev := record.Event{EventID: "ev1", Type: record.EventTPC, Provider: "P", Time: t0,
		ServerIP: "192.0.2.1", Data: json.RawMessage(`{"k":1}`), Valid: true}
	if err := st.Append(context.Background(), records(0, 20), []record.Event{ev}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "records.jsonl")
	s, err := New(Config{Enabled: true, Path: path}, st, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunStopped(t, s)
	checkExactlyOnce(t, path, 20, "ev1")
}

// TestCrashRecovery simulates a crash after a batch was fsynced but before
// the cursor moved, followed by a torn line from a write in progress.
func TestCrashRecovery(t *testing.T) {
	st := sinktest.OpenStore(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "records.jsonl")
	ev := record.Event{EventID: "ev1", Type: record.EventTPC, Provider: "P", Time: t0,
		ServerIP: "192.0.2.1", Data: json.RawMessage(`{}`), Valid: true}
	if err := st.Append(ctx, records(0, 25), nil); err != nil {
		t.Fatal(err)
	}
	runUntil(t, st, path, 25)
	// The cursor update of the last batch (7 per batch: 22..25) was lost.
	if err := st.SetCursor(ctx, "jsonl:"+path, 21); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"record_id":"0000000000000000000000000000001a","st`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := st.Append(ctx, records(25, 5), []record.Event{ev}); err != nil {
		t.Fatal(err)
	}
	runUntil(t, st, path, 31)
	checkExactlyOnce(t, path, 30, "ev1")
}

func TestNewRejectsEmptyPath(t *testing.T) {
	if _, err := New(Config{}, nil, nil, nil); err == nil {
		t.Fatal("New accepted an empty path")
	}
}

// TestSharesMetricsWithOtherSinks: the jsonl sink registers the same
// xrdmon_sink_* vectors as every other sink, so both fit on one registry.
func TestSharesMetricsWithOtherSinks(t *testing.T) {
	st := sinktest.OpenStore(t)
	reg := prometheus.NewRegistry()
	dir := t.TempDir()
	for _, name := range []string{"a.jsonl", "b.jsonl"} {
		if _, err := New(Config{Path: filepath.Join(dir, name)}, st, nil, reg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := deliver.New(st, nopDeliverer{}, deliver.Options{Name: "other"}, nil, reg); err != nil {
		t.Fatalf("another sink on the same registry: %v", err)
	}
	if _, err := New(Config{Path: filepath.Join(dir, "a.jsonl")}, st, nil, reg); err == nil {
		t.Fatal("a second sink for the same path registered its metrics")
	}
}

type nopDeliverer struct{}

func (nopDeliverer) Deliver(context.Context, []store.Entry) error { return nil }

// A JSON-lines output with schema gracc writes the flavour it is given;
// with wlcg_only a record matching the WLCG rules is a WLCG line instead
// of a GRACC one, as the Go collector's file output writes it.
func TestGRACCFlavourLines(t *testing.T) {
	for _, c := range []struct {
		flavour  string
		wlcgOnly bool
		firstKey string
	}{
		{"python", false, "timestamp"},
		{"go", false, "@timestamp"},
		{"go", true, "@timestamp"},
	} {
		t.Run(fmt.Sprint(c.flavour, c.wlcgOnly), func(t *testing.T) {
			st := sinktest.OpenStore(t)
			ctx := context.Background()
			recs := records(0, 4)
			recs[1].Path, recs[3].Path = "/data/x", "/data/y" // not WLCG
			recs[0].TokenSubject = "alice-token"
			if err := st.Append(ctx, recs, nil); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "out.jsonl")
			cfg := Config{Enabled: true, Path: path, Schema: record.SchemaGRACC, GRACCFlavour: c.flavour, WLCGOnly: c.wlcgOnly}
			s, err := New(cfg, st, nil, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			for deadline := time.Now().Add(20 * time.Second); countLines(path) < 4 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			lines := readLines(t, path)
			if len(lines) != 4 {
				t.Fatalf("%d lines", len(lines))
			}
			for i, l := range lines {
				_, gracc := l[c.firstKey]
				_, wlcg := l["site_name"]
				if wantWLCG := c.wlcgOnly && i%2 == 0; gracc == wantWLCG || wlcg != wantWLCG {
					t.Errorf("line %d: %v", i, l)
				}
			}
			if c.wlcgOnly {
				return
			}
			if l := lines[0]; l["token_subject"] != "alice-token" {
				t.Errorf("token subject not written: %v", l)
			}
			if _, ok := lines[1]["user_dn"]; ok != (c.flavour == "go") {
				t.Errorf("user_dn written %v in flavour %s", ok, c.flavour)
			}
		})
	}
	if _, err := New(Config{Path: "x", Schema: record.SchemaGRACC, GRACCFlavour: "perl"}, sinktest.OpenStore(t), nil, nil); err == nil {
		t.Error("an unknown flavour was accepted")
	}
}
