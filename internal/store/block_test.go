package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

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

// TestQueryAcrossBlocks: queries give the same results whatever the
// blocks the records were written in: one per Append, full blocks split
// inside an Append, blocks of one record, blocks with events.
func TestQueryAcrossBlocks(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	recs := testRecords(0, maxBlockEntries+600)
	if err := s.Append(ctx, recs[:100], nil); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, s, recs[:100])
	for i := 100; i < 110; i++ {
		if err := s.Append(ctx, recs[i:i+1], []record.Event{testEvent(i)}); err != nil {
			t.Fatal(err)
		}
	}
	checkQueries(t, s, recs[:110]) // none posted
	if err := s.PostNow(ctx); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, s, recs[:110])                         // all posted
	if err := s.Append(ctx, recs[110:], nil); err != nil { // a full block and a tail
		t.Fatal(err)
	}
	var blocks, full int
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*), sum(records + events = ?) FROM blocks`, maxBlockEntries).Scan(&blocks, &full); err != nil {
		t.Fatal(err)
	}
	if blocks != 13 || full != 1 {
		t.Fatalf("%d blocks (%d full), want 13 (1 full)", blocks, full)
	}
	checkQueries(t, s, recs) // some posted, some not
	s = reopen(t, s)         // Close posts the rest
	if got, want := s.postedSeq.Load(), int64(120+maxBlockEntries+1); got != want {
		t.Fatalf("posted seq after reopen = %d, want %d (the last block's first seq)", got, want)
	}
	checkQueries(t, s, recs)
	got, err := s.Read(ctx, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs)+10 {
		t.Fatalf("Read returned %d entries, want %d", len(got), len(recs)+10)
	}
	for i, e := range got {
		if e.Seq != int64(i+1) {
			t.Fatalf("entry %d has seq %d", i, e.Seq)
		}
	}
}

// TestReadInsideBlock: a reader resuming in the middle of a block (a sink's
// cursor) gets exactly the entries after it, in small and large steps.
func TestReadInsideBlock(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	recs := testRecords(0, 3000)
	if err := s.Append(ctx, recs, []record.Event{testEvent(1), testEvent(2)}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []int{1, 7, 1000, 5000} {
		limit := 0
		if step == 1 {
			limit = 50
		}
		if n := readSteps(t, s, 0, step, limit); step > 1 && n != 3002 {
			t.Fatalf("step %d: read %d entries, want 3002", step, n)
		}
	}
}

// readSteps reads s's log after after in reads of step entries to its end
// (or past limit entries, when positive), checks that every entry follows
// the one before and that only the last read is short, and returns the
// entries read.
func readSteps(t *testing.T, s *Store, after int64, step, limit int) int {
	t.Helper()
	n, short := 0, false
	for limit <= 0 || n <= limit {
		got, err := s.Read(context.Background(), after, step)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		if short || len(got) > step {
			t.Fatalf("step %d: a read after %d returned %d entries after a short one, or too many", step, after, len(got))
		}
		short = len(got) < step
		for _, e := range got {
			if e.Seq != after+1 {
				t.Fatalf("step %d: seq %d after %d", step, e.Seq, after)
			}
			after = e.Seq
			n++
		}
	}
	return n
}

// TestReadManyBlocks: a log of many small blocks (a quiet collector's
// commits) is read across several pages of blocks (spanPage), from every
// kind of position, each entry once and in order.
func TestReadManyBlocks(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	const blocks, per = 3*spanPage + 5, 3
	for i := range blocks {
		if err := s.Append(ctx, testRecords(i*per, per), nil); err != nil {
			t.Fatal(err)
		}
	}
	total := int64(blocks * per)
	for _, step := range []int{1, 2, 5, spanPage, spanPage*per + 1, 1000} {
		for _, start := range []int64{0, 1, per, per + 1, total - 4} {
			if n := readSteps(t, s, start, step, 0); int64(n) != total-start {
				t.Fatalf("step %d from %d: read %d entries, want %d", step, start, n, total-start)
			}
		}
	}
}

// TestCorruptBlock: a damaged block is reported as an error by Read and
// Query, never a panic or silently wrong entries.
func TestCorruptBlock(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	if err := s.Append(ctx, testRecords(0, 20), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.wc.ExecContext(ctx, `UPDATE blocks SET data = substr(data, 1, length(data) / 2)`); err != nil {
		t.Fatal(err)
	}
	s.cache = nil
	if _, err := s.Read(ctx, 0, 100); err == nil {
		t.Fatal("Read of a truncated block succeeded")
	}
	if _, err := s.Query(ctx, Query{}); err == nil {
		t.Fatal("Query of a truncated block succeeded")
	}
}

// TestMigrateV2 opens a version 2 database: it is migrated through version
// 3 to blocks, and its records keep their sequence numbers and are found
// by every query.
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
	ev := testEvent(7)
	if _, err := tx.ExecContext(ctx, `INSERT INTO events (seq, event_id, time_ns, type, server, site, data) VALUES (41, ?, ?, ?, ?, ?, ?)`,
		ev.EventID, ev.Time.UnixNano(), string(ev.Type), serverName(ev.ServerHost, ev.ServerIP), ev.Site, record.AppendEventBinary(nil, &ev)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`UPDATE meta SET value = 41 WHERE key = 'last_seq'`, `PRAGMA user_version = 2`} {
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
	got, err := s.Read(ctx, 0, 1000)
	if err != nil || len(got) != 41 {
		t.Fatalf("Read after migration: %d entries, %v", len(got), err)
	}
	if e := got[40]; e.Seq != 41 || e.Event == nil || e.Event.EventID != ev.EventID {
		t.Fatalf("event after migration: %+v", e)
	}
	for i, e := range got[:40] {
		if e.Seq != int64(i+1) || e.Record == nil || e.Record.RecordID != recs[i].RecordID {
			t.Fatalf("entry %d after migration: %+v", i, e)
		}
	}
	// A migrated record is still a duplicate (no checkpoint: every stored
	// id is in the window); new ones follow.
	if err := s.Append(ctx, testRecords(39, 11), []record.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if last := s.lastSeq.Load(); last != 51 {
		t.Fatalf("LastSeq = %d, want 51", last)
	}
	checkQueries(t, s, testRecords(0, 50))
}

// TestPostingPassRolledBack: a posting pass whose transaction rolls back
// (an Append that fails after its pass) leaves the posted mark where it
// was, also for the next successful Append, so no block is taken as posted
// without its postings.
func TestPostingPassRolledBack(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	recs := testRecords(0, 200)
	if err := s.Append(ctx, recs[:100], nil); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.postLocked(ctx, s.wc, true); err != nil || n == 0 {
		t.Fatalf("postLocked = %d, %v", n, err)
	}
	s.rollback()
	s.mu.Unlock()
	if got := s.postedSeq.Load(); got != 0 {
		t.Fatalf("posted seq after a rolled-back pass = %d, want 0", got)
	}
	s.lastPost = time.Now() // no pass in the next Append
	if err := s.Append(ctx, recs[100:], nil); err != nil {
		t.Fatal(err)
	}
	if got := s.postedSeq.Load(); got != 0 {
		t.Fatalf("posted seq after the next Append = %d, want 0", got)
	}
	var n int
	if err := s.wc.QueryRowContext(ctx, "SELECT count(*) FROM block_names").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d postings after the rollback, %v", n, err)
	}
	checkQueries(t, s, recs) // all from the unposted tail
	if err := s.PostNow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.postedSeq.Load(); got != 101 {
		t.Fatalf("posted seq after PostNow = %d, want 101", got)
	}
	checkQueries(t, s, recs)
}

// TestPostingPassSpread: a posting pass is inserted a share at a time over
// the Appends that follow its start (no Append waits for a whole pass),
// queries are exact before, during and after it, the mark moves only with
// its last postings, a rolled-back share is inserted again by the next
// pass, and blocks that retention deletes during a pass leave no posting.
func TestPostingPassSpread(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	recs := testRecords(0, 12000)
	const per = 50 // records an Append (a block each)
	next := 0
	appendNext := func() {
		t.Helper()
		if err := s.Append(ctx, recs[next:next+per], nil); err != nil {
			t.Fatal(err)
		}
		next += per
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := s.wc.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// want is the postings of every block up to posted_seq.
	want := func() int {
		t.Helper()
		rows, err := s.wc.QueryContext(ctx, `SELECT names FROM blocks WHERE first_seq <= (SELECT value FROM meta WHERE key = 'posted_seq')`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var names []byte
			if err := rows.Scan(&names); err != nil {
				t.Fatal(err)
			}
			ids, err := decodeIDs(names)
			if err != nil {
				t.Fatal(err)
			}
			n += len(ids)
		}
		return n
	}
	for next < 10000 {
		s.lastPost = time.Now() // no pass yet
		appendNext()
	}
	if n := count("SELECT count(*) FROM block_names"); n != 0 {
		t.Fatalf("%d postings before the first pass", n)
	}

	s.lastPost = time.Time{} // the next Append starts a pass
	appendNext()
	pass := len(s.postQ.ps)
	if pass < 4*postChunk {
		t.Fatalf("the pass holds %d postings, want a few shares of %d", pass, postChunk)
	}
	if got := count("SELECT count(*) FROM block_names"); got != postChunk {
		t.Fatalf("%d postings after the Append that started the pass, want one share (%d)", got, postChunk)
	}
	if got := s.postedSeq.Load(); got != 0 {
		t.Fatalf("posted seq %d with the pass under way, want 0", got)
	}
	checkQueries(t, s, recs[:next])

	// A share in a transaction that rolls back: the pass is dropped, and the
	// next one posts its blocks again over the share already in.
	s.mu.Lock()
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.postLocked(ctx, s.wc, false); err != nil {
		t.Fatal(err)
	}
	s.rollback()
	s.mu.Unlock()
	if s.postQ.ps != nil || count("SELECT count(*) FROM block_names") != postChunk {
		t.Fatal("a rolled-back share left the pass under way or its postings")
	}
	s.lastPost = time.Time{}
	appendNext() // a new pass, over every unposted block
	// Retention deletes the two oldest blocks during the pass.
	if _, n, err := s.deleteBlocks(ctx, `SELECT first_seq, records + events, names FROM blocks ORDER BY first_seq LIMIT 2`); err != nil || n != 2 {
		t.Fatalf("deleting 2 blocks: %d, %v", n, err)
	}
	appends := 1
	for s.postQ.ps != nil {
		checkQueries(t, s, recs[2*per:next])
		s.lastPost = time.Now()
		appendNext()
		appends++
	}
	if appends < 3 || appends > postSpread+1 {
		t.Fatalf("the pass took %d Appends, want from 3 to %d", appends, postSpread+1)
	}
	if got := s.postedSeq.Load(); got < int64(10000+per) {
		t.Fatalf("posted seq %d after the pass, want past record %d", got, 10000+per)
	}
	if got, want := count("SELECT count(*) FROM block_names"), want(); got != want {
		t.Fatalf("%d postings after the pass, want %d (every block up to the mark)", got, want)
	}
	if n := count("SELECT count(*) FROM block_names WHERE first_seq NOT IN (SELECT first_seq FROM blocks)"); n != 0 {
		t.Fatalf("%d postings of deleted blocks", n)
	}
	checkQueries(t, s, recs[2*per:next])
	s = reopen(t, s) // Close ends with a whole pass
	checkQueries(t, s, recs[2*per:next])
}

// TestPostingPassNoNames: a pass over blocks that post no name (events of
// a sender with no address, host or site) still moves the mark, so that
// the next pass does not list them again.
func TestPostingPassNoNames(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	ev := testEvent(1)
	ev.ServerIP, ev.ServerHost, ev.Site = "", "", ""
	s.lastPost = time.Time{}
	if err := s.Append(ctx, nil, []record.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if got := s.postedSeq.Load(); got != 1 {
		t.Fatalf("posted seq %d after a pass over a block without names, want 1", got)
	}
	if s.postQ.ps != nil {
		t.Fatal("the pass is still under way")
	}
}

// TestQueryPages: listing page by page (After = the previous page's Next),
// oldest or newest first, filtered or not, gives every matching record
// once, in order, whatever the blocks and even when records share a time.
func TestQueryPages(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	recs := testRecords(0, maxBlockEntries+300)
	for i := range recs {
		if i%3 == 0 && i > 0 {
			recs[i].End = recs[i-1].End // ties: the sequence number orders them
		}
	}
	if err := s.Append(ctx, recs[:500], nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PostNow(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, recs[500:], nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []Query{{}, {Newest: true}, {User: recs[7].User}, {User: recs[7].User, Newest: true}} {
		q.Limit = 100000
		all, err := s.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var paged []string
		page := q
		page.Limit = 37
		for n := 0; ; n++ {
			got, next, err := s.QueryPage(ctx, page)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range got {
				paged = append(paged, r.RecordID)
			}
			if next == nil {
				break
			}
			if n > len(recs) {
				t.Fatal("pages never end")
			}
			page.After = next
		}
		want := make([]string, len(all))
		for i, r := range all {
			want[i] = r.RecordID
		}
		if !slices.Equal(paged, want) {
			t.Errorf("%+v: pages give %d records, one query %d", q, len(paged), len(want))
		}
	}
}

// TestBlockByteBound: large entries (summary events of ~100 KB) seal a
// block at maxBlockBytes, not only at maxBlockEntries, so that no block,
// builder buffer or reader cache grows to the size of a whole batch
// (issue 25: 4,096 summaries of 678 KB made one 2.7 GB block).
func TestBlockByteBound(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	const n, size = 200, 100_000
	evs := make([]record.Event, n)
	for i := range evs {
		evs[i] = testEvent(i)
		evs[i].Data = json.RawMessage(fmt.Sprintf(`{"pad":"%0*d"}`, size, i))
	}
	if err := s.Append(ctx, nil, evs); err != nil {
		t.Fatal(err)
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT data, events FROM blocks`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	blocks, total := 0, 0
	for rows.Next() {
		var data []byte
		var k int
		if err := rows.Scan(&data, &k); err != nil {
			t.Fatal(err)
		}
		raw, err := blockEntries(nil, data)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) > maxBlockBytes+size+200 {
			t.Errorf("block of %d entries holds %d bytes, bound %d plus one entry", k, len(raw), maxBlockBytes)
		}
		blocks++
		total += k
	}
	if total != n || blocks < n*size/maxBlockBytes {
		t.Errorf("%d events in %d blocks, want %d in at least %d", total, blocks, n, n*size/maxBlockBytes)
	}
	got, err := s.Read(ctx, 0, 1000)
	if err != nil || len(got) != n {
		t.Fatalf("read back %d entries: %v", len(got), err)
	}
}

