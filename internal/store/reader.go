package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

// Entry is one entry of the log: exactly one of Record, Event and Progress
// is set. Seq is its sequence number, strictly increasing in append order
// and never reused.
type Entry struct {
	Seq    int64
	Record *record.Record
	Event  *record.Event
	// Progress is a progress snapshot (AppendWithProgress): an access
	// still open, with the bytes it has moved so far, its End the time of
	// the server's isXfr update, and no RecordID. It is kept for the
	// rollups: no output delivers it (Internal).
	Progress *record.Record
}

// Internal reports whether e is kept for xrdmon's own use (the rollups)
// and delivered to no output: a progress snapshot.
func (e *Entry) Internal() bool { return e.Progress != nil }

// Reader reads a store: the log from any position (Read), records by time,
// server, site, user and path (Query), and checkpoint state. A Store reads
// through its own Reader; OpenReader opens one on a database another
// process is writing (WAL readers never block the writer). A Reader is safe
// for concurrent use.
type Reader struct {
	rdb       *sql.DB
	batchSize int

	// A few decompressed blocks, most recently used last: sinks read a
	// block in several Reads of BatchSize entries. Blocks never change
	// once written, so a cached block stays valid until it is deleted
	// (and then it is simply no longer listed).
	cacheMu sync.Mutex
	cache   []cachedBlock
}

type cachedBlock struct {
	first int64
	raw   []byte
}

// readerCacheBlocks is the number of decompressed blocks a Reader keeps.
const readerCacheBlocks = 4

// OpenReader opens the store database at path read-only. The database must
// have been created by this version of the store (or migrated by it).
func OpenReader(path string) (*Reader, error) {
	o := DefaultOptions()
	o.Path = path
	r, err := newReader(o)
	if err != nil {
		return nil, fmt.Errorf("open store reader %s: %w", path, err)
	}
	return r, nil
}

func newReader(o Options) (*Reader, error) {
	rdb, err := sql.Open(driverName, dsn(o, true))
	if err != nil {
		return nil, fmt.Errorf("open readers: %w", err)
	}
	rdb.SetMaxOpenConns(o.ReadConns)
	rdb.SetMaxIdleConns(o.ReadConns)
	if err := rdb.PingContext(context.Background()); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("connect reader: %w", err)
	}
	return &Reader{rdb: rdb, batchSize: o.BatchSize}, nil
}

// Close closes the reader's connections.
func (r *Reader) Close() error { return r.rdb.Close() }

// block returns the decompressed entry list of the block starting at
// first, or nil when it no longer exists (deleted by retention).
func (r *Reader) block(ctx context.Context, first int64) ([]byte, error) {
	r.cacheMu.Lock()
	for i, c := range r.cache {
		if c.first == first {
			r.cache = append(append(r.cache[:i:i], r.cache[i+1:]...), c)
			r.cacheMu.Unlock()
			return c.raw, nil
		}
	}
	r.cacheMu.Unlock()
	var data []byte
	err := r.rdb.QueryRowContext(ctx, `SELECT data FROM blocks WHERE first_seq = ?`, first).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read block %d: %w", first, err)
	}
	// A new buffer every time: decoded entries may point into it.
	raw, err := blockEntries(nil, data)
	if err != nil {
		return nil, fmt.Errorf("block %d: %w", first, err)
	}
	r.cacheMu.Lock()
	if len(r.cache) == readerCacheBlocks {
		r.cache = append(r.cache[:0], r.cache[1:]...)
	}
	r.cache = append(r.cache, cachedBlock{first: first, raw: raw})
	r.cacheMu.Unlock()
	return raw, nil
}

// blockSpan is a block's position in the log.
type blockSpan struct{ first, last int64 }

// blocksFromSQL lists the blocks that may hold entries after ?1: from the
// last block starting at or before ?1 + 1, ?2 of them at the most.
const blocksFromSQL = `SELECT first_seq, last_seq FROM blocks
	WHERE first_seq >= IFNULL((SELECT MAX(first_seq) FROM blocks WHERE first_seq <= ?1 + 1), 0)
	ORDER BY first_seq LIMIT ?2`

