package postgres

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/store"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain /store/x", "plain /store/x"},
		{"héllo", "héllo"},
		{"a\x00b", "a\uFFFDb"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
	} {
		if got := clean(tc.in); got != tc.want {
			t.Errorf("clean(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := cleanJSON([]byte(`{"a":"x\u0000y"}`)); got != `{"a":"x\ufffdy"}` {
		t.Errorf("cleanJSON = %s", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = clean("/store/data/file.root") }); n != 0 {
		t.Errorf("clean allocates %v times on a valid string", n)
	}
}

func TestPartitionOf(t *testing.T) {
	ts := time.Date(2026, 3, 31, 23, 59, 59, 0, time.FixedZone("x", -3600))
	for _, tc := range []struct {
		by, suffix, from, to string
	}{
		{PartitionDay, "20260401", "2026-04-01T00:00:00Z", "2026-04-02T00:00:00Z"},
		{PartitionMonth, "202604", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z"},
	} {
		s, f, to := partitionOf(ts, tc.by)
		if s != tc.suffix || f.Format(time.RFC3339) != tc.from || to.Format(time.RFC3339) != tc.to {
			t.Errorf("%s: %s [%s, %s)", tc.by, s, f, to)
		}
	}
}

func TestNewValidates(t *testing.T) {
	st := sinktest.OpenStore(t)
	if _, err := New(Config{}, st, nil, nil); err == nil || !strings.Contains(err.Error(), "empty url") {
		t.Fatalf("empty url: %v", err)
	}
	o := DefaultOptions()
	o.Partition = "week"
	if _, err := NewWithOptions(Config{URL: "postgres://x@127.0.0.1/db"}, o, st, nil, nil); err == nil {
		t.Fatal("bad partition accepted")
	}
}

// TestLoad: records and events arrive with their values, partitions are
// created, and a redelivery after the cursor is moved back stores nothing
// twice.
func TestLoad(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	st := sinktest.OpenStore(t)
	ctx := context.Background()
	const n = 3000 // 3000 minutes: three days
	recs := testRecords(0, n)
	recs[5].User = "bad\x00name"
	recs[6].Start = time.Time{}
	evs := []record.Event{sinktest.Event(1, record.EventCacheFileClose), sinktest.Event(2, record.EventTPC)}
	evs[1].Data = []byte(`"raw text"`)
	evs[1].Valid = false
	if err := st.Append(ctx, recs, evs); err != nil {
		t.Fatal(err)
	}
	opts := fastOptions(schema)
	opts.BatchSize = 700
	stop := sinktest.RunSink(t, newSink(t, u, opts, st))
	sinktest.WaitFor(t, "cursor at end", 30*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == sinktest.LastSeq(t, st) })
	stop()

	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records"); got != n {
		t.Fatalf("%d records, want %d", got, n)
	}
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".events"); got != 2 {
		t.Fatalf("%d events, want 2", got)
	}
	// Partitions: one per day of the records (Mar 1..3) and today's and
	// tomorrow's.
	parts := sinktest.PostgresValue[[]string](t, u, `SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '`+schema+`.records'::regclass`)
	for _, want := range []string{"records_p20260301", "records_p20260302", "records_p20260303",
		"records_p" + time.Now().UTC().Format("20060102")} {
		if !strings.Contains(strings.Join(parts, ","), want) {
			t.Errorf("partition %s missing from %v", want, parts)
		}
	}
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records_p20260302"); got != 1440 {
		t.Errorf("%d records in the partition of Mar 2, want 1440", got)
	}
	// Values.
	r := recs[1234]
	var got struct {
		end, start     time.Time
		user, path, vo string
		read, size     int64
		readMax        int32
	}
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.QueryRow(ctx, "SELECT end_time, start_time, user_name, path, vo, read_bytes, file_size, read_max FROM "+schema+".records WHERE record_id = $1", r.RecordID).
		Scan(&got.end, &got.start, &got.user, &got.path, &got.vo, &got.read, &got.size, &got.readMax); err != nil {
		t.Fatal(err)
	}
	if !got.end.Equal(r.End) || !got.start.Equal(r.Start) || got.user != r.User || got.path != r.Path || got.vo != r.VO ||
		got.read != r.ReadBytes || got.size != r.FileSize || got.readMax != r.ReadMax {
		t.Errorf("row %+v differs from record", got)
	}
	if u5 := sinktest.PostgresValue[string](t, u, "SELECT user_name FROM "+schema+".records WHERE record_id = $1", recs[5].RecordID); u5 != "bad\uFFFDname" {
		t.Errorf("NUL not replaced: %q", u5)
	}
	if s6 := sinktest.PostgresValue[*time.Time](t, u, "SELECT start_time FROM "+schema+".records WHERE record_id = $1", recs[6].RecordID); s6 != nil {
		t.Errorf("zero start stored as %v, want NULL", s6)
	}
	if lfn := sinktest.PostgresValue[string](t, u, "SELECT data->>'lfn' FROM "+schema+".events WHERE event_id = $1", evs[0].EventID); lfn != "/store/f1" {
		t.Errorf("event data lfn = %q", lfn)
	}
	if v := sinktest.PostgresValue[int32](t, u, "SELECT max(version) FROM "+schema+".schema_version"); v != SchemaVersion {
		t.Errorf("schema version %d", v)
	}

	// Redelivery: move the cursor back, append a duplicate-free tail, run
	// again: every row exactly once.
	if err := st.SetCursor(ctx, opts.Name, 1000); err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, testRecords(n, 10), nil); err != nil {
		t.Fatal(err)
	}
	sinktest.RunSink(t, newSink(t, u, opts, st))
	sinktest.WaitFor(t, "cursor at end again", 30*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == sinktest.LastSeq(t, st) })
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records"); got != n+10 {
		t.Fatalf("%d records after redelivery, want %d", got, n+10)
	}
}