// TestPageByteBound: with MaxBytes a page of large entries ends early, at
// least one entry, and paging on with Next lists every entry once, in
// both orders (issue 25: /events?limit=1000 answered 678 MB).
func TestPageByteBound(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := context.Background()
	const n, size = 60, 10_000
	evs := make([]record.Event, n)
	for i := range evs {
		evs[i] = testEvent(i)
		evs[i].Data = json.RawMessage(fmt.Sprintf(`{"pad":"%0*d"}`, size*(1+i%3), i))
	}
	if err := s.Append(ctx, testRecords(0, 20), evs); err != nil {
		t.Fatal(err)
	}
	for _, newest := range []bool{false, true} {
		q := EventQuery{Limit: 1000, MaxBytes: 35_000, Newest: newest}
		seen := map[string]bool{}
		for pages := 0; ; pages++ {
			page, next, err := s.QueryEvents(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			bytes := 0
			for _, e := range page {
				if seen[e.EventID] {
					t.Fatalf("newest=%v: %s listed twice", newest, e.EventID)
				}
				seen[e.EventID] = true
				bytes += len(e.Data)
			}
			if len(page) == 0 || (len(page) > 1 && bytes > q.MaxBytes) {
				t.Fatalf("newest=%v page %d: %d events of %d bytes", newest, pages, len(page), bytes)
			}
			if next == nil {
				break
			}
			q.After = next
		}
		if len(seen) != n {
			t.Errorf("newest=%v: %d events listed, want %d", newest, len(seen), n)
		}
	}
	recs, next, err := s.QueryPage(ctx, Query{Limit: 1000, MaxBytes: 1})
	if err != nil || len(recs) != 1 || next == nil {
		t.Errorf("records with a 1-byte budget: %d records, next %v, %v", len(recs), next, err)
	}
}
