package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/xrdmon/xrdmon/internal/record"
)

// encBuf holds the encoded entries of one batch back to back, with the end
// offset of each, in record's binary form (record.AppendBinary: about 5x
// faster to write and 40x faster to read than JSON). An event's Data must be
// valid JSON: a bad event is refused at Append instead of breaking every
// consumer later.
type encBuf struct {
	buf  []byte
	ends []int
	pids []uint64 // the id keys of the batch's progress snapshots (entryID of record.ProgressID)
}

var encPool = sync.Pool{New: func() any { return &encBuf{buf: make([]byte, 0, 1<<20)} }}

func (b *encBuf) addRecord(r *record.Record) {
	b.buf = record.AppendBinary(b.buf, r)
	b.ends = append(b.ends, len(b.buf))
}

func (b *encBuf) addEvent(e *record.Event) error {
	if len(e.Data) > 0 && !json.Valid(e.Data) {
		return errors.New("event data is not valid JSON")
	}
	b.buf = record.AppendEventBinary(b.buf, e)
	b.ends = append(b.ends, len(b.buf))
	return nil
}

// get returns the i-th encoded entry; it points into b.buf.
func (b *encBuf) get(i int) []byte {
	start := 0
	if i > 0 {
		start = b.ends[i-1]
	}
	return b.buf[start:b.ends[i]]
}

// maxPooledEnc is the largest encoding buffer kept for reuse: a batch of
// 1,024 records takes about 0.5 MB; a one-off large batch (thousands of
// summaries) is left to the garbage collector instead of staying alive in
// the pool.
const maxPooledEnc = 8 << 20

func (b *encBuf) release() {
	if cap(b.buf) > maxPooledEnc {
		return
	}
	b.buf = b.buf[:0]
	b.ends = b.ends[:0]
	b.pids = b.pids[:0]
	encPool.Put(b)
}

// maxTimeAfter bounds how far after its receive time an entry's time is
// indexed (docs/limits.md): a server's clock, or a forged packet, may claim
// any time, and an entry indexed in 2261 would keep its block from ever
// expiring. Earlier times are kept: they only make the entry itself expire
// sooner (a block goes when its latest entry is old), and replays and
// late deliveries legitimately carry them.
const maxTimeAfter = time.Hour

// Bounds of the times UnixNano can represent, for entries without a
// receive time.
var (
	minIndexTime = time.Unix(0, math.MinInt64+1)
	maxIndexTime = time.Unix(0, math.MaxInt64)
)

// indexTime returns t in Unix ns (0 for the zero time), at most
// maxTimeAfter after received (when set) and within what an int64 holds,
// and whether it was clamped.
func indexTime(t, received time.Time) (int64, bool) {
	if t.IsZero() {
		return 0, false
	}
	lo, hi := minIndexTime, maxIndexTime
	if !received.IsZero() && received.Add(maxTimeAfter).Before(hi) {
		hi = received.Add(maxTimeAfter)
	}
	switch {
	case t.Before(lo):
		return lo.UnixNano(), true
	case t.After(hi):
		return hi.UnixNano(), true
	}
	return t.UnixNano(), false
}

// recordTime is the time a record is indexed, listed and retained by: End,
// else Start, else Received, at most maxTimeAfter after Received.
func recordTime(r *record.Record) int64 {
	t, _ := recordIndexTime(r)
	return t
}

func recordIndexTime(r *record.Record) (int64, bool) {
	switch {
	case !r.End.IsZero():
		return indexTime(r.End, r.Received)
	case !r.Start.IsZero():
		return indexTime(r.Start, r.Received)
	}
	return indexTime(r.Received, time.Time{})
}

// eventTime is the time an event is indexed, listed and retained by: Time,
// at most maxTimeAfter after Received.
func eventTime(e *record.Event) int64 {
	t, _ := indexTime(e.Time, e.Received)
	return t
}

// serverName is the value of the indexed server column: the host name when
// known, else the address.
func serverName(host, ip string) string {
	if host != "" {
		return host
	}
	return ip
}

// Append writes recs and then evs to the log: AppendWithProgress without
// progress snapshots.
func (s *Store) Append(ctx context.Context, recs []record.Record, evs []record.Event) error {
	return s.AppendWithProgress(ctx, recs, evs, nil)
}