// TestDuplicateAppend: the same record appended to two stores (as after a
// store loss and replay) and loaded by both is stored once.
func TestDuplicateAppend(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	ctx := context.Background()
	for range 2 {
		st := sinktest.OpenStore(t)
		if err := st.Append(ctx, testRecords(0, 100), nil); err != nil {
			t.Fatal(err)
		}
		opts := fastOptions(schema)
		stop := sinktest.RunSink(t, newSink(t, u, opts, st))
		sinktest.WaitFor(t, "cursor at end", 20*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == 100 })
		stop()
	}
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records"); got != 100 {
		t.Fatalf("%d records, want 100", got)
	}
}

// TestOutage loads through a loopback proxy that is down at first, then
// cut twice mid-stream: every row arrives exactly once.
func TestOutage(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	st := sinktest.OpenStore(t)
	ctx := context.Background()
	px := sinktest.NewProxy(t, dbAddr(t, u))
	opts := fastOptions(schema)
	opts.BatchSize = 500
	reg := prometheus.NewRegistry()
	s, err := NewWithOptions(Config{Enabled: true, URL: withAddr(t, u, px.Addr())}, opts, st, sinktest.Discard(), reg)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunSink(t, s)
	const n = 40000
	if err := st.Append(ctx, testRecords(0, n/4), nil); err != nil {
		t.Fatal(err)
	}
	sinktest.WaitFor(t, "failed connects", 10*time.Second, func() bool { return sinktest.SinkCounter(t, reg, "xrdmon_sink_errors_total", opts.Name) >= 2 })
	if c := sinktest.Cursor(t, st, opts.Name); c != 0 {
		t.Fatalf("cursor %d while the database is unreachable", c)
	}
	px.Start()
	for k := 1; k < 4; k++ {
		if err := st.Append(ctx, testRecords(k*n/4, n/4), nil); err != nil {
			t.Fatal(err)
		}
		if k < 3 {
			target := int64(k * n / 4)
			sinktest.WaitFor(t, "progress", 30*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) >= target })
			px.Cut()
			time.Sleep(100 * time.Millisecond)
			px.Start()
		}
	}
	sinktest.WaitFor(t, "cursor at end", 60*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == n })
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records"); got != n {
		t.Fatalf("%d rows, want %d", got, n)
	}
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(DISTINCT record_id) FROM "+schema+".records"); got != n {
		t.Fatalf("%d distinct ids, want %d", got, n)
	}
	t.Logf("outage: %d rows exactly once, %v failed attempts", n, sinktest.SinkCounter(t, reg, "xrdmon_sink_errors_total", opts.Name))
}

