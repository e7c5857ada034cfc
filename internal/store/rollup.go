package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// RollupCursor is the cursor name under which the rollup builder's
// position in the log is kept (like a sink's: retention keeps what the
// builder has not read).
const RollupCursor = "rollup"

// RollupPart is one additive part of a rollup bucket: the sums, over the
// entries of a stretch of the log, of the series of one spec (a set of
// dimensions) of the bucket of width Step seconds starting at Start (Unix
// seconds). A bucket's value is the merge of all its parts; a flush writes
// one part per spec, all with the same number. Data is opaque to the
// store (package rollup).
type RollupPart struct {
	Step, Start, Part int64
	Spec              string // AllSpecs: a part of every spec (a minute as a flush writes it)
	Data              []byte
}

// AllSpecs is the Spec of a part holding the series of every spec (the
// rollups write a minute so: one row, not one per spec); it matches any
// spec asked for.
const AllSpecs = "*"

// RollupCommit is what the rollup builder makes durable at once: new
// parts, parts replaced by their merge (Compacted: every older part of
// those buckets is deleted), the buckets expired, its state and its cursor.
type RollupCommit struct {
	Cursor    int64
	State     []byte
	Add       []RollupPart
	Compacted []RollupPart // each replaces every part of its bucket with Part <= its Part
	// Expire deletes, per step, the buckets starting before the time
	// given (Unix seconds).
	Expire map[int64]int64
	// Meta, when set, replaces what readers learn of the rollups kept
	// (RollupMeta).
	Meta []byte
}

// CommitRollup applies c in one transaction: after a crash either all of
// it is there or none, so a builder that resumes from its cursor counts
// every entry exactly once. Parts written before it by AddRollupParts
// count from then on (see there).
func (s *Store) CommitRollup(ctx context.Context, c RollupCommit) error {
	if err := s.rollupTx(ctx, "commit rollup", func(ctx context.Context) error { return s.commitRollup(ctx, c) }); err != nil {
		return err
	}
	s.cursorMu.Lock()
	s.cursors[RollupCursor] = c.Cursor
	s.cursorMu.Unlock()
	return nil
}

// AddRollupParts writes parts in a transaction of their own, ahead of the
// CommitRollup whose state counts them: a flush of many parts is written
// in several short transactions, and the log's appends go on between
// them. Until that commit they are orphans if the builder stops: parts
// numbered above the part its committed state names are dropped when it
// restores (DropRollupPartsAfter).
func (s *Store) AddRollupParts(ctx context.Context, ps []RollupPart) error {
	return s.rollupTx(ctx, "add rollup parts", func(ctx context.Context) error { return s.insertParts(ctx, ps) })
}

// DropRollupPartsAfter deletes the parts numbered above part (the orphans
// of a flush that did not commit) and returns how many there were.
func (s *Store) DropRollupPartsAfter(ctx context.Context, part int64) (int64, error) {
	var n int64
	err := s.rollupTx(ctx, "drop rollup parts", func(ctx context.Context) error {
		res, err := s.wc.ExecContext(ctx, `DELETE FROM rollups WHERE part > ?`, part)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return n, err
}

// rollupTx runs fn in a write transaction: committed if it returns nil,
// rolled back if not; a full disk is reported as ErrFull. fn's statements
// run with a context that is never cancelled (see sqlCtx); ctx is checked
// before the transaction begins.
func (s *Store) rollupTx(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	return s.writeLocked(what, func() (err error) {
		if err := ctx.Err(); err != nil {
			return err
		}
		ctx := sqlCtx(ctx)
		if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		defer func() {
			if err != nil {
				s.rollback()
				if isDiskFull(err) {
					s.setFull(true, "disk full", err)
					s.m.fullRefusals.Inc()
					err = fullErr{err}
				}
			}
		}()
		if err := fn(ctx); err != nil {
			return err
		}
		_, err = s.wc.ExecContext(ctx, "COMMIT")
		return err
	})
}

// commitRollup is CommitRollup's transaction. Call with mu held.
func (s *Store) commitRollup(ctx context.Context, c RollupCommit) error {
	for _, p := range c.Compacted {
		if _, err := s.wc.ExecContext(ctx, `DELETE FROM rollups WHERE step = ? AND start = ? AND part <= ?`, p.Step, p.Start, p.Part); err != nil {
			return err
		}
	}
	// Many parts per statement: a flush of a stream whose time runs fast
	// writes tens of thousands.
	if err := s.insertParts(ctx, c.Compacted); err != nil {
		return err
	}
	if err := s.insertParts(ctx, c.Add); err != nil {
		return err
	}
	for step, before := range c.Expire {
		if _, err := s.wc.ExecContext(ctx, `DELETE FROM rollups WHERE step = ? AND start < ?`, step, before); err != nil {
			return err
		}
	}
	if _, err := s.wc.ExecContext(ctx, `INSERT INTO rollup_state (key, blob) VALUES ('builder', ?)
		ON CONFLICT (key) DO UPDATE SET blob = excluded.blob`, c.State); err != nil {
		return err
	}
	if _, err := s.wc.ExecContext(ctx, `INSERT INTO cursors (sink, seq, updated_ns) VALUES (?, ?, ?)
		ON CONFLICT (sink) DO UPDATE SET seq = excluded.seq, updated_ns = excluded.updated_ns`,
		RollupCursor, c.Cursor, time.Now().UnixNano()); err != nil {
		return err
	}
	if c.Meta != nil {
		if _, err := s.wc.ExecContext(ctx, `INSERT INTO rollup_state (key, blob) VALUES ('meta', ?)
			ON CONFLICT (key) DO UPDATE SET blob = excluded.blob`, c.Meta); err != nil {
			return err
		}
	}
	return nil
}

// rollupParts inserts rollup parts, 64 per statement: a flush of a stream
// whose time runs fast writes tens of thousands.
var rollupParts = newMultiInsert("INSERT OR REPLACE INTO rollups (step, start, part, spec, data) VALUES ", "(?,?,?,?,?)", 64,
	func(a []any, bx *boxer, p *RollupPart) []any {
		return append(a, bx.int(0, p.Step), bx.int(1, p.Start), bx.int(2, p.Part), bx.str(p.Spec), p.Data)
	})

// insertParts inserts ps in the caller's transaction. Call with mu held.
func (s *Store) insertParts(ctx context.Context, ps []RollupPart) error {
	if err := rollupParts.exec(ctx, s.wc, ps, &s.postArgs, new(boxer)); err != nil {
		return fmt.Errorf("insert rollup parts: %w", err)
	}
	return nil
}

// RollupState returns the rollup builder's state and cursor (nil and 0
// when it never committed).
func (r *Reader) RollupState(ctx context.Context) (state []byte, cursor int64, err error) {
	err = r.rdb.QueryRowContext(ctx, `SELECT blob FROM rollup_state WHERE key = 'builder'`).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read rollup state: %w", err)
	}
	err = r.rdb.QueryRowContext(ctx, `SELECT seq FROM cursors WHERE sink = ?`, RollupCursor).Scan(&cursor)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, 0, fmt.Errorf("read rollup cursor: %w", err)
	}
	return state, cursor, nil
}

