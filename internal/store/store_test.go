package store

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xrdmon/xrdmon/internal/record"
)

func TestAppendReadCursor(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	recs := testRecords(0, 10)
	evs := []record.Event{testEvent(0), testEvent(1), testEvent(2)}
	if err := s.Append(ctx, recs, evs); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, testRecords(10, 2), nil); err != nil {
		t.Fatal(err)
	}
	last, _ := s.LastSeq(ctx)
	if last != 15 {
		t.Fatalf("LastSeq = %d, want 15", last)
	}
	all, err := s.Read(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 15 {
		t.Fatalf("read %d entries, want 15", len(all))
	}
	for i, e := range all {
		if e.Seq != int64(i+1) {
			t.Fatalf("entry %d has seq %d", i, e.Seq)
		}
		if (e.Record == nil) == (e.Event == nil) {
			t.Fatalf("entry %d: want exactly one of record and event", i)
		}
		switch {
		case i < 10:
			assertRecordEqual(t, e.Record, &recs[i])
		case i < 13:
			want := evs[i-10]
			if e.Event == nil || e.Event.EventID != want.EventID || !e.Event.Time.Equal(want.Time) ||
				string(e.Event.Data) != string(want.Data) || e.Event.Type != want.Type {
				t.Fatalf("entry %d = %+v, want event %+v", i, e.Event, want)
			}
		default:
			if e.Record == nil || e.Record.RecordID != testRecord(i-3).RecordID {
				t.Fatalf("entry %d is not record %d", i, i-3)
			}
		}
	}
	part, err := s.Read(ctx, 9, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(part) != 3 || part[0].Seq != 10 || part[0].Record == nil || part[1].Event == nil || part[2].Seq != 12 {
		t.Fatalf("Read(9, 3) = %+v", part)
	}
	if end, _ := s.Read(ctx, 15, 10); len(end) != 0 {
		t.Fatalf("read past the end returned %d entries", len(end))
	}

	if c, err := s.Cursor(ctx, "amqp:gracc"); err != nil || c != 0 {
		t.Fatalf("unknown cursor = %d, %v; want 0, nil", c, err)
	}
	if err := s.SetCursor(ctx, "amqp:gracc", 12); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Cursor(ctx, "amqp:gracc"); c != 12 {
		t.Fatalf("cursor = %d, want 12", c)
	}
	if err := s.SetCursor(ctx, "", 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty sink name: err = %v, want ErrInvalid", err)
	}
}

func assertRecordEqual(t *testing.T, got, want *record.Record) {
	t.Helper()
	if got == nil {
		t.Fatalf("got no record, want %s", want.RecordID)
	}
	g, w := *got, *want
	for _, p := range []struct{ g, w *time.Time }{{&g.Start, &w.Start}, {&g.End, &w.End}, {&g.Received, &w.Received}} {
		if !p.g.Equal(*p.w) {
			t.Fatalf("record %s: time %v, want %v", w.RecordID, *p.g, *p.w)
		}
		*p.g, *p.w = time.Time{}, time.Time{}
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("record differs:\n got %+v\nwant %+v", g, w)
	}
}

// TestAppendIdempotent: a restart without a checkpoint appends nothing of
// what the previous process stored again, and a batch never holds an id
// twice; duplicates leave no seq gap.
func TestAppendIdempotent(t *testing.T) {
	s, reg := openTest(t, nil)
	ctx := context.Background()
	batch := testRecords(0, 5)
	evs := []record.Event{testEvent(0)}
	if err := s.Append(ctx, batch, evs); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	// The same batch again, and a batch with a duplicate inside it.
	if err := s.Append(ctx, batch, evs); err != nil {
		t.Fatal(err)
	}
	mixed := append(testRecords(4, 3), testRecord(6)) // 4 is old, 6 twice
	if err := s.Append(ctx, mixed, nil); err != nil {
		t.Fatal(err)
	}
	last, _ := s.LastSeq(ctx)
	if last != 8 { // 5 records + 1 event + records 5 and 6
		t.Fatalf("LastSeq = %d, want 8", last)
	}
	all, _ := s.Read(ctx, 0, 100)
	if len(all) != 8 {
		t.Fatalf("read %d entries, want 8", len(all))
	}
	for i, e := range all {
		if e.Seq != int64(i+1) {
			t.Fatalf("duplicates left a seq gap: entry %d has seq %d", i, e.Seq)
		}
	}
	if got := testutil.ToFloat64(s.m.duplicates); got != 8 {
		t.Fatalf("duplicates = %v, want 8", got)
	}
	if got := testutil.ToFloat64(s.m.recordsAppended); got != 2 {
		t.Fatalf("records appended after the restart = %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg, "xrdmon_store_duplicates_total"); err != nil || n != 1 {
		t.Fatalf("duplicates metric not registered: %d, %v", n, err)
	}
	if err := s.Append(ctx, []record.Record{{}}, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("record without id: err = %v, want ErrInvalid", err)
	}
	bad := testEvent(99)
	bad.Data = []byte("{not json")
	if err := s.Append(ctx, nil, []record.Event{bad}); err == nil {
		t.Fatal("event with invalid data was accepted")
	}
}

func TestQuery(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	recs := testRecords(0, 200)
	recs[7].Reason = record.Timeout
	recs[8].Reason = record.Disconnect
	recs[9].ServerHost = "" // indexed under its IP
	if err := s.Append(ctx, recs, nil); err != nil {
		t.Fatal(err)
	}
	ids := func(f func(r *record.Record) bool) []string {
		var out []string
		for i := range recs {
			if f(&recs[i]) {
				out = append(out, recs[i].RecordID)
			}
		}
		return out
	}
	from, to := t0.Add(50*time.Second), t0.Add(60*time.Second)
	cases := map[string]struct {
		q    Query
		want []string
	}{
		"all":        {Query{Limit: 1000}, ids(func(*record.Record) bool { return true })},
		"time range": {Query{From: from, To: to}, ids(func(r *record.Record) bool { return !r.End.Before(from) && r.End.Before(to) })},
		"server host": {Query{Server: "xrootd3.example.org"},
			ids(func(r *record.Record) bool { return r.ServerHost == "xrootd3.example.org" })},
		"server ip without host": {Query{Server: "192.0.2.1"},
			ids(func(r *record.Record) bool { return r.ServerHost == "" && r.ServerIP == "192.0.2.1" })},
		"server ip": {Query{ServerIP: "192.0.2.1"}, ids(func(r *record.Record) bool { return r.ServerIP == "192.0.2.1" })},
		"site":      {Query{Site: "T1_US_FNAL"}, ids(func(r *record.Record) bool { return r.Site == "T1_US_FNAL" })},
		"user and time": {Query{User: "user7", From: from},
			ids(func(r *record.Record) bool { return r.User == "user7" && !r.End.Before(from) })},
		"path prefix": {Query{PathPrefix: "/store/data/Run2026A/MinimumBias/AOD/v1/000012/"},
			ids(func(r *record.Record) bool {
				return strings.HasPrefix(r.Path, "/store/data/Run2026A/MinimumBias/AOD/v1/000012/")
			})},
		"reason":  {Query{Reason: record.Timeout}, []string{recs[7].RecordID}},
		"partial": {Query{Partial: true}, []string{recs[7].RecordID, recs[8].RecordID}},
		"limit":   {Query{Limit: 3}, []string{recs[0].RecordID, recs[1].RecordID, recs[2].RecordID}},
		"newest":  {Query{Limit: 2, Newest: true}, []string{recs[199].RecordID, recs[198].RecordID}},
		"none":    {Query{Site: "nowhere"}, nil},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := s.Query(ctx, c.q)
			if err != nil {
				t.Fatal(err)
			}
			var gotIDs []string
			for _, r := range got {
				gotIDs = append(gotIDs, r.RecordID)
			}
			if len(c.want) == 0 && len(gotIDs) == 0 {
				return
			}
			if strings.Join(gotIDs, ",") != strings.Join(c.want, ",") {
				t.Fatalf("got %d records %v,\nwant %d %v", len(gotIDs), gotIDs, len(c.want), c.want)
			}
		})
	}
}

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"/a/b": "/a/c", "a\xff": "b", "\xff\xff": ""} {
		got, ok := prefixEnd(in)
		if got != want || ok != (want != "") {
			t.Errorf("prefixEnd(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestState(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	if _, err := s.GetState(ctx, "correlate/192.0.2.1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing key: err = %v, want ErrNotFound", err)
	}
	for _, v := range []string{"first", "second"} {
		if err := s.PutState(ctx, "correlate/192.0.2.1", []byte(v)); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetState(ctx, "correlate/192.0.2.1")
		if err != nil || string(got) != v {
			t.Fatalf("GetState = %q, %v; want %q", got, err, v)
		}
	}
	if err := s.PutState(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetState(ctx, "empty"); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty blob = %v, %v", got, err)
	}
	if err := s.DeleteState(ctx, "empty"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetState(ctx, "empty"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted key: err = %v", err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	o := DefaultOptions()
	o.Path = filepath.Join(t.TempDir(), "sub", "store.db")
	o.Retention = time.Hour
	ctx := context.Background()
	s, err := Open(o, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, testRecords(0, 20), []record.Event{testEvent(1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetCursor(ctx, "jsonl:/x", 21); err != nil {
		t.Fatal(err)
	}
	if err := s.PutState(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Retention deletes everything (all delivered, all old): the last
	// sequence number must survive anyway, or seqs would be reused.
	if n, _, err := s.retain(ctx, t0.Add(24*time.Hour)); err != nil || n != 21 {
		t.Fatalf("retain deleted %d, %v; want 21", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := s.Append(ctx, testRecords(30, 1), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}

	s, err = Open(o, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if last, _ := s.LastSeq(ctx); last != 21 {
		t.Fatalf("LastSeq after reopen = %d, want 21", last)
	}
	if c, _ := s.Cursor(ctx, "jsonl:/x"); c != 21 {
		t.Fatalf("cursor after reopen = %d", c)
	}
	if v, err := s.GetState(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("state after reopen = %q, %v", v, err)
	}
	if err := s.Append(ctx, testRecords(100, 2), nil); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Read(ctx, 21, 10)
	if len(got) != 2 || got[0].Seq != 22 {
		t.Fatalf("after reopen read %+v, want seqs 22, 23", got)
	}
}

func TestReopenData(t *testing.T) {
	o := DefaultOptions()
	o.Path = filepath.Join(t.TempDir(), "store.db")
	ctx := context.Background()
	s, err := Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	recs := testRecords(0, 50)
	if err := s.Append(ctx, recs, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Read(ctx, 0, 100)
	if err != nil || len(got) != 50 {
		t.Fatalf("read %d, %v after reopen; want 50", len(got), err)
	}
	for i := range got {
		assertRecordEqual(t, got[i].Record, &recs[i])
	}
}

func TestBacklogMetric(t *testing.T) {
	s, reg := openTest(t, nil)
	ctx := context.Background()
	if err := s.SetCursor(ctx, "pg", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, testRecords(0, 10), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SetCursor(ctx, "amqp", 4); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP xrdmon_sink_backlog_records Entries (records and events) in the store that the sink has not yet delivered.
# TYPE xrdmon_sink_backlog_records gauge
xrdmon_sink_backlog_records{sink="amqp"} 6
xrdmon_sink_backlog_records{sink="pg"} 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "xrdmon_sink_backlog_records"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "xrdmon_store_bytes", "xrdmon_store_batch_duration_seconds",
		"xrdmon_store_records_appended_total"); err != nil || n != 3 {
		t.Fatalf("store metrics: %d, %v", n, err)
	}
}

// cancelAfter is a context whose Err reports cancellation from its n-th
// call on (Done stays nil), to cancel an Append between its chunks.
type cancelAfter struct {
	context.Context
	n int
}

func (c *cancelAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

func TestAppendCancelledMidBatch(t *testing.T) {
	s, _ := openTest(t, nil)
	if err := s.Append(context.Background(), testRecords(0, 3), nil); err != nil {
		t.Fatal(err)
	}
	// Two full blocks and a tail: cancelled before the second is written.
	n := 2*maxBlockEntries + 100
	ctx := &cancelAfter{Context: context.Background(), n: 1}
	err := s.Append(ctx, testRecords(3, n), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Append = %v, want context.Canceled", err)
	}
	if last, _ := s.LastSeq(context.Background()); last != 3 {
		t.Fatalf("LastSeq = %d after cancelled Append, want 3", last)
	}
	got, err := s.Read(context.Background(), 0, 1000)
	if err != nil || len(got) != 3 {
		t.Fatalf("Read = %d entries, %v; want the 3 of the first batch", len(got), err)
	}
	// The store still works, and the cancelled records can be appended.
	if err := s.Append(context.Background(), testRecords(3, n), nil); err != nil {
		t.Fatal(err)
	}
	if last, _ := s.LastSeq(context.Background()); last != int64(3+n) {
		t.Fatalf("LastSeq = %d, want %d", last, 3+n)
	}
}