// spanPage is how many blocks Read lists at a time: a read of a few
// thousand entries needs a block or two of a busy collector's (up to
// maxBlockEntries each), more of a quiet one's. Listing max+1 blocks at
// once (the most a read could need) stepped through thousands of rows
// per read of a log far behind: a rollup builder or sink catching up paid
// about a row per entry.
const spanPage = 32

// spans lists the blocks that may hold entries after afterSeq, n at the most.
func (r *Reader) spans(ctx context.Context, afterSeq int64, n int) ([]blockSpan, error) {
	rows, err := r.rdb.QueryContext(sqlCtx(ctx), blocksFromSQL, afterSeq, n)
	if err != nil {
		return nil, err
	}
	var spans []blockSpan
	for err == nil && rows.Next() {
		var b blockSpan
		if err = rows.Scan(&b.first, &b.last); err == nil {
			spans = append(spans, b)
		}
	}
	if err == nil {
		err = rows.Err()
	}
	rows.Close()
	return spans, err
}

// Read returns up to max entries with Seq > afterSeq, in Seq order
// (max <= 0: Options.BatchSize). An empty result means the reader is at the
// end of the log. Entries deleted by retention are skipped silently.
func (r *Reader) Read(ctx context.Context, afterSeq int64, max int) ([]Entry, error) {
	if max <= 0 {
		max = r.batchSize
	}
	var out []Entry
	var recs recordSlab
	page := min(max+1, spanPage)
	// from: the blocks up to it are read (a page starts with the block
	// holding from + 1, or the last one before it).
	for from := afterSeq; ; {
		spans, err := r.spans(ctx, from, page)
		if err != nil {
			return nil, fmt.Errorf("read after %d: %w", afterSeq, err)
		}
		for _, b := range spans {
			if b.last <= from {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("read after %d: %w", afterSeq, err)
			}
			raw, err := r.block(sqlCtx(ctx), b.first)
			if err != nil {
				return nil, fmt.Errorf("read after %d: %w", afterSeq, err)
			}
			it := newEntryIter(raw, b.first)
			for it.next() {
				if it.cur.seq <= afterSeq {
					continue
				}
				e, err := decodeEntry(it.cur, &recs, max-len(out))
				if err != nil {
					return nil, fmt.Errorf("read after %d: block %d: %w", afterSeq, b.first, err)
				}
				if out == nil {
					out = make([]Entry, 0, min(max, 1024))
				}
				out = append(out, e)
				if len(out) == max {
					return out, nil
				}
			}
			if it.err != nil {
				return nil, fmt.Errorf("read after %d: block %d: %w", afterSeq, b.first, it.err)
			}
		}
		if len(spans) < page {
			return out, nil // the end of the log
		}
		from = spans[len(spans)-1].last // > from: only the first span can start at or before from + 1
	}
}

// HighWater returns the sequence number of the last entry in the log (0
// when it is empty): one cheap query, for following a writer's progress.
func (r *Reader) HighWater(ctx context.Context) (int64, error) {
	var seq int64
	err := r.rdb.QueryRowContext(ctx, `SELECT IFNULL((SELECT last_seq FROM blocks ORDER BY first_seq DESC LIMIT 1), 0)`).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("read high-water mark: %w", err)
	}
	return seq, nil
}

