package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// dictKind says which column a dictionary name belongs to (names.kind).
type dictKind uint8

// The dictionary kinds. The values are stored; never renumber them.
const (
	kindServer dictKind = 1 // records.server_id: ServerHost, or ServerIP without a host
	kindIP     dictKind = 2 // records.ip_id: ServerIP
	kindSite   dictKind = 3 // records.site_id
	kindUser   dictKind = 4 // records.user_id
	kindDir    dictKind = 5 // dirKey of the path (version 4; full directories before)
)

type dictKey struct {
	kind dictKind
	name string
}

// dict maps low-cardinality names (servers, sites, users, directories) to
// the small integer ids stored in records, through the names table. It
// caches the ids it has seen. Only the writer uses it, under Store.mu.
//
// When the store opens, load reads the whole table into the cache if it
// fits in half of it: the cache is then complete, and a miss is a new
// name. A new name gets the next id at once and is inserted with the
// other new names of the transaction (flush, before its commit), without
// a query of its own: where every record brings new names, a query and an
// insert for each had halved what Append carries per CPU second
// (BenchmarkAppendNewNames). A cache
// that is not complete (a table that did not fit, or a cache that filled)
// reads a miss from the table and inserts it if it is not there.
//
// The cache is bounded: when it reaches max entries it is emptied and
// refills from the table (directories are the only kind that can be
// numerous), and is no longer complete. Ids given or inserted by a
// transaction that rolls back are forgotten.
type dict struct {
	ids   [kindDir + 1]map[string]int64 // by kind; string keys hash fastest
	n     int                           // entries in all maps
	added []dictKey                     // given or inserted by the current transaction
	max   int

	complete  bool      // every name of the table is in ids (see load)
	next      int64     // the id the next new name gets, while complete
	committed int64     // next as the last transaction committed it
	fresh     []dictRow // given ids not inserted yet (see flush)
	args      []any     // flush's reused argument buffer
	box       boxer
}

// dictRow is a name given an id by a complete cache, to be inserted.
type dictRow struct {
	id   int64
	kind dictKind
	name string
}

func newDict(max int) *dict {
	d := &dict{max: max}
	for i := range d.ids {
		d.ids[i] = make(map[string]int64)
	}
	return d
}

// dbtx is what dict needs of a connection or transaction.
type dbtx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// id returns the id of name, giving it the next id (complete cache) or
// inserting it into names (in c's transaction) when it is new. The empty
// name is id 0 and is not stored.
func (d *dict) id(ctx context.Context, c dbtx, kind dictKind, name string) (int64, error) {
	if name == "" {
		return 0, nil
	}
	if id, ok := d.ids[kind][name]; ok {
		return id, nil
	}
	if d.complete && d.n < d.max {
		id := d.next
		d.next++
		k := d.keep(kind, name, id)
		d.added = append(d.added, k)
		d.fresh = append(d.fresh, dictRow{id, kind, k.name})
		return id, nil
	}
	if d.complete { // full: the names given so far go in before any query
		if err := d.flush(ctx, c); err != nil {
			return 0, err
		}
		d.complete = false
	}
	var id int64
	err := c.QueryRowContext(ctx, `SELECT id FROM names WHERE kind = ? AND name = ?`, kind, name).Scan(&id)
	fresh := false
	if errors.Is(err, sql.ErrNoRows) {
		var res sql.Result
		if res, err = c.ExecContext(ctx, `INSERT INTO names (kind, name) VALUES (?, ?)`, kind, name); err == nil {
			id, err = res.LastInsertId()
			fresh = true
		}
	}
	if err != nil {
		return 0, fmt.Errorf("name id %q: %w", name, err)
	}
	if d.n >= d.max {
		d.reset()
	}
	k := d.keep(kind, name, id)
	if fresh {
		d.added = append(d.added, k)
	}
	return id, nil
}

// keep caches name's id and returns its key, the name copied.
func (d *dict) keep(kind dictKind, name string, id int64) dictKey {
	k := dictKey{kind, strings.Clone(name)}
	d.ids[kind][k.name] = id
	d.n++
	return k
}