// AppendWithProgress writes recs, then evs, then the progress snapshots
// progress to the log in one transaction and gives each new entry the next
// sequence number, in that order. When it returns nil the batch is durable
// (see Options.Synchronous) and the input that produced it may be
// acknowledged.
//
// A progress snapshot is a record of an access still open (no RecordID),
// its End the time of the server's isXfr update, with the bytes it has
// moved so far: an entry of its own kind (Entry.Progress), for the
// rollups, which no output delivers. Its id is record.ProgressID. In the
// counts of the log (the blocks' events column, the events appended and
// deleted) progress snapshots count as events, as they were events before
// (FORMAT.md, schema version 9).
//
// Entries whose record_id or event_id appeared earlier in the same batch,
// or among the entries an earlier process appended after its last
// checkpoint (PutState), are skipped and counted in
// xrdmon_store_duplicates_total; they take no sequence number. Those are
// the entries a restart can produce again: the correlator resumes from its
// checkpoint and unacknowledged input is delivered again. Ids are compared
// by a 64-bit hash (entryID). See FORMAT.md, "Idempotence".
//
// On error nothing of the batch was written. ErrFull (possibly with
// ErrDiskFull) means the store has no room: retry later.
func (s *Store) AppendWithProgress(ctx context.Context, recs []record.Record, evs []record.Event, progress []record.Record) error {
	if len(recs)+len(evs)+len(progress) == 0 {
		return nil
	}
	start := time.Now()
	b := encPool.Get().(*encBuf)
	defer b.release()
	for i := range recs {
		if recs[i].RecordID == "" {
			return fmt.Errorf("append: record %d: empty record id: %w", i, ErrInvalid)
		}
		b.addRecord(&recs[i])
	}
	for i := range evs {
		if evs[i].EventID == "" {
			return fmt.Errorf("append: event %d: empty event id: %w", i, ErrInvalid)
		}
		if err := b.addEvent(&evs[i]); err != nil {
			return fmt.Errorf("append: encode event %s: %w", evs[i].EventID, err)
		}
	}
	var pid [32]byte
	for i := range progress {
		b.addRecord(&progress[i])
		b.pids = append(b.pids, xxhash.Sum64(record.AppendProgressID(pid[:0], &progress[i]))) // entryID of its ProgressID
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("append: %w", ErrClosed)
	}
	if err := s.checkRoom(ctx); err != nil {
		return fmt.Errorf("append: %w", err)
	}
	nrec, nev, dups, err := s.insert(ctx, recs, evs, progress, b)
	if err != nil {
		s.m.appendErrors.Inc()
		if isDiskFull(err) {
			s.setFull(true, "disk full", err)
			s.m.fullRefusals.Inc()
			return fmt.Errorf("append: %w", fullErr{err})
		}
		return fmt.Errorf("append: %w", err)
	}
	s.setFull(false, "", nil)
	s.m.recordsAppended.Add(float64(nrec))
	s.m.eventsAppended.Add(float64(nev))
	s.m.duplicates.Add(float64(dups))
	s.m.batchDuration.Observe(time.Since(start).Seconds())
	return nil
}

// Listen calls fn after every Append that committed entries, with those
// entries and their sequence numbers, in log order, in the appender's
// goroutine and before Append returns: a consumer of the log (the
// rollups) takes what was just written without reading it back. fn must
// be quick, must not call the store's write methods, and must not keep
// the entries or what they point to (the appender's records) after it
// returns. Duplicates the store dropped are not among them.
func (s *Store) Listen(fn func([]Entry)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, fn)
}

// Appended returns a channel closed at the next Append that adds entries
// to the log: a reader that found nothing new takes it before reading,
// then waits on it instead of polling.
func (s *Store) Appended() <-chan struct{} { return s.grew.C() }

// fullErr wraps a driver's disk-full error so that it matches both ErrFull
// and ErrDiskFull and still shows the driver's message.
type fullErr struct{ err error }

func (e fullErr) Error() string   { return "disk full: " + e.err.Error() }
func (e fullErr) Unwrap() []error { return []error{ErrFull, ErrDiskFull, e.err} }