// Query selects records by time, server, site, user and path prefix (tests use
// it today; the query API of the next issue will). Zero fields
// do not filter.
type Query struct {
	// From (inclusive) and To (exclusive) bound the record time: End, or
	// Start when End is unknown.
	From, To time.Time
	// Server matches ServerHost, or ServerIP for records without a host
	// name (indexed).
	Server string
	// ServerIP matches ServerIP exactly (indexed).
	ServerIP string
	Site     string
	User     string
	// PathPrefix matches paths starting with it (indexed by directory).
	PathPrefix string
	// Reason, when set, selects partial records of that reason;
	// Partial selects all partial records.
	Reason  record.Reason
	Partial bool
	// Limit caps the result (<= 0: 1000; at most 100000).
	Limit int
	// MaxBytes, when positive, bounds the stored bytes of the records of
	// one page (at least one record): a page that reaches it ends early,
	// with a position to go on from.
	MaxBytes int
	// Newest returns the latest records first (default: oldest first).
	Newest bool
	// After, when set, continues a listing: only records that come after
	// it in the order asked for (the Next of the previous page).
	After *Position
}

// Position is a record's place in the order of Query: its time (End, or
// Start when End is unknown, in Unix ns), then its log sequence number.
// Positions are stable: a page cursor stays valid while records are added.
type Position struct {
	T   int64 `json:"t"`
	Seq int64 `json:"seq"`
}

// before reports whether a sorts before b (time, then sequence number).
func (a Position) before(b Position) bool {
	return a.T < b.T || (a.T == b.T && a.Seq < b.Seq)
}

// match reports whether rec passes every filter of q but the limit.
func (q *Query) match(rec *record.Record, t int64) bool {
	switch {
	case !q.From.IsZero() && t < q.From.UnixNano(),
		!q.To.IsZero() && t >= q.To.UnixNano(),
		q.Server != "" && serverName(rec.ServerHost, rec.ServerIP) != q.Server,
		q.ServerIP != "" && rec.ServerIP != q.ServerIP,
		q.Site != "" && rec.Site != q.Site,
		q.User != "" && rec.User != q.User,
		q.PathPrefix != "" && !strings.HasPrefix(rec.Path, q.PathPrefix),
		q.Reason != record.Complete && rec.Reason != q.Reason,
		q.Partial && rec.Reason == record.Complete:
		return false
	}
	return true
}

// Query returns the records matching q, ordered by time (then sequence
// number).
//
// The candidate blocks are those whose time span meets [From, To) and
// that have a posting (or, not yet posted, a names entry) for every named
// server, server address, site and user and for a directory key that can
// hold PathPrefix. Blocks are visited in
// order of their earliest record time (latest, with Newest), every record
// of a candidate block is decoded and filtered exactly, and the visit
// stops as soon as no further block can hold a record that sorts before
// the Limit-th one found.
func (r *Reader) Query(ctx context.Context, q Query) ([]record.Record, error) {
	recs, _, err := r.QueryPage(ctx, q)
	return recs, err
}

// QueryPage is Query that also returns, when the result is a full page
// (Limit records), the position to pass as After for the next page; nil
// when there are no more.
func (r *Reader) QueryPage(ctx context.Context, q Query) ([]record.Record, *Position, error) {
	plan, err := r.plan(ctx, q)
	if err != nil {
		return nil, nil, fmt.Errorf("query records: %w", err)
	}
	if plan.none {
		return nil, nil, nil
	}
	query, args := querySQL(q, &plan)
	pg := pager[record.Record]{limit: pageLimit(q.Limit), newest: q.Newest, maxBytes: q.MaxBytes}
	return list(ctx, r, "query records", query, args, func(rows *sql.Rows, c *blockCand) (bool, error) {
		var names []byte
		var isPosted bool
		if err := rows.Scan(&c.first, &c.minNs, &c.maxNs, &isPosted, &names); err != nil {
			return false, err
		}
		if isPosted { // its postings matched in the query
			return true, nil
		}
		ids, err := decodeIDs(names) // not posted yet: check its names here
		if err != nil {
			return false, fmt.Errorf("block %d: %w", c.first, err)
		}
		return plan.has(ids), nil
	}, entryRecord, pg, q.After, record.DecodeStored, recordTime, q.match)
}

