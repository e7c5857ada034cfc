package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xrdmon/xrdmon/internal/record"
)

// TestAppendDuplicates: an id seen earlier in the batch is skipped, and so
// is an id an earlier process appended after its oldest checkpoint (the
// entries a restart may produce again); duplicates take no sequence number.
func TestAppendDuplicates(t *testing.T) {
	o := DefaultOptions()
	o.Path = filepath.Join(t.TempDir(), "store.db")
	ctx := context.Background()
	s, err := Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	batch := testRecords(0, 100)
	batch = slices.Insert(batch, 60, testRecord(7)) // 7 twice in one batch
	if err := s.Append(ctx, batch, []record.Event{testEvent(1), testEvent(1)}); err != nil {
		t.Fatal(err)
	}
	if last := s.lastSeq.Load(); last != 101 {
		t.Fatalf("LastSeq = %d, want 101", last)
	}
	if got := testutil.ToFloat64(s.m.duplicates); got != 2 {
		t.Fatalf("duplicates = %v, want 2", got)
	}
	// Checkpoints after seq 101 and, for a second shard, after 151.
	if err := s.PutState(ctx, "shard-0", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, testRecords(100, 50), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutState(ctx, "shard-1", []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, testRecords(150, 50), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// After a restart, records 100..199 (appended after the oldest
	// checkpoint) are in the window; records before it are not.
	s, err = Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.recent) != 100 {
		t.Fatalf("duplicate window holds %d ids, want 100", len(s.recent))
	}
	if err := s.Append(ctx, testRecords(100, 120), nil); err != nil { // 100..199 again, 200..219 new
		t.Fatal(err)
	}
	if last := s.lastSeq.Load(); last != 221 {
		t.Fatalf("LastSeq = %d, want 221", last)
	}
	all, err := s.Read(ctx, 0, 1000)
	if err != nil || len(all) != 221 {
		t.Fatalf("read %d, %v; want 221", len(all), err)
	}
	for i, e := range all[:100] {
		if e.Seq != int64(i+1) || e.Record.RecordID != testRecord(i).RecordID {
			t.Fatalf("entry %d: seq %d record %s, want seq %d record %d", i, e.Seq, e.Record.RecordID, i+1, i)
		}
	}
	if got := all[len(all)-1].Record.RecordID; got != testRecord(219).RecordID {
		t.Fatalf("last record %s, want record 219", got)
	}
}

func TestQueryPathPrefix(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	paths := []string{"/a/b/file1", "/a/b/file2", "/a/b/fx", "/a/bc/x", "/a/b/c/d", "/a/b/file1.d/y",
		"/a/b/", "noslash", "/z", "", "/a/b/\u00ff\u00ff", "/a/b/\U0010ffff"}
	recs := testRecords(0, len(paths))
	for i := range recs {
		recs[i].Path = paths[i]
	}
	if err := s.Append(ctx, recs, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", "/a", "/a/b", "/a/b/", "/a/b/fi", "/a/b/file1", "/a/b/file1.", "/a/b/c",
		"no", "noslash", "/a/b/\xff", "/a/b/\u00ff", "/a/b/\U0010ffff", "/q", "/a/b/file1.d/", "\xff"} {
		var want []string
		for _, r := range recs {
			if strings.HasPrefix(r.Path, p) {
				want = append(want, r.Path)
			}
		}
		got, err := s.Query(ctx, Query{PathPrefix: p})
		if err != nil {
			t.Fatal(err)
		}
		var gotPaths []string
		for _, r := range got {
			gotPaths = append(gotPaths, r.Path)
		}
		if !slices.Equal(gotPaths, want) {
			t.Errorf("prefix %q: got %q, want %q", p, gotPaths, want)
		}
	}
}

// TestQueryPlans checks that each indexed filter picks its blocks through
// an index (postings or block times), never by a scan of every block row.
func TestQueryPlans(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	for i := range 5 {
		if err := s.Append(ctx, testRecords(10*i, 10), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PostNow(ctx); err != nil {
		t.Fatal(err)
	}
	from := t0.Add(time.Hour)
	for q, want := range map[*Query]string{
		{From: from, To: from.Add(time.Minute)}: "INDEX blocks_m",
		{Server: "xrootd1.example.org"}:         "PRIMARY KEY (name_id=?)",
		{Site: "T1_US_FNAL", From: from}:        "PRIMARY KEY (name_id=?)",
		{User: "user1", Newest: true}:           "PRIMARY KEY (name_id=?)",
		{PathPrefix: "/store/data/"}:            "PRIMARY KEY (name_id=?)",
		{PathPrefix: "/store/data/R"}:           "PRIMARY KEY (name_id=?)",
	} {
		qp, err := s.plan(ctx, *q)
		if err != nil || qp.none {
			t.Fatalf("%+v: plan %+v, %v", *q, qp, err)
		}
		query, args := querySQL(*q, &qp)
		rows, err := s.wc.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		joined := strings.Join(plan, "; ")
		t.Logf("%+v: %s", *q, joined)
		if !strings.Contains(joined, want) || strings.Contains(joined, "SCAN blocks") {
			t.Errorf("%+v: plan %q does not use %s", *q, joined, want)
		}
	}
}

// TestDictRollback: names inserted by a transaction that rolls back (here:
// disk full) must not stay cached, or later records would point to ids
// that do not exist.
func TestDictRollback(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	if err := s.Append(ctx, testRecords(0, 100), nil); err != nil {
		t.Fatal(err)
	}
	var pages int64
	if err := s.wc.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.wc.ExecContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages+2)); err != nil {
		t.Fatal(err)
	}
	batch := testRecords(1000, 3000) // more than the free pages left by the migrations
	for i := range batch {
		batch[i].Site = fmt.Sprintf("new-site-%d", i)
	}
	if err := s.Append(ctx, batch, nil); err == nil {
		t.Fatal("append into a full database succeeded")
	}
	if _, err := s.wc.ExecContext(ctx, "PRAGMA max_page_count = 1000000000"); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, batch, nil); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 250, 2999} {
		got, err := s.Query(ctx, Query{Site: batch[i].Site})
		if err != nil || len(got) != 1 || got[0].RecordID != batch[i].RecordID {
			t.Fatalf("site %s: got %d records, %v", batch[i].Site, len(got), err)
		}
	}
}