// insert runs the transaction; nev counts the new events and progress
// snapshots. Call with mu held.
func (s *Store) insert(ctx context.Context, recs []record.Record, evs []record.Event, progress []record.Record, b *encBuf) (nrec, nev, dups int, err error) {
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, 0, 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			s.rollback()
		}
	}()
	// The statements of the transaction run with a context that is never
	// cancelled (sqlCtx); cancellation is checked between blocks instead,
	// and the deferred rollback undoes the batch.
	parent := ctx
	ctx = sqlCtx(ctx)
	seq := s.lastSeq.Load()
	listen := len(s.listeners) > 0
	s.appended = s.appended[:0]
	bb := s.bb
	bb.reset(seq + 1)
	clear(s.batchIDs)
	flush := func() error {
		if bb.n == 0 {
			return nil
		}
		if err := parent.Err(); err != nil {
			return err
		}
		if err := s.writeBlock(ctx, s.wc, bb); err != nil {
			return err
		}
		bb.reset(seq + 1)
		return nil
	}
	// dup reports (and counts in dups) whether id was stored by an
	// earlier process after its last checkpoint (the entries a restart may
	// produce again) or earlier in this batch.
	dup := func(rid uint64) bool {
		_, ok := s.recent[rid]
		if !ok {
			_, ok = s.batchIDs[rid]
		}
		if ok {
			dups++
			return true
		}
		s.batchIDs[rid] = struct{}{}
		return false
	}
	// put adds the next entry to the block (and, with listeners, e with
	// its Seq to s.appended), and writes the block when it is full.
	put := func(kind byte, rid uint64, t int64, clamped bool, data []byte, e Entry) error {
		seq++
		if clamped {
			s.m.timesClamped.Inc()
		}
		bb.add(kind, seq, rid, t, data)
		if listen {
			e.Seq = seq
			s.appended = append(s.appended, e)
		}
		if bb.full() {
			return flush()
		}
		return nil
	}
	for i := range recs {
		r := &recs[i]
		rid := entryID(r.RecordID)
		if dup(rid) {
			continue
		}
		if err := s.postRecord(ctx, bb, r); err != nil {
			return 0, 0, 0, err
		}
		t, clamped := recordIndexTime(r)
		if err := put(entryRecord, rid, t, clamped, b.get(i), Entry{Record: r}); err != nil {
			return 0, 0, 0, err
		}
		nrec++
	}
	for i := range evs {
		e := &evs[i]
		rid := entryID(e.EventID)
		if dup(rid) {
			continue
		}
		if err := s.postServer(ctx, bb, e.ServerHost, e.ServerIP, e.Site); err != nil {
			return 0, 0, 0, fmt.Errorf("event %s: %w", e.EventID, err)
		}
		t, clamped := indexTime(e.Time, e.Received)
		if err := put(entryEvent, rid, t, clamped, b.get(len(recs)+i), Entry{Event: e}); err != nil {
			return 0, 0, 0, err
		}
		nev++
	}
	// Progress snapshots are posted and timed as the progress events that
	// stood for them before: by server and site, at End.
	for i := range progress {
		p := &progress[i]
		rid := b.pids[i]
		if dup(rid) {
			continue
		}
		if err := s.postServer(ctx, bb, p.ServerHost, p.ServerIP, p.Site); err != nil {
			return 0, 0, 0, fmt.Errorf("progress snapshot of file %d: %w", p.FileID, err)
		}
		t, clamped := indexTime(p.End, p.Received)
		if err := put(entryProgress, rid, t, clamped, b.get(len(recs)+len(evs)+i), Entry{Progress: p}); err != nil {
			return 0, 0, 0, err
		}
		nev++
	}
	if err := flush(); err != nil {
		return 0, 0, 0, err
	}
	if err := s.dict.flush(ctx, s.wc); err != nil {
		return 0, 0, 0, err
	}
	posted := s.postDue()
	if posted {
		if _, err := s.postLocked(ctx, s.wc, false); err != nil {
			return 0, 0, 0, err
		}
	}
	if seq != s.lastSeq.Load() {
		if _, err := s.wc.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'last_seq'`, seq); err != nil {
			return 0, 0, 0, fmt.Errorf("update last seq: %w", err)
		}
	}
	// COMMIT is not cancellable either: once started it must finish.
	if _, err := s.wc.ExecContext(ctx, "COMMIT"); err != nil {
		return 0, 0, 0, fmt.Errorf("commit: %w", err)
	}
	s.dict.commit()
	s.lastSeq.Store(seq)
	if posted {
		s.postCommitted()
	}
	if len(s.appended) > 0 {
		for _, fn := range s.listeners {
			fn(s.appended)
		}
		clear(s.appended)
		s.appended = s.appended[:0]
	}
	if nrec+nev > 0 {
		s.grew.Notify()
	}
	return nrec, nev, dups, nil
}

// postRecord adds the dictionary ids of r's server, server address, site,
// user and directory (dirKey) to the block's names. It runs in the Append
// transaction (new names are inserted there).
func (s *Store) postRecord(ctx context.Context, bb *blockBuilder, r *record.Record) error {
	for _, n := range [5]struct {
		k dictKind
		v string
	}{{kindServer, serverName(r.ServerHost, r.ServerIP)}, {kindIP, r.ServerIP}, {kindSite, r.Site}, {kindUser, r.User}, {kindDir, dirKey(r.Path)}} {
		id, err := s.dict.id(ctx, s.wc, n.k, n.v)
		if err != nil {
			return fmt.Errorf("record %s: %w", r.RecordID, err)
		}
		bb.post(id)
	}
	return nil
}

// postServer adds the dictionary ids of an event's (or a progress
// snapshot's) server and site to the block's names.
func (s *Store) postServer(ctx context.Context, bb *blockBuilder, host, ip, site string) error {
	for _, n := range [2]struct {
		k dictKind
		v string
	}{{kindServer, serverName(host, ip)}, {kindSite, site}} {
		id, err := s.dict.id(ctx, s.wc, n.k, n.v)
		if err != nil {
			return err
		}
		bb.post(id)
	}
	return nil
}

// writeBlock inserts the block bb on c (in the caller's transaction). Its
// postings are added later, in bulk (see postLocked).
func (s *Store) writeBlock(ctx context.Context, c dbtx, bb *blockBuilder) error {
	data, names := bb.finish()
	if _, err := c.ExecContext(ctx, `INSERT INTO blocks (first_seq, last_seq, min_ns, max_ns, records, events, names, data)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, bb.first, bb.last, bb.minNs, bb.maxNs, bb.records, bb.events, names, data); err != nil {
		return fmt.Errorf("insert block %d-%d: %w", bb.first, bb.last, err)
	}
	s.m.blockBytes.Observe(float64(len(data)))
	return nil
}