// pageLimit is the page size of a listing asked for limit entries: 1000
// when limit is not positive, at most 100000.
func pageLimit(limit int) int {
	if limit <= 0 {
		return 1000
	}
	return min(limit, 100000)
}

// blockCand is a block that may hold entries a listing wants.
type blockCand struct{ first, minNs, maxNs int64 }

// candidates runs query, whose rows are blocks, and returns those that
// scan (which reads a row into c, and may look at more of its columns)
// keeps and that a listing continued after after can still need.
func (r *Reader) candidates(ctx context.Context, query string, args []any, after *Position, newest bool,
	scan func(rows *sql.Rows, c *blockCand) (bool, error)) ([]blockCand, error) {
	rows, err := r.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cands []blockCand
	for rows.Next() {
		var c blockCand
		keep, err := scan(rows, &c)
		if err != nil {
			return nil, err
		}
		if keep && !after.beyond(newest, c.minNs, c.maxNs) {
			cands = append(cands, c)
		}
	}
	return cands, rows.Err()
}

// list returns the page pg keeps of a listing, and the position of the
// next page: of the blocks that query selects and keep keeps (see
// candidates), it visits them in the listing's order and adds to pg the
// entries of kind that come after the cursor after and that match (decode
// decodes an entry's data into its value, timeOf gives the entry's time);
// it stops as soon as pg is past the next block. what starts its errors.
func list[T any](ctx context.Context, r *Reader, what, query string, args []any, keep func(rows *sql.Rows, c *blockCand) (bool, error),
	kind byte, pg pager[T], after *Position,
	decode func(data []byte, v *T) error, timeOf func(v *T) int64, match func(v *T, t int64) bool) ([]T, *Position, error) {
	cands, err := r.candidates(ctx, query, args, after, pg.newest, keep)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	for _, c := range cands {
		if pg.past(c.minNs, c.maxNs) {
			break
		}
		raw, err := r.block(ctx, c.first)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", what, err)
		}
		it := newEntryIter(raw, c.first)
		for it.next() {
			if it.cur.kind != kind {
				continue
			}
			var v T
			if err := decode(it.cur.data, &v); err != nil {
				return nil, nil, fmt.Errorf("%s: decode seq %d: %w", what, it.cur.seq, err)
			}
			t := timeOf(&v)
			if match(&v, t) && after.passed(pg.newest, t, it.cur.seq) {
				pg.add(t, it.cur.seq, len(it.cur.data), v)
			}
		}
		if it.err != nil {
			return nil, nil, fmt.Errorf("%s: block %d: %w", what, c.first, it.err)
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
	}
	out, next := pg.page()
	return out, next, nil
}

// beyond reports whether a block of entries timed in [minNs, maxNs] is
// wholly before the cursor a in a listing (false when a is nil).
func (a *Position) beyond(newest bool, minNs, maxNs int64) bool {
	return a != nil && ((!newest && maxNs < a.T) || (newest && minNs > a.T))
}

// passed reports whether the entry at time t and sequence seq comes after
// the cursor a in a listing (newest first when newest); true when a is nil.
func (a *Position) passed(newest bool, t, seq int64) bool {
	if a == nil {
		return true
	}
	p := Position{t, seq}
	if newest {
		return p.before(*a)
	}
	return a.before(p)
}

// pager keeps the first limit entries of a listing in its order (time,
// then sequence number; reversed when newest) and, when maxBytes is set,
// no more of them than fit in maxBytes of stored entry bytes (at least
// one): a page of large entries ends early, with a position to go on from.
type pager[T any] struct {
	limit    int
	newest   bool
	maxBytes int
	bytes    int // stored bytes of hits
	cut      bool
	hits     []hitOf[T]
}

// hitOf is a matching entry with its sort key and its stored size.
type hitOf[T any] struct {
	t, seq int64
	n      int
	v      T
}