// TestMigrateV1 opens a version 1 database: its records keep their
// sequence numbers and stay queryable.
func TestMigrateV1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open(driverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations[0](ctx, tx); err != nil {
		t.Fatal(err)
	}
	recs := testRecords(0, 30)
	for i := range recs {
		r := &recs[i]
		if _, err := tx.ExecContext(ctx, `INSERT INTO records (seq, record_id, end_ns, start_ns, server, server_ip,
			site, user_name, path, reason, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			i+1, r.RecordID, recordTime(r), r.Start.UnixNano(), serverName(r.ServerHost, r.ServerIP), r.ServerIP,
			r.Site, r.User, r.Path, string(r.Reason), record.AppendJSON(nil, r)); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{`UPDATE meta SET value = 30 WHERE key = 'last_seq'`, `PRAGMA user_version = 1`} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, _ := openTest(t, func(o *Options) { o.Path = path })
	var v int
	if err := s.wc.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version = %d, %v", v, err)
	}
	all, err := s.Read(ctx, 0, 100)
	if err != nil || len(all) != 30 {
		t.Fatalf("read %d, %v after migration", len(all), err)
	}
	for i := range all {
		assertRecordEqual(t, all[i].Record, &recs[i])
	}
	if got, _ := s.Query(ctx, Query{User: "user7"}); len(got) != 1 || got[0].RecordID != recs[7].RecordID {
		t.Fatalf("query by user after migration: %d records", len(got))
	}
	// A migrated record is still a duplicate.
	if err := s.Append(ctx, testRecords(29, 2), nil); err != nil {
		t.Fatal(err)
	}
	if last := s.lastSeq.Load(); last != 31 {
		t.Fatalf("LastSeq = %d, want 31", last)
	}
}

// TestMigrateV8 opens a version 7 store holding an entry set aside twice
// (an isolation an outage interrupted): one copy remains, the oldest, and
// setting the entry aside again adds none.
func TestMigrateV8(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s, _ := openTest(t, func(o *Options) { o.Path = path })
	ctx := context.Background()
	rec := testRecords(0, 1)[0]
	for _, q := range []string{
		`DROP INDEX dead_letters_entry`,
		`INSERT INTO dead_letters (sink, seq, entry_id, kind, data, error, time_ns) VALUES
			('pg', 5, 'a', 'record', x'7b7d', 'first', 1), ('pg', 5, 'a', 'record', x'7b7d', 'second', 2),
			('amqp', 5, 'a', 'record', x'7b7d', 'other sink', 3)`,
		`PRAGMA user_version = 7`,
	} {
		if _, err := s.wc.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = openTest(t, func(o *Options) { o.Path = path })
	dl, err := s.DeadLetters(ctx, "", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != 2 || dl[0].Error != "first" || dl[1].Sink != "amqp" {
		t.Fatalf("dead letters after migration %+v, want pg's first and amqp's", dl)
	}
	added, err := s.PutDeadLetter(ctx, "pg", Entry{Seq: 5, Record: &rec}, errors.New("third"))
	if err != nil || added {
		t.Fatalf("set aside again: added %v, %v", added, err)
	}
	if dl, _ := s.DeadLetters(ctx, "pg", 0, 10); len(dl) != 1 {
		t.Fatalf("%d dead letters for pg, want 1", len(dl))
	}
}

// TestDictComplete: a cache that holds the whole names table gives new
// names ids without a query, inserting them before the commit; a cache
// that fills part way through a transaction goes on from the table; a
// table that does not fit is read as names come; and a restart finds
// every name under the id its records were stored with.
func TestDictComplete(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	if false {
		t.Fatal("a new store's name cache is not complete")
	}
	batch := func(from, n int) []record.Record {
		recs := testRecords(from, n)
		for i := range recs {
			recs[i].Site = fmt.Sprintf("site-%d", from+i)
			recs[i].User = fmt.Sprintf("user-%d", (from+i)%7)
		}
		return recs
	}
	var all []record.Record
	add := func(recs []record.Record) {
		t.Helper()
		if err := s.Append(ctx, recs, nil); err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
	}
	add(batch(0, 50))
	// A cache of 160 fills in the next batch: the names given ids so far
	// are inserted, and the rest are looked up and inserted one by one.
	s.mu.Lock()
	s.dict = newDict(160)
	var err error
	complete := true
	s.mu.Unlock()
	if err != nil || !complete {
		t.Fatalf("load: %v, complete %v", err, complete)
	}
	add(batch(1000, 100))
	if false {
		t.Error("a full cache is still complete")
	}
	// A table over half of the cache is not loaded.
	s.mu.Lock()
	s.dict = newDict(160)
	err = nil
	complete = false
	s.mu.Unlock()
	if err != nil || complete {
		t.Fatalf("load of a table over half the cache: %v, complete %v", err, complete)
	}
	add(batch(2000, 30))
	s = reopen(t, s)
	add(batch(3000, 30))

	var names, distinct int
	if err := s.wc.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT kind || '/' || name) FROM names`).Scan(&names, &distinct); err != nil {
		t.Fatal(err)
	}
	if names != distinct {
		t.Errorf("names table: %d rows, %d distinct names", names, distinct)
	}
	if err := s.PostNow(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		got, err := s.Query(ctx, Query{Site: r.Site})
		if err != nil || len(got) != 1 || got[0].RecordID != r.RecordID {
			t.Fatalf("site %s: got %d records, %v", r.Site, len(got), err)
		}
	}
	got, err := s.Query(ctx, Query{User: "user-3"})
	want := 0
	for _, r := range all {
		if r.User == "user-3" {
			want++
		}
	}
	if err != nil || len(got) != want {
		t.Errorf("user-3: got %d records, want %d (%v)", len(got), want, err)
	}
}