// multiInsert inserts rows with statements of per rows each: INSERT ...
// VALUES (...),(...) with the statement's head and one row's placeholders,
// the full statement's text made once.
type multiInsert[T any] struct {
	head, row string // "INSERT ... VALUES ", "(?,?)"
	per       int
	full      string
	args      func(dst []any, bx *boxer, r *T) []any // appends a row's values
}

// boxer boxes the values of the rows of one insert, reusing a box when
// the value repeats (an int64 the row before had in its column, a string
// boxed lately): a flush's parts repeat their bucket's step, start and
// part and take turns with a few specs. With ints set it keeps every
// int64 it boxed: the posting passes' name ids and block numbers repeat
// from row to row and from pass to pass. A row costs an allocation per
// new value, not per value.
type boxer struct {
	last [8]any
	strs [16]any // strings boxed lately: the specs of a bucket's parts take turns
	next int
	ints map[int64]any // when not nil: the int64s boxed, until it holds maxBoxedInts
}

// maxBoxedInts bounds a boxer's ints (about 50 bytes each).
const maxBoxedInts = 1 << 14

func (b *boxer) int(col int, v int64) any {
	if x, ok := b.last[col].(int64); ok && x == v {
		return b.last[col]
	}
	if b.ints == nil {
		b.last[col] = v
		return b.last[col]
	}
	x, ok := b.ints[v]
	if !ok {
		if len(b.ints) >= maxBoxedInts {
			clear(b.ints)
		}
		x = v
		b.ints[v] = x
	}
	b.last[col] = x
	return x
}

