package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

// unindexed counts the records not yet in the user and directory indexes.
func unindexed(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.rdb.QueryRowContext(context.Background(), `SELECT count(*) FROM records WHERE ix IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkQueries compares user and path queries (both orders, with limits
// that cut inside either part) with a filter over recs.
func checkQueries(t *testing.T, s *Store, recs []record.Record) {
	t.Helper()
	ctx := context.Background()
	type qcase struct {
		q     Query
		match func(*record.Record) bool
	}
	var cases []qcase
	for _, u := range []string{"user3", "user7", "nobody"} {
		cases = append(cases, qcase{Query{User: u, Limit: 1000}, func(r *record.Record) bool { return r.User == u }})
	}
	for _, p := range []string{"/store/data/", "/store/data/Run2026A/MinimumBias/AOD/v1/000012/",
		"/store/data/Run2026A/MinimumBias/AOD/v1/000012/file1", "/nowhere"} {
		cases = append(cases, qcase{Query{PathPrefix: p, Limit: 1000}, func(r *record.Record) bool { return strings.HasPrefix(r.Path, p) }})
	}
	from := t0.Add(150e9)
	cases = append(cases, qcase{Query{User: "user3", From: from, Site: "T2_US_UCSD", Limit: 1000}, func(r *record.Record) bool {
		return r.User == "user3" && !r.End.Before(from) && r.Site == "T2_US_UCSD"
	}})
	for _, c := range cases {
		var want []string
		for i := range recs {
			if c.match(&recs[i]) {
				want = append(want, recs[i].RecordID)
			}
		}
		for _, newest := range []bool{false, true} {
			w := slices.Clone(want)
			if newest {
				slices.Reverse(w)
			}
			for _, limit := range []int{1000, 3, len(w)/2 + 1} {
				q := c.q
				q.Newest, q.Limit = newest, limit
				got, err := s.Query(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, r := range got {
					ids = append(ids, r.RecordID)
				}
				exp := w[:min(limit, len(w))]
				if !slices.Equal(ids, exp) {
					t.Errorf("%+v: got %d records %v, want %d %v", q, len(ids), ids, len(exp), exp)
				}
			}
		}
	}
}

// TestQueryStraddlesIndexPass: user and path queries give the same results
// whether the records are indexed, unindexed or some of each.
func TestQueryStraddlesIndexPass(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	recs := testRecords(0, 300)
	if err := s.Append(ctx, recs[:100], nil); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, s, recs[:100]) // all unindexed
	if n, err := s.IndexNow(ctx); err != nil || n != 100 {
		t.Fatalf("IndexNow = %d, %v; want 100", n, err)
	}
	if n, err := s.IndexNow(ctx); err != nil || n != 0 {
		t.Fatalf("second IndexNow = %d, %v; want 0", n, err)
	}
	checkQueries(t, s, recs[:100]) // all indexed
	// Records 80..199: 80..99 are duplicates of indexed records.
	if err := s.Append(ctx, recs[80:200], []record.Event{testEvent(1)}); err != nil {
		t.Fatal(err)
	}
	if got := unindexed(t, s); got != 100 {
		t.Fatalf("%d unindexed records, want 100", got)
	}
	checkQueries(t, s, recs[:200]) // straddling
	if n, err := s.IndexNow(ctx); err != nil || n != 100 {
		t.Fatalf("IndexNow = %d, %v; want 100", n, err)
	}
	if got, want := s.indexedSeq.Load(), s.lastSeq.Load(); got != want || want != 201 {
		t.Fatalf("indexed seq %d, last seq %d; want 201", got, want)
	}
	if got := unindexed(t, s); got != 0 {
		t.Fatalf("%d unindexed records after the pass", got)
	}
	checkQueries(t, s, recs[:200])
}

// TestIndexTailAcrossRestart: a store that stopped before its index pass
// (a crash: Close would run one) knows which tail is unindexed after a
// restart and queries it exactly; the next pass indexes it.
func TestIndexTailAcrossRestart(t *testing.T) {
	o := DefaultOptions()
	o.Path = filepath.Join(t.TempDir(), "store.db")
	ctx := context.Background()
	s, err := Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	recs := testRecords(0, 250)
	if err := s.Append(ctx, recs[:150], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IndexNow(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, recs[150:], nil); err != nil {
		t.Fatal(err)
	}
	// Stop without Close's pass, as a kill would.
	s.mu.Lock()
	s.closed = true
	if err := s.closeDBs(); err != nil {
		t.Fatal(err)
	}
	s.mu.Unlock()

	s, err = Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.indexedSeq.Load(); got != 150 {
		t.Fatalf("indexed seq after restart = %d, want 150", got)
	}
	if got := unindexed(t, s); got != 100 {
		t.Fatalf("%d unindexed records after restart, want 100", got)
	}
	checkQueries(t, s, recs)
	if err := s.Close(); err != nil { // indexes the tail
		t.Fatal(err)
	}
	s, err = Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.indexedSeq.Load(); got != 250 {
		t.Fatalf("indexed seq after close and reopen = %d, want 250", got)
	}
	if got := unindexed(t, s); got != 0 {
		t.Fatalf("%d unindexed records after close", got)
	}
	checkQueries(t, s, recs)
}

// TestRunIndexes: Run runs the index pass every IndexInterval.
func TestRunIndexes(t *testing.T) {
	s, _ := openTest(t, func(o *Options) { o.IndexInterval = 5 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	if err := s.Append(ctx, testRecords(0, 10), nil); err != nil {
		t.Fatal(err)
	}
	for s.indexedSeq.Load() != 10 {
		select {
		case err := <-done:
			t.Fatalf("Run returned %v", err)
		default:
		}
		if _, err := s.LastSeq(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := unindexed(t, s); got != 0 {
		t.Fatalf("%d unindexed records", got)
	}
}

// TestMigrateV2 opens a version 2 database: its records count as indexed
// without being rewritten and are found through the partial indexes.
func TestMigrateV2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2.db")
	db, err := sql.Open(driverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations[:2] {
		if err := m(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	recs := testRecords(0, 40)
	d := newDict(100)
	for i := range recs {
		r := &recs[i]
		dir, file := splitPath(r.Path)
		var ids [5]int64
		for k, n := range [5]struct {
			k dictKind
			v string
		}{{kindServer, serverName(r.ServerHost, r.ServerIP)}, {kindIP, r.ServerIP}, {kindSite, r.Site}, {kindUser, r.User}, {kindDir, dir}} {
			if ids[k], err = d.id(ctx, tx, n.k, n.v); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.ExecContext(ctx, insertRecordV2SQL, i+1, recordTime(r), ridOf(r.RecordID),
			ids[0], ids[1], ids[2], ids[3], ids[4], file, string(r.Reason), record.AppendJSON(nil, r)); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{`UPDATE meta SET value = 40 WHERE key = 'last_seq'`, `PRAGMA user_version = 2`} {
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
	if err := s.wc.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != 3 {
		t.Fatalf("user_version = %d, %v", v, err)
	}
	if got := s.indexedSeq.Load(); got != 40 {
		t.Fatalf("indexed seq after migration = %d, want 40", got)
	}
	if got := unindexed(t, s); got != 0 {
		t.Fatalf("%d unindexed records after migration", got)
	}
	for _, idx := range []string{"records_user", "records_dir"} {
		var n int
		if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM records INDEXED BY `+idx+` WHERE ix IS NOT NULL`).Scan(&n); err != nil || n != 40 {
			t.Fatalf("%s holds %d records, %v; want 40", idx, n, err)
		}
	}
	// A migrated record is still a duplicate; new ones go to the tail.
	if err := s.Append(ctx, testRecords(39, 11), nil); err != nil {
		t.Fatal(err)
	}
	if last := s.lastSeq.Load(); last != 50 {
		t.Fatalf("LastSeq = %d, want 50", last)
	}
	all := testRecords(0, 50)
	checkQueries(t, s, all)
	if n, err := s.IndexNow(ctx); err != nil || n != 10 {
		t.Fatalf("IndexNow = %d, %v; want 10", n, err)
	}
	checkQueries(t, s, all)
}