// load reads the names table into the cache when it fits in half of it
// (room to grow), making the cache complete; c is the writer's
// connection, before its first transaction.
func (d *dict) load(ctx context.Context, c *sql.Conn) error {
	var count, last int64
	if err := c.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(MAX(id), 0) FROM names`).Scan(&count, &last); err != nil {
		return fmt.Errorf("count names: %w", err)
	}
	d.reset()
	d.complete = false
	if count > int64(d.max/2) {
		return nil // read from the table as they come
	}
	rows, err := c.QueryContext(ctx, `SELECT id, kind, name FROM names`)
	if err != nil {
		return fmt.Errorf("read names: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id   int64
			kind dictKind
			name string
		)
		if err := rows.Scan(&id, &kind, &name); err != nil {
			return fmt.Errorf("read names: %w", err)
		}
		if kind == 0 || kind > kindDir {
			d.reset() // not a kind of this version: look names up instead
			return nil
		}
		d.ids[kind][name] = id
		d.n++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read names: %w", err)
	}
	d.complete, d.next, d.committed = true, last+1, last+1
	return nil
}

// flush inserts the names given ids since the last flush (in c's
// transaction). Append calls it before it commits.
func (d *dict) flush(ctx context.Context, c dbtx) error {
	if len(d.fresh) == 0 {
		return nil
	}
	err := newNames.exec(ctx, c, d.fresh, &d.args, &d.box)
	d.fresh = d.fresh[:0]
	if err != nil {
		d.complete = false // a name was there after all: look them up again
		return fmt.Errorf("insert names: %w", err)
	}
	return nil
}

// newNames inserts the names a complete cache gave ids, 64 per statement.
var newNames = newMultiInsert("INSERT INTO names (id, kind, name) VALUES ", "(?,?,?)", 64,
	func(a []any, _ *boxer, r *dictRow) []any { return append(a, r.id, int64(r.kind), r.name) })

// commit keeps the ids given or inserted by the transaction that just
// committed (after flush).
func (d *dict) commit() {
	d.added = d.added[:0]
	d.committed = d.next
}

// rollback forgets the ids inserted by the transaction that rolled back.
func (d *dict) rollback() {
	for _, k := range d.added {
		if _, ok := d.ids[k.kind][k.name]; ok {
			delete(d.ids[k.kind], k.name)
			d.n--
		}
	}
	d.added = d.added[:0]
	d.fresh = d.fresh[:0]
	d.next = d.committed
}

// reset empties the cache (after names were deleted).
func (d *dict) reset() {
	for _, m := range d.ids {
		clear(m)
	}
	d.n = 0
	d.added = d.added[:0]
	d.complete = false
}

// dirLevels is the most directory levels of a path that are posted (see
// dirKey).
const dirLevels = 6

// dirKey returns the directory under which a record with path p is posted:
// p up to and including its last '/', cut after the dirLevels-th '/'
// ("/store/data/Run2026A/MinimumBias/AOD/" for a CMS file). Deeper
// directories (dataset blocks, one per few files) would post nearly one
// name per record; the exact path is checked when a candidate block is read.
func dirKey(p string) string {
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			if n++; n == dirLevels {
				return p[:i+1]
			}
		}
	}
	dir, _ := splitPath(p)
	return dir
}

// splitPath splits p after its last '/': dir keeps the slash. A path
// without '/' is all file.
func splitPath(p string) (dir, file string) {
	i := strings.LastIndexByte(p, '/')
	return p[:i+1], p[i+1:]
}

// entryID is the 64-bit key of a record or event id kept in blocks for
// duplicate detection (see Append): xxHash64 of the whole id.
func entryID(id string) uint64 { return xxhash.Sum64String(id) }

// ridOf is the 64-bit key of a record id stored in records.rid: the first
// 16 hex digits of the id (record ids are hex SHA-256 prefixes), or an
// FNV-1a hash of the whole id when it does not start with 16 hex digits.
func ridOf(id string) int64 {
	if len(id) >= 16 {
		if v, err := strconv.ParseUint(id[:16], 16, 64); err == nil {
			return int64(v)
		}
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return int64(h)
}