func (b *boxer) str(v string) any {
	for _, x := range b.strs {
		if s, ok := x.(string); ok && s == v {
			return x
		}
	}
	x := any(v)
	b.strs[b.next] = x
	b.next = (b.next + 1) % len(b.strs)
	return x
}

func newMultiInsert[T any](head, row string, per int, args func([]any, *boxer, *T) []any) *multiInsert[T] {
	m := &multiInsert[T]{head: head, row: row, per: per, args: args}
	m.full = m.sql(per)
	return m
}

func (m *multiInsert[T]) sql(n int) string {
	var sb strings.Builder
	sb.WriteString(m.head)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(m.row)
	}
	return sb.String()
}

// exec inserts rows on c (in the caller's transaction); buf is a reused
// argument buffer, bx the boxer of the caller's values.
func (m *multiInsert[T]) exec(ctx context.Context, c dbtx, rows []T, buf *[]any, bx *boxer) error {
	for len(rows) > 0 {
		n := min(len(rows), m.per)
		a := (*buf)[:0]
		for i := range rows[:n] {
			a = m.args(a, bx, &rows[i])
		}
		q := m.full
		if n < m.per {
			q = m.sql(n)
		}
		_, err := c.ExecContext(ctx, q, a...)
		clear(a)
		*buf = a[:0]
		if err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// posting is one row of block_names.
type posting struct{ name, first int64 }

// postings inserts postings (sorted), 128 per statement.
var postings = newMultiInsert("INSERT OR IGNORE INTO block_names (name_id, first_seq) VALUES ", "(?,?)", 128,
	func(a []any, bx *boxer, p *posting) []any { return append(a, bx.int(0, p.name), bx.int(1, p.first)) })

// insertPostings inserts ps (sorted); args is a reused argument buffer and
// bx a boxer with ints.
func insertPostings(ctx context.Context, c dbtx, ps []posting, args *[]any, bx *boxer) error {
	if err := postings.exec(ctx, c, ps, args, bx); err != nil {
		return fmt.Errorf("insert postings: %w", err)
	}
	return nil
}

// rollback ends a failed transaction. SQLite may already have rolled it back
// itself (e.g. on SQLITE_FULL); that is not an error.
func (s *Store) rollback() {
	s.dict.rollback()
	s.pendingPosted = s.postedSeq.Load() // a posting pass in it did not happen
	s.postQ = postQueue{}                // nor the part of a pass; the next lists its blocks again
	if _, err := s.wc.ExecContext(context.Background(), "ROLLBACK"); err != nil &&
		!strings.Contains(err.Error(), "no transaction is active") {
		s.log.Error("Store rollback failed", "err", err)
	}
}

// checkRoom enforces MaxBytes before a write: over the bound, it deletes the
// oldest entries every sink has passed; if that is not enough it returns
// ErrFull. Call with mu held.
func (s *Store) checkRoom(ctx context.Context) error {
	if s.opts.MaxBytes <= 0 {
		return nil
	}
	used, err := s.usedBytes(ctx)
	if err != nil {
		return err
	}
	if used < s.opts.MaxBytes {
		return nil
	}
	if used, err = s.reclaimLocked(ctx, s.opts.MaxBytes); err != nil {
		return err
	}
	if used >= s.opts.MaxBytes {
		err := fmt.Errorf("%d bytes used, max %d, nothing delivered left to drop: %w", used, s.opts.MaxBytes, ErrFull)
		s.setFull(true, "max bytes reached", err)
		s.m.fullRefusals.Inc()
		return err
	}
	return nil
}

// setFull logs transitions into and out of the full state (not every
// refused batch).
func (s *Store) setFull(full bool, why string, err error) {
	if s.full.Swap(full) == full {
		return
	}
	if full {
		s.log.Error("Store full, refusing appends until space is freed", "reason", why, "err", err,
			"max_bytes", s.opts.MaxBytes, "path", s.opts.Path)
	} else {
		s.log.Info("Store accepting appends again", "path", s.opts.Path)
	}
}
