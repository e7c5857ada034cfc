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
// entries of a stretch of the log, of the series of the bucket of width
// Step seconds starting at Start (Unix seconds). A bucket's value is the
// merge of all its parts; Data is opaque to the store (package rollup).
type RollupPart struct {
	Step, Start, Part int64
	Data              []byte
}

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
}

// CommitRollup applies c in one transaction: after a crash either all of
// it is there or none, so a builder that resumes from its cursor counts
// every entry exactly once.
func (s *Store) CommitRollup(ctx context.Context, c RollupCommit) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("commit rollup: %w", ErrClosed)
	}
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("commit rollup: begin: %w", err)
	}
	defer func() {
		if err != nil {
			s.rollback()
			if isDiskFull(err) {
				s.setFull(true, "disk full", err)
				s.m.fullRefusals.Inc()
				err = fullErr{err}
			}
			err = fmt.Errorf("commit rollup: %w", err)
		}
	}()
	for _, p := range c.Compacted {
		if _, err := s.wc.ExecContext(ctx, `DELETE FROM rollups WHERE step = ? AND start = ? AND part <= ?`, p.Step, p.Start, p.Part); err != nil {
			return err
		}
	}
	for _, ps := range [][]RollupPart{c.Compacted, c.Add} {
		for _, p := range ps {
			if _, err := s.wc.ExecContext(ctx, `INSERT OR REPLACE INTO rollups (step, start, part, data) VALUES (?, ?, ?, ?)`,
				p.Step, p.Start, p.Part, p.Data); err != nil {
				return err
			}
		}
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
	if _, err := s.wc.ExecContext(ctx, "COMMIT"); err != nil {
		return err
	}
	s.cursorMu.Lock()
	s.cursors[RollupCursor] = c.Cursor
	s.cursorMu.Unlock()
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

// RollupParts calls fn with every part of the buckets of width step that
// start in [from, to) (Unix seconds), in order of start and part. fn must
// not keep data.
func (r *Reader) RollupParts(ctx context.Context, step, from, to int64, fn func(p RollupPart) error) error {
	rows, err := r.rdb.QueryContext(ctx, `SELECT start, part, data FROM rollups WHERE step = ? AND start >= ? AND start < ? ORDER BY start, part`, step, from, to)
	if err != nil {
		return fmt.Errorf("read rollups: %w", err)
	}
	defer rows.Close()
	p := RollupPart{Step: step}
	for rows.Next() {
		if err := rows.Scan(&p.Start, &p.Part, &p.Data); err != nil {
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
	rows, err := r.rdb.QueryContext(ctx, `SELECT start, count(*) FROM rollups WHERE step = ? AND start >= ? AND start < ? GROUP BY start`, step, from, to)
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
