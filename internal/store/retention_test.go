package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xrdmon/xrdmon/internal/record"
)

func TestRetention(t *testing.T) {
	s, _ := openTest(t, func(o *Options) { o.Retention = time.Hour; o.BatchSize = 7 })
	ctx := context.Background()
	// Records end at t0 + i s, events at t0 + i s too. Retention deletes
	// whole blocks (one per Append here): seq 1..20, 21..51, 52..102.
	for _, b := range []struct {
		from, n int
		evs     []record.Event
	}{{0, 20, nil}, {20, 30, []record.Event{testEvent(0)}}, {50, 50, []record.Event{testEvent(3000)}}} {
		if err := s.Append(ctx, testRecords(b.from, b.n), b.evs); err != nil {
			t.Fatal(err)
		}
	}
	// Now is t0 + 1h + 50s: records 0..49 and event 0 are expired.
	now := t0.Add(time.Hour + 50*time.Second)

	// A sink that has passed only seq 20 holds back expired records 20..49
	// (and event 0, in their block).
	if err := s.SetCursor(ctx, "slow", 20); err != nil {
		t.Fatal(err)
	}
	n, held, err := s.retain(ctx, now)
	if err != nil || n != 20 || held != (holder{"slow", true}) {
		t.Fatalf("retain = %d, %+v, %v; want 20 deleted, held by slow (running)", n, held, err)
	}
	first, _ := s.Read(ctx, 0, 1)
	if len(first) != 1 || first[0].Seq != 21 {
		t.Fatalf("first entry after retention: %+v, want seq 21", first)
	}

	// Once the sink has passed everything, all expired entries go.
	if err := s.SetCursor(ctx, "slow", 102); err != nil {
		t.Fatal(err)
	}
	n, held, err = s.retain(ctx, now)
	if err != nil || n != 31 || held.sink != "" { // records 20..49 and event 0
		t.Fatalf("retain = %d, %+v, %v; want 31", n, held, err)
	}
	left, _ := s.Read(ctx, 0, 1000)
	if len(left) != 51 || left[0].Record.RecordID != testRecord(50).RecordID || left[50].Event == nil || left[0].Seq != 52 {
		t.Fatalf("left %d entries, want records 50..99 and event 3000", len(left))
	}
	if got, _ := s.Query(ctx, Query{To: now.Add(-time.Hour)}); len(got) != 0 {
		t.Fatalf("%d expired records still queryable", len(got))
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	s, _ := openTest(t, func(o *Options) { o.Retention = time.Nanosecond })
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Append(ctx, testRecords(0, 5), nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	// The first pass runs at once; wait for it to empty the store.
	for {
		if got, _ := s.Read(ctx, 0, 10); len(got) == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestMaxBytes fills a store bounded to 1 MiB.
func TestMaxBytes(t *testing.T) {
	const max = 1 << 20
	t.Run("drops delivered", func(t *testing.T) {
		s, _ := openTest(t, func(o *Options) { o.MaxBytes = max; o.BatchSize = 100 })
		ctx := context.Background()
		for i := range 40 { // ~40 x 400 x ~150 bytes compressed, several times max
			if err := s.SetCursor(ctx, "fast", s.lastSeq.Load()); err != nil {
				t.Fatal(err)
			}
			if err := s.Append(ctx, testRecords(i*400, 400), nil); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
		}
		used, err := s.usedBytes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if used > max+max/2 {
			t.Fatalf("used %d bytes, bound %d", used, max)
		}
		entries, _ := s.Read(ctx, 0, 100000)
		if len(entries) == 0 || entries[len(entries)-1].Seq != 16000 || entries[0].Seq == 1 {
			t.Fatalf("want the newest entries kept and the oldest dropped, got %d entries", len(entries))
		}
	})
	t.Run("refuses undelivered", func(t *testing.T) {
		s, _ := openTest(t, func(o *Options) { o.MaxBytes = max; o.BatchSize = 100 })
		ctx := context.Background()
		if err := s.SetCursor(ctx, "stuck", 0); err != nil {
			t.Fatal(err)
		}
		var err error
		i := 0
		for ; i < 100 && err == nil; i++ {
			err = s.Append(ctx, testRecords(i*400, 400), nil)
		}
		if !errors.Is(err, ErrFull) || errors.Is(err, ErrDiskFull) {
			t.Fatalf("after %d batches: err = %v, want ErrFull", i, err)
		}
		last := s.lastSeq.Load()
		// The sink catches up: appends are accepted again.
		if err := s.SetCursor(ctx, "stuck", last); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, testRecords(100000, 100), nil); err != nil {
			t.Fatalf("after the sink caught up: %v", err)
		}
		if got, _ := s.Read(ctx, last, 1000); len(got) != 100 {
			t.Fatalf("read %d new entries, want 100", len(got))
		}
	})
}

// TestDiskFull simulates a full disk with SQLite's max_page_count: Append
// fails with ErrDiskFull, nothing of the failed batch is visible, the
// database stays intact, and appends work again once there is room.
func TestDiskFull(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	if err := s.Append(ctx, testRecords(0, 100), nil); err != nil {
		t.Fatal(err)
	}
	var pages int64
	if err := s.wc.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.wc.ExecContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages+5)); err != nil {
		t.Fatal(err)
	}
	var err error
	i := 1
	for ; i < 50 && err == nil; i++ {
		err = s.Append(ctx, testRecords(i*100, 100), nil)
	}
	if !errors.Is(err, ErrDiskFull) || !errors.Is(err, ErrFull) {
		t.Fatalf("err = %v, want ErrDiskFull and ErrFull", err)
	}
	t.Logf("full after %d batches: %v", i-1, err)
	last := s.lastSeq.Load()
	entries, _ := s.Read(ctx, 0, 100000)
	if int64(len(entries)) != last || entries[len(entries)-1].Seq != last {
		t.Fatalf("read %d entries, last seq %d: the failed batch left traces", len(entries), last)
	}
	var check string
	if err := s.wc.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	// Space comes back.
	if _, err := s.wc.ExecContext(ctx, "PRAGMA max_page_count = 1000000000"); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, testRecords(900000, 100), nil); err != nil {
		t.Fatalf("append after space came back: %v", err)
	}
	if got, _ := s.Read(ctx, last, 1000); len(got) != 100 || got[0].Seq != last+1 {
		t.Fatalf("after recovery read %d entries", len(got))
	}
}