// TestServerRestart restarts the PostgreSQL cluster while loading. It
// disturbs every other user, so it runs only with
// XRDMON_TEST_RESTART_SERVICES=1.
func TestServerRestart(t *testing.T) {
	if os.Getenv("XRDMON_TEST_RESTART_SERVICES") != "1" {
		t.Skip("restarts the shared database: set XRDMON_TEST_RESTART_SERVICES=1")
	}
	u := testURL(t)
	schema := sinktest.PostgresSchema(t, u)
	st := sinktest.OpenStore(t)
	ctx := context.Background()
	opts := fastOptions(schema)
	opts.MaxBackoff = 2 * time.Second
	sinktest.RunSink(t, newSink(t, u, opts, st))
	restart := func() error {
		out, err := exec.Command("sh", "-c", "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main restart").CombinedOutput()
		if err != nil {
			t.Logf("restart: %v\n%s", err, out)
		}
		return err
	}
	const n = 100000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i += 1000 {
			if err := st.Append(ctx, testRecords(i, 1000), nil); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	sinktest.WaitFor(t, "progress", 30*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) > 10000 })
	if err := restart(); err != nil {
		t.Fatal(err)
	}
	<-done
	sinktest.WaitFor(t, "cursor at end", 120*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == n })
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records"); got != n {
		t.Fatalf("%d rows, want %d", got, n)
	}
}

// TestRedeliveryFallback: a batch that is in part in the tables already
// (or repeats an entry) fails the direct COPY with a unique violation and
// is loaded through staging instead; the writer stays on staging until a
// batch holds no duplicate. Every row is stored once.
func TestRedeliveryFallback(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	w, err := NewWriter(u, fastOptions(schema), sinktest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	entries := func(ids ...int) []store.Entry {
		var out []store.Entry
		for i, id := range ids {
			if id < 0 {
				e := sinktest.Event(-id, record.EventTPC)
				out = append(out, store.Entry{Seq: int64(i + 1), Event: &e})
				continue
			}
			r := testRecord(id)
			out = append(out, store.Entry{Seq: int64(i + 1), Record: &r})
		}
		return out
	}
	span := func(from, to int) []int {
		var ids []int
		for i := from; i < to; i++ {
			ids = append(ids, i)
		}
		return ids
	}
	for _, tc := range []struct {
		name      string
		ids       []int
		dupes     bool  // w.dupes after the batch
		recs, evs int64 // rows after the batch
	}{
		{"new", append(span(0, 100), -1, -2), false, 100, 2},
		{"overlap", append(span(50, 150), -2, -3), true, 150, 3},
		{"repeat within batch, on staging", []int{200, 200, 201}, true, 152, 3},
		{"clean batch leaves staging", span(300, 310), false, 162, 3},
		{"repeat within batch, fast path", []int{400, 401, 400}, true, 164, 3},
	} {
		if err := w.Deliver(ctx, entries(tc.ids...)); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if w.dupes != tc.dupes {
			t.Errorf("%s: dupes %v, want %v", tc.name, w.dupes, tc.dupes)
		}
		if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records"); got != tc.recs {
			t.Errorf("%s: %d records, want %d", tc.name, got, tc.recs)
		}
		if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".events"); got != tc.evs {
			t.Errorf("%s: %d events, want %d", tc.name, got, tc.evs)
		}
	}
}