// add keeps a matching entry of n stored bytes. Past twice the byte
// budget it trims at once, so that what a scan holds stays bounded too.
func (p *pager[T]) add(t, seq int64, n int, v T) {
	p.hits = append(p.hits, hitOf[T]{t, seq, n, v})
	p.bytes += n
	if p.maxBytes > 0 && p.bytes > 2*p.maxBytes {
		p.trim()
	}
}

func (p *pager[T]) trim() {
	slices.SortFunc(p.hits, func(a, b hitOf[T]) int {
		c := cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.seq, b.seq))
		if p.newest {
			return -c
		}
		return c
	})
	keep := min(len(p.hits), p.limit)
	if p.maxBytes > 0 {
		sum := 0
		for i := range keep {
			if sum += p.hits[i].n; sum > p.maxBytes && i > 0 {
				// Entries that sort earlier can still come and push
				// these out; the page never grows past this again.
				keep, p.limit, p.cut = i, i, true
				break
			}
		}
	}
	for _, h := range p.hits[keep:] {
		p.bytes -= h.n
	}
	clear(p.hits[keep:])
	p.hits = p.hits[:keep]
}

// past reports whether a block of entries timed in [minNs, maxNs], and
// every block after it in the listing's order, can hold no entry that
// sorts before the limit-th one found.
func (p *pager[T]) past(minNs, maxNs int64) bool {
	if len(p.hits) < p.limit {
		return false
	}
	p.trim()
	bound := p.hits[p.limit-1].t
	return (!p.newest && minNs > bound) || (p.newest && maxNs < bound)
}

// page returns the entries found, in order, and the position to continue
// from when the page is full (nil when there are no more).
func (p *pager[T]) page() ([]T, *Position) {
	p.trim()
	out := make([]T, len(p.hits))
	for i, h := range p.hits {
		out[i] = h.v
	}
	if len(p.hits) == p.limit && len(p.hits) > 0 {
		last := p.hits[len(p.hits)-1]
		return out, &Position{last.t, last.seq}
	}
	return out, nil
}

// queryPlan is what Query needs to list its candidate blocks.
type queryPlan struct {
	// need holds one set of name ids per named filter: a block is a
	// candidate when it has a name of every set. nil (no filter) or an
	// empty set (the name is unknown: no block can match) per filter.
	need [][]int64
	// none is true when a filter names something no block has.
	none bool
}

