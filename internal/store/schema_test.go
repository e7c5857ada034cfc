package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xrdmon/xrdmon/internal/record"
)

// TestAppendChunks exercises the multi-row insert: full chunks, a tail, and
// chunks holding duplicates (of stored records and within the chunk) that
// fall back to row-by-row inserts, without seq gaps.
func TestAppendChunks(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	if err := s.Append(ctx, testRecords(0, 3*chunkRows+5), nil); err != nil {
		t.Fatal(err)
	}
	// Records 100..299: 100..196 are stored; 250 appears twice.
	batch := testRecords(100, 200)
	batch = slices.Insert(batch, 160, testRecord(250))
	if err := s.Append(ctx, batch, nil); err != nil {
		t.Fatal(err)
	}
	const want = 300
	if last := s.lastSeq.Load(); last != want {
		t.Fatalf("LastSeq = %d, want %d", last, want)
	}
	if got := testutil.ToFloat64(s.m.duplicates); got != 98 {
		t.Fatalf("duplicates = %v, want 98", got)
	}
	all, err := s.Read(ctx, 0, 1000)
	if err != nil || len(all) != want {
		t.Fatalf("read %d, %v; want %d", len(all), err, want)
	}
	for i, e := range all {
		if e.Seq != int64(i+1) || e.Record.RecordID != testRecord(i).RecordID {
			t.Fatalf("entry %d: seq %d record %s, want seq %d record %d", i, e.Seq, e.Record.RecordID, i+1, i)
		}
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

// TestQueryPlans checks that each indexed filter is answered from its
// index, not by a scan of the records table; user and path queries read the
// unindexed tail by a rowid range.
func TestQueryPlans(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	if err := s.Append(ctx, testRecords(0, 10), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IndexNow(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, testRecords(10, 10), nil); err != nil {
		t.Fatal(err)
	}
	const tail = "USING INTEGER PRIMARY KEY (rowid>?)"
	from := t0.Add(time.Hour)
	for q, want := range map[*Query][]string{
		{From: from, To: from.Add(time.Minute)}: {"INDEX records_key"},
		{Server: "xrootd1.example.org"}:         {"INDEX records_server"},
		{Site: "T1_US_FNAL", From: from}:        {"INDEX records_site"},
		{User: "user1", From: from}:             {"INDEX records_user", tail},
		{User: "user1", Newest: true}:           {"INDEX records_user", tail},
		{PathPrefix: "/store/data/"}:            {"INDEX records_dir", tail},
		{PathPrefix: "/store/data/f"}:           {"INDEX records_dir", tail},
	} {
		query, args := querySQL(*q, s.indexedSeq.Load())
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
		for _, w := range want {
			if !strings.Contains(joined, w) || strings.Contains(joined, "SCAN records") {
				t.Errorf("%+v: plan %q does not use %s", *q, joined, w)
			}
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
	batch := testRecords(1000, 500)
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
	for _, i := range []int{0, 250, 499} {
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
