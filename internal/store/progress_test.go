package store

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xrdmon/xrdmon/internal/record"
)

// testProgress returns a progress snapshot of the access of testRecord(i)
// taken at its End + d, with read bytes moved so far.
func testProgress(i int, d time.Duration, read int64) record.Record {
	r := testRecord(i)
	r.RecordID, r.HasOps = "", false
	r.End, r.Received = r.End.Add(d), r.Received.Add(d)
	r.ReadBytes = read
	return r
}

// TestProgressEntries: progress snapshots are entries of their own kind,
// after the batch's records and events, read back and given to listeners
// as Entry.Progress with every field; they are internal, listed neither as
// records nor as events, count as events, and are deduplicated by
// record.ProgressID.
func TestProgressEntries(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, nil)
	var heard []Entry
	s.Listen(func(es []Entry) {
		for _, e := range es {
			if e.Progress != nil {
				p := *e.Progress
				e.Progress = &p
			}
			heard = append(heard, Entry{Seq: e.Seq, Progress: e.Progress})
		}
	})
	p1, p2 := testProgress(1, -30*time.Second, 100), testProgress(2, -20*time.Second, 200)
	if err := s.AppendWithProgress(ctx, testRecords(10, 2), []record.Event{testEvent(1)}, []record.Record{p1, p2}); err != nil {
		t.Fatal(err)
	}
	all, err := s.Read(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 {
		t.Fatalf("read %d entries, want 5", len(all))
	}
	for i, e := range all[3:] {
		want := []record.Record{p1, p2}[i]
		if e.Seq != int64(4+i) || e.Record != nil || e.Event != nil || e.Progress == nil || !e.Internal() {
			t.Fatalf("entry %d: %+v, want a progress snapshot", e.Seq, e)
		}
		if got := record.AppendBinary(nil, e.Progress); string(got) != string(record.AppendBinary(nil, &want)) {
			t.Errorf("entry %d: read back %+v, want %+v", e.Seq, *e.Progress, want)
		}
		if h := heard[3+i]; h.Seq != e.Seq || h.Progress == nil || h.Progress.ReadBytes != want.ReadBytes {
			t.Errorf("listener: %+v, want seq %d with the snapshot", h, e.Seq)
		}
	}
	if all[0].Internal() || all[2].Internal() {
		t.Error("a record or an event counts as internal")
	}
	if got := testutil.ToFloat64(s.m.eventsAppended); got != 3 {
		t.Errorf("events appended = %v, want 3 (the event and the snapshots)", got)
	}
	var recs, evs int
	if err := s.rdb.QueryRowContext(ctx, `SELECT SUM(records), SUM(events) FROM blocks`).Scan(&recs, &evs); err != nil || recs != 2 || evs != 3 {
		t.Fatalf("blocks count %d records, %d events (%v); want 2, 3", recs, evs, err)
	}
	// Neither listing shows them.
	if rs, err := s.Query(ctx, Query{}); err != nil || len(rs) != 2 {
		t.Fatalf("Query: %d records, %v; want 2", len(rs), err)
	}
	if es, _, err := s.QueryEvents(ctx, EventQuery{}); err != nil || len(es) != 1 {
		t.Fatalf("QueryEvents: %d events, %v; want 1", len(es), err)
	}

	// A restart that makes the same snapshots again: dropped, in the
	// batch and across the reopen alike; a new snapshot of the same
	// access (more bytes) is not.
	s = reopen(t, s)
	p3 := testProgress(1, -10*time.Second, 150)
	if err := s.AppendWithProgress(ctx, nil, nil, []record.Record{p1, p2, p3, p3}); err != nil {
		t.Fatal(err)
	}
	if last := s.lastSeq.Load(); last != 6 {
		t.Fatalf("last seq %d, want 6 (p1, p2 and p3 again dropped)", last)
	}
	if got := testutil.ToFloat64(s.m.duplicates); got != 3 {
		t.Errorf("duplicates = %v, want 3", got)
	}
}
