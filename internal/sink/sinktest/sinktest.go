// Package sinktest holds helpers shared by the tests of the sink packages
// (amqp, postgres, jsonl, deliver): a store in a temporary directory,
// deterministic records and events, running a sink until the test ends,
// polling, metric look-up, service discovery for tests that need a real
// broker or database, and a pausable TCP proxy for outage tests.
//
// It is imported only by _test.go files; nothing in a binary uses it.
// Every helper that can fail takes a testing.TB and fails the test (or
// benchmark) itself.
package sinktest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// T0 is the reference time of Record and Event: record i ends at
// T0 + i*step, event i happens at T0 + i seconds.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// OpenStore opens a store in a temporary directory, closed at cleanup. It
// has no retention and no size bound (nothing is ever dropped) and syncs
// with SyncNormal, which is enough for tests that do not crash the machine.
func OpenStore(tb testing.TB) *store.Store {
	tb.Helper()
	o := store.DefaultOptions()
	o.Path = filepath.Join(tb.TempDir(), "store.db")
	o.Retention, o.MaxBytes = 0, 0
	o.Synchronous = store.SyncNormal
	st, err := store.Open(o, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	return st
}

// Record returns record i, with every field a sink writes set: a CMS read
// of /store/data/file<i>.root by one of 50 users on one of 8 servers, of
// i*1000 bytes in 42 reads. Its RecordID is unique per i, and it ends at
// T0 + i*step (so step sets how records spread over time).
func Record(i int, step time.Duration) record.Record {
	return record.Record{
		RecordID:   fmt.Sprintf("%032x", uint64(i+1)*0x9e3779b97f4a7c15),
		Start:      T0.Add(time.Duration(i)*step - 90*time.Second),
		End:        T0.Add(time.Duration(i) * step),
		Received:   T0.Add(time.Duration(i)*step + 2*time.Second),
		ServerIP:   fmt.Sprintf("192.0.2.%d", i%8),
		ServerHost: fmt.Sprintf("xrootd%d.example.org", i%8),
		ServerID:   uint64(0xabcdef000000 + i%8),
		ServerStod: 1767225600,
		Site:       "T2_US_UCSD",
		Protocol:   "xroot",
		User:       fmt.Sprintf("user%d", i%50),
		ClientHost: "worker-17.example.edu",
		DN:         "/DC=org/DC=example/OU=People/CN=Some User 12345",
		VO:         "cms",
		FileID:     uint32(i),
		Path:       fmt.Sprintf("/store/data/file%d.root", i),
		FileSize:   2_000_000_000 + int64(i),
		ReadBytes:  int64(i) * 1000,
		HasOps:     true,
		ReadOps:    42,
		ReadMin:    1024,
		ReadMax:    1 << 20,
	}
}

// Records returns mk(from), ..., mk(from+n-1).
func Records(from, n int, mk func(int) record.Record) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		out[i] = mk(from + i)
	}
	return out
}

// Event returns a valid event i of type typ from provider C, at T0 + i
// seconds, whose data names the file /store/f<i>.
func Event(i int, typ record.EventType) record.Event {
	return record.Event{
		EventID:  fmt.Sprintf("e%031x", i+1),
		Type:     typ,
		Provider: "C",
		Time:     T0.Add(time.Duration(i) * time.Second),
		Received: T0.Add(time.Duration(i)*time.Second + time.Second),
		ServerIP: "192.0.2.1",
		Data:     json.RawMessage(fmt.Sprintf(`{"lfn":"/store/f%d","size":1000}`, i)),
		Valid:    true,
	}
}

// Runner is what Start runs: a sink, or a deliver loop.
type Runner interface {
	Run(ctx context.Context) error
}

// Start runs r.Run in a goroutine. The returned stop cancels Run's context,
// waits for Run to return and returns its error; it may be called more than
// once (later calls return the same error). Cleanup calls stop and ignores
// the error.
func Start(tb testing.TB, r Runner) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	tb.Cleanup(func() { _ = stop() })
	return stop
}

// RunSink is Start whose stop reports an error from Run with tb.Errorf,
// once, whether stop is called by the test or at cleanup.
func RunSink(tb testing.TB, r Runner) (stop func()) {
	stopRun := Start(tb, r)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := stopRun(); err != nil {
				tb.Errorf("run: %v", err)
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}

// RunStopped runs r with a context cancelled before it starts, as when
// the input ends first (a collect of a short file), and fails tb if Run
// returns an error: stopped, a sink still does its stop's work.
func RunStopped(tb testing.TB, r Runner) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		tb.Fatalf("Run with a cancelled context: %v", err)
	}
}

// Cursor returns the stored cursor of sink name.
func Cursor(tb testing.TB, st *store.Store, name string) int64 {
	tb.Helper()
	c, err := st.Cursor(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// LastSeq returns the sequence number of the newest entry in st.
func LastSeq(tb testing.TB, st *store.Store) int64 {
	tb.Helper()
	c, err := st.LastSeq(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// WaitFor polls cond every 20 ms until it holds, and fails tb, naming what,
// when it still does not hold after d.
func WaitFor(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Discard returns a logger that writes nothing.
func Discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// SinkCounter returns the value of counter metric whose label sink is name,
// gathered from reg, or 0 when there is no such series yet.
func SinkCounter(tb testing.TB, reg prometheus.Gatherer, metric, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "sink" && lp.GetValue() == name {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// Fill appends mk(0), ..., mk(n-1) to st in batches of 1000 records.
func Fill(tb testing.TB, st *store.Store, n int, mk func(int) record.Record) {
	tb.Helper()
	for i := 0; i < n; i += 1000 {
		if err := st.Append(context.Background(), Records(i, min(1000, n-i), mk), nil); err != nil {
			tb.Fatal(err)
		}
	}
}

// DrainBench measures how fast r, the sink named name, empties st (which
// holds b.N records, see Fill): it resets b's timer, runs r until its cursor
// reaches the newest entry, reports b.N per second as "records/s", then
// stops the timer and r.
func DrainBench(b *testing.B, st *store.Store, name string, r Runner) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	stop := RunSink(b, r)
	last := LastSeq(b, st)
	for Cursor(b, st, name) < last {
		time.Sleep(5 * time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
	b.StopTimer()
	stop()
}