// TestPartitionsBoundedByClock: records whose end times (server clocks)
// are spread over 1970-2102 all load, but create no partition each: those
// far from their receive time go to the default partition. A later record
// whose day now has a partition of its own moves the earlier rows of that
// day out of the default partition.
func TestPartitionsBoundedByClock(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	st := sinktest.OpenStore(t)
	ctx := context.Background()
	const n = 500
	recs := testRecords(0, n)
	lo, hi := time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC), time.Date(2102, 1, 1, 0, 0, 0, 0, time.UTC)
	recv := time.Now().UTC()
	for i := range recs {
		recs[i].End = lo.Add(time.Duration(i) * (hi.Sub(lo) / n))
		recs[i].Start = recs[i].End.Add(-time.Minute)
		recs[i].Received = recv
		recs[i].RecordID = fmt.Sprintf("clock-%d", i)
	}
	if err := st.Append(ctx, recs, nil); err != nil {
		t.Fatal(err)
	}
	opts := fastOptions(schema)
	stop := sinktest.RunSink(t, newSink(t, u, opts, st))
	sinktest.WaitFor(t, "cursor at end", 30*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == sinktest.LastSeq(t, st) })
	stop()
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records"); got != n {
		t.Fatalf("%d records loaded, want %d", got, n)
	}
	countParts := func() int64 {
		return sinktest.PostgresValue[int64](t, u, `SELECT count(*) FROM pg_inherits WHERE inhparent = '`+schema+`.records'::regclass`)
	}
	// The default partition, today's and the ones ahead, and at most the
	// few days within the window that the spread happens to hit.
	if got := countParts(); got > 6 {
		t.Errorf("%d partitions for %d records over 132 years, want a handful", got, n)
	}
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records_pdefault"); got < n-5 {
		t.Errorf("%d records in the default partition, want nearly all %d", got, n)
	}

	// A record of 1999-12-31 received at that time gets its own partition;
	// the earlier row of that day moves there from the default partition.
	day := time.Date(1999, 12, 31, 12, 0, 0, 0, time.UTC)
	late := testRecords(n, 2)
	late[0].End, late[0].Received, late[0].RecordID = day, recv, "clock-late-0"
	late[1].End, late[1].Received, late[1].RecordID = day.Add(time.Hour), day.Add(2*time.Hour), "clock-late-1"
	if err := st.Append(ctx, late, nil); err != nil {
		t.Fatal(err)
	}
	stop = sinktest.RunSink(t, newSink(t, u, opts, st))
	sinktest.WaitFor(t, "cursor at end again", 30*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == sinktest.LastSeq(t, st) })
	stop()
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records_p19991231"); got != 2 {
		t.Errorf("%d records in the partition of 1999-12-31, want 2 (one moved from the default partition)", got)
	}
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records"); got != n+2 {
		t.Fatalf("%d records, want %d", got, n+2)
	}
}

// TestRefusedRowSetAside: an event PostgreSQL refuses (a number numeric
// cannot hold, as a store written before events were normalised may
// contain) among 50 records: the records and the good events are loaded,
// the refused event is set aside in the store's dead letters with
// PostgreSQL's reason and counted, and delivery goes on with what follows.
func TestRefusedRowSetAside(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	st := sinktest.OpenStore(t)
	ctx := context.Background()
	poison := sinktest.Event(1, record.EventTCPMon)
	poison.Data = []byte(`{"a":1e200000}`)
	good := sinktest.Event(2, record.EventTCPMon)
	good.Data = []byte(`{"a":1}`)
	if err := st.Append(ctx, testRecords(0, 25), []record.Event{poison}); err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, testRecords(25, 25), []record.Event{good}); err != nil {
		t.Fatal(err)
	}
	opts := fastOptions(schema)
	reg := prometheus.NewRegistry()
	s, err := NewWithOptions(Config{Enabled: true, URL: u}, opts, st, sinktest.Discard(), reg)
	if err != nil {
		t.Fatal(err)
	}
	stop := sinktest.RunSink(t, s)
	sinktest.WaitFor(t, "cursor at end", 30*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == sinktest.LastSeq(t, st) })
	// More after the refusal: delivery goes on.
	if err := st.Append(ctx, testRecords(50, 10), nil); err != nil {
		t.Fatal(err)
	}
	sinktest.WaitFor(t, "cursor at end again", 30*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == sinktest.LastSeq(t, st) })
	stop()
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".records"); got != 60 {
		t.Errorf("%d records loaded, want 60", got)
	}
	if got := sinktest.PostgresValue[int64](t, u, "SELECT count(*) FROM "+schema+".events"); got != 1 {
		t.Errorf("%d events loaded, want the good one", got)
	}
	dl, err := st.DeadLetters(ctx, opts.Name, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != 1 || dl[0].EntryID != poison.EventID || dl[0].Kind != "event" || !strings.Contains(dl[0].Error, "numeric") {
		t.Fatalf("dead letters %+v, want the poison event with PostgreSQL's reason", dl)
	}
	if !strings.Contains(string(dl[0].Data), poison.EventID) {
		t.Errorf("dead letter data %s does not hold the event", dl[0].Data)
	}
	if n := sinktest.SinkCounter(t, reg, "xrdmon_sink_dead_letters_total", opts.Name); n != 1 {
		t.Errorf("xrdmon_sink_dead_letters_total = %v, want 1", n)
	}
}