// TestFutureTimesExpire: records and events claiming times far after their
// receive time (a server clock in 2261, a summary tod past what int64
// nanoseconds hold) are indexed at most maxTimeAfter after it, counted,
// and expire with the rest (issue 25: 1,840 expired records and 7,331
// events were never deleted); earlier times are kept.
func TestFutureTimesExpire(t *testing.T) {
	s, _ := openTest(t, func(o *Options) { o.Retention = time.Hour })
	ctx := context.Background()
	recs := testRecords(0, 4)
	recs[3].End = recs[3].Received.Add(-300 * 24 * time.Hour) // a late delivery: kept as it is
	recs[0].End = time.Date(2261, 1, 1, 0, 0, 0, 0, time.UTC)
	recs[1].End, recs[1].Start = time.Time{}, time.Unix(1<<40, 0) // year 34,000
	evs := []record.Event{testEvent(1), testEvent(2)}
	evs[0].Time = time.Date(2261, 1, 1, 0, 0, 0, 0, time.UTC)
	evs[1].Time = time.Unix(1<<62, 0) // UnixNano overflows
	if err := s.Append(ctx, recs, evs); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.m.timesClamped); got != 4 {
		t.Errorf("times clamped: %v, want 4", got)
	}
	// Listed within the window, in order, with the times they claimed.
	got, err := s.Query(ctx, Query{From: t0, To: t0.Add(2 * time.Hour)})
	if err != nil || len(got) != 3 || !got[2].End.Equal(recs[0].End) && !got[2].Start.Equal(recs[1].Start) {
		t.Fatalf("query: %d records, %v", len(got), err)
	}
	if old, err := s.Query(ctx, Query{To: t0.Add(-200 * 24 * time.Hour)}); err != nil || len(old) != 1 || old[0].RecordID != recs[3].RecordID {
		t.Fatalf("the late record by its own time: %d records, %v", len(old), err)
	}
	evGot, _, err := s.QueryEvents(ctx, EventQuery{From: t0})
	if err != nil || len(evGot) != 2 {
		t.Fatalf("events: %d, %v", len(evGot), err)
	}
	n, _, err := s.retain(ctx, t0.Add(maxTimeAfter+time.Hour+time.Minute))
	if err != nil || n != 6 {
		t.Fatalf("retain = %d, %v; want all 6 entries expired", n, err)
	}
}

// TestRetentionHeldByRemovedOutput: the cursor of an output that no longer
// runs (a store reopened without it) still holds retention back, says so,
// and lets go once it is forgotten (xrdmon outputs --forget).
func TestRetentionHeldByRemovedOutput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s, _ := openTest(t, func(o *Options) { o.Path = path; o.Retention = time.Hour })
	ctx := context.Background()
	if err := s.Append(ctx, testRecords(0, 20), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SetCursor(ctx, "old-output", 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = openTest(t, func(o *Options) { o.Path = path; o.Retention = time.Hour })
	now := t0.Add(48 * time.Hour)
	if _, held, err := s.retain(ctx, now); err != nil || held != (holder{"old-output", false}) {
		t.Fatalf("held by %+v, %v; want old-output, not running", held, err)
	}
	cs, err := s.Reader.Cursors(ctx)
	if err != nil || len(cs) != 1 || cs[0].Sink != "old-output" || cs[0].Seq != 5 || cs[0].Updated.IsZero() {
		t.Fatalf("cursors %+v, %v", cs, err)
	}
	if err := s.DeleteCursor(ctx, "old-output"); err != nil {
		t.Fatal(err)
	}
	if n, held, err := s.retain(ctx, now); err != nil || n != 20 || held.sink != "" {
		t.Fatalf("after forgetting: %d deleted, held by %+v, %v", n, held, err)
	}
}