// RollupMeta returns the Meta of the last commit that had one (nil when
// none did).
func (r *Reader) RollupMeta(ctx context.Context) ([]byte, error) {
	var meta []byte
	err := r.rdb.QueryRowContext(ctx, `SELECT blob FROM rollup_state WHERE key = 'meta'`).Scan(&meta)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read rollup meta: %w", err)
	}
	return meta, nil
}

// RollupBucket names a bucket: its width and start, in seconds.
type RollupBucket struct{ Step, Start int64 }

// RollupChanged returns the buckets that hold a part numbered above after,
// by width then start, and the highest part number among them (after when
// there is none): what an output that exports rollups has not yet seen.
// A compaction keeps the highest number of the parts it merges, so a bucket
// compacted after its parts were exported is not reported again.
func (r *Reader) RollupChanged(ctx context.Context, after int64) ([]RollupBucket, int64, error) {
	rows, err := r.rdb.QueryContext(ctx, `SELECT step, start, max(part) FROM rollups WHERE part > ? GROUP BY step, start ORDER BY step, start`, after)
	if err != nil {
		return nil, after, fmt.Errorf("read changed rollups: %w", err)
	}
	defer rows.Close()
	var out []RollupBucket
	upTo := after
	for rows.Next() {
		var b RollupBucket
		var part int64
		if err := rows.Scan(&b.Step, &b.Start, &part); err != nil {
			return nil, after, fmt.Errorf("read changed rollups: %w", err)
		}
		out = append(out, b)
		upTo = max(upTo, part)
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("read changed rollups: %w", err)
	}
	return out, upTo, nil
}

// RollupParts calls fn with every part of the buckets of width step that
// start in [from, to) (Unix seconds), in order of start and part, of spec
// (and parts of AllSpecs), or of every spec when spec is AllSpecs. fn must
// not keep data.
func (r *Reader) RollupParts(ctx context.Context, step, from, to int64, spec string, fn func(p RollupPart) error) error {
	rows, err := r.rdb.QueryContext(sqlCtx(ctx), `SELECT start, part, spec, data FROM rollups
		WHERE step = ? AND start >= ? AND start < ? AND (spec = ? OR spec = '*' OR ? = '*') ORDER BY start, part, spec`,
		step, from, to, spec, spec)
	if err != nil {
		return fmt.Errorf("read rollups: %w", err)
	}
	defer rows.Close()
	p := RollupPart{Step: step}
	for rows.Next() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read rollups: %w", err)
		}
		if err := rows.Scan(&p.Start, &p.Part, &p.Spec, &p.Data); err != nil {
			return fmt.Errorf("read rollups: %w", err)
		}
		if err := fn(p); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read rollups: %w", err)
	}
	return nil
}

// RollupBuckets returns, for buckets of width step starting in [from, to),
// the number of parts of each (start -> parts), to find what to compact.
func (r *Reader) RollupBuckets(ctx context.Context, step, from, to int64) (map[int64]int, error) {
	rows, err := r.rdb.QueryContext(ctx, `SELECT start, count(DISTINCT part) FROM rollups WHERE step = ? AND start >= ? AND start < ? GROUP BY start`, step, from, to)
	if err != nil {
		return nil, fmt.Errorf("count rollup parts: %w", err)
	}
	defer rows.Close()
	out := make(map[int64]int)
	for rows.Next() {
		var start int64
		var n int
		if err := rows.Scan(&start, &n); err != nil {
			return nil, fmt.Errorf("count rollup parts: %w", err)
		}
		out[start] = n
	}
	return out, rows.Err()
}