// plan resolves q's names to dictionary ids.
func (r *Reader) plan(ctx context.Context, q Query) (queryPlan, error) {
	var p queryPlan
	ids := func(query string, args ...any) error {
		rows, err := r.rdb.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		var set []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			set = append(set, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(set) == 0 {
			p.none = true
		}
		slices.Sort(set)
		p.need = append(p.need, slices.Compact(set))
		return nil
	}
	nameID := "SELECT id FROM names WHERE kind = ? AND name = ?"
	for _, n := range []struct {
		k dictKind
		v string
	}{{kindServer, q.Server}, {kindIP, q.ServerIP}, {kindSite, q.Site}, {kindUser, q.User}} {
		if n.v != "" {
			if err := ids(nameID, n.k, n.v); err != nil {
				return p, fmt.Errorf("resolve %q: %w", n.v, err)
			}
		}
	}
	if p := q.PathPrefix; p != "" {
		// The directory keys (dirKey) a path starting with p can have:
		// p's own key when p reaches dirLevels levels; otherwise the keys
		// starting with p and p's own directory. A path without '/' has
		// the empty key, which is not posted: then the path filter is
		// left to the exact match.
		var err error
		switch dir, rest := splitPath(p); {
		case strings.Count(p, "/") >= dirLevels:
			err = ids(nameID, kindDir, dirKey(p))
		case dir == "" && rest != "":
		default:
			rangeSQL, rangeArgs := textRange("name", p)
			err = ids("SELECT id FROM names WHERE kind = ? AND "+rangeSQL+" UNION SELECT id FROM names WHERE kind = ? AND name = ?",
				append(append([]any{kindDir}, rangeArgs...), kindDir, dir)...)
		}
		if err != nil {
			return queryPlan{}, fmt.Errorf("resolve path prefix: %w", err)
		}
	}
	return p, nil
}

// has reports whether a block with the sorted names ids can hold a match.
func (p *queryPlan) has(ids []int64) bool {
	for _, set := range p.need {
		found := false
		for _, id := range set {
			if _, ok := slices.BinarySearch(ids, id); ok {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// querySQL returns the statement listing q's candidate blocks and its
// arguments: the posted blocks through block_names, and the blocks after
// meta 'posted_seq' with their names column, which Query checks itself
// (one statement: one snapshot, so the two parts are disjoint and
// complete). The second part is a rowid range (NOT INDEXED: the planner
// would rather walk a time index in order, i.e. every block).
func querySQL(q Query, p *queryPlan) (string, []any) {
	var timeCond []string
	var args []any
	if !q.From.IsZero() {
		timeCond = append(timeCond, "max_ns >= ?")
		args = append(args, q.From.UnixNano())
	}
	if !q.To.IsZero() {
		timeCond = append(timeCond, "min_ns < ?")
		args = append(args, q.To.UnixNano())
	}
	common := strings.Join(append([]string{"records > 0"}, timeCond...), " AND ")
	posted := common + " AND first_seq <= (SELECT value FROM meta WHERE key = 'posted_seq')"
	for _, set := range p.need {
		var sb strings.Builder
		for i, id := range set {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.FormatInt(id, 10))
		}
		posted += " AND first_seq IN (SELECT first_seq FROM block_names WHERE name_id IN (" + sb.String() + "))"
	}
	order := " ORDER BY 2, 1"
	if q.Newest {
		order = " ORDER BY 3 DESC, 1 DESC"
	}
	query := "SELECT first_seq, min_ns, max_ns, 1, NULL FROM blocks WHERE " + posted +
		" UNION ALL SELECT first_seq, min_ns, max_ns, 0, names FROM blocks NOT INDEXED WHERE " + common +
		" AND first_seq > (SELECT value FROM meta WHERE key = 'posted_seq')" + order
	return query, append(append([]any{}, args...), args...)
}

// textRange returns the condition "col starts with p" as an index range.
func textRange(col, p string) (string, []any) {
	if hi, ok := prefixEnd(p); ok {
		return "(" + col + " >= ? AND " + col + " < ?)", []any{p, hi}
	}
	return col + " >= ?", []any{p}
}

// prefixEnd returns the smallest string greater than every string with the
// given prefix, or false when there is none (all bytes 0xff).
func prefixEnd(p string) (string, bool) {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// GetState returns the blob last put under key, or ErrNotFound.
func (r *Reader) GetState(ctx context.Context, key string) ([]byte, error) {
	var blob []byte
	err := r.rdb.QueryRowContext(ctx, `SELECT blob FROM state WHERE key = ?`, key).Scan(&blob)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get state %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get state %s: %w", key, err)
	}
	if blob == nil {
		blob = []byte{}
	}
	return blob, nil
}

// CursorInfo is where one sink (an output, the rollups) is in the log.
type CursorInfo struct {
	Sink    string
	Seq     int64     // the last entry it has passed
	Updated time.Time // when it last moved
}

// Cursors returns the cursors kept in the store, by sink name.
func (r *Reader) Cursors(ctx context.Context) ([]CursorInfo, error) {
	return queryAll(ctx, r.rdb, "read cursors", func(rows *sql.Rows, c *CursorInfo) error {
		var ns int64
		err := rows.Scan(&c.Sink, &c.Seq, &ns)
		c.Updated = time.Unix(0, ns).UTC()
		return err
	}, `SELECT sink, seq, updated_ns FROM cursors ORDER BY sink`)
}

// queryAll runs query on db and returns its rows, each read by scan; what
// starts the errors.
func queryAll[T any](ctx context.Context, db interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, what string, scan func(rows *sql.Rows, v *T) error, query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}
