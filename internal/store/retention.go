package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Run applies retention and the MaxBytes bound every
// Options.RetentionInterval until ctx is cancelled, then returns nil.
// Errors of a pass are logged and the next pass tries again.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.RetentionInterval)
	defer t.Stop()
	held := false
	for {
		n, h, err := s.retain(ctx, time.Now())
		switch {
		case errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed):
		case err != nil:
			s.log.Warn("Store retention pass failed", "err", err)
		case n > 0:
			s.log.Info("Store retention deleted entries", "deleted", n)
		}
		if h.sink != "" && !held {
			if h.running {
				s.log.Warn("Store retention held back by a sink behind the retention period", "sink", h.sink)
			} else {
				s.log.Warn("Store retention held back by the cursor of a sink that does not run here (an output removed from the configuration?); with the collector stopped, `xrdmon outputs --forget NAME` removes it",
					"sink", h.sink)
			}
		}
		held = h.sink != ""
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// holder is the sink whose cursor keeps expired entries, and whether it
// runs in this process.
type holder struct {
	sink    string
	running bool
}

// retain runs one retention pass at time now: it deletes entries older than
// Retention that every registered sink has passed, then, if MaxBytes is set
// and more than 90% of it is used, the oldest passed entries whatever their
// age until usage is under 90%. It returns the number of deleted entries and
// the name of a sink that keeps expired entries alive, if any.
func (s *Store) retain(ctx context.Context, now time.Time) (deleted int64, heldBy holder, err error) {
	maxSeq, who, running := s.minCursor()
	if s.opts.Retention > 0 {
		// A block goes when its newest entry is older than the cutoff and
		// every sink has passed it.
		cutoff := now.Add(-s.opts.Retention).UnixNano()
		for {
			n, k, err := s.deleteBlocks(ctx, `SELECT first_seq, records + events, names FROM blocks
				WHERE max_ns < ?1 AND last_seq <= ?2 ORDER BY first_seq LIMIT ?3`, cutoff, maxSeq, retentionBlocks)
			deleted += n
			if err != nil {
				return deleted, holder{}, fmt.Errorf("retention: %w", err)
			}
			if k < retentionBlocks {
				break
			}
		}
		if who != "" {
			var one int
			err := s.rdb.QueryRowContext(ctx, `SELECT 1 FROM blocks WHERE max_ns < ? AND last_seq > ? LIMIT 1`, cutoff, maxSeq).Scan(&one)
			if err == nil {
				heldBy = holder{who, running}
			}
		}
	}
	if s.opts.MaxBytes > 0 {
		low := s.opts.MaxBytes / 10 * 9
		for {
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				return deleted, heldBy, ErrClosed
			}
			used, err := s.usedBytes(ctx)
			var n int64
			if err == nil && used > low {
				n, err = s.dropOldest(ctx, maxSeq)
			}
			s.mu.Unlock()
			deleted += n
			if err != nil {
				return deleted, heldBy, fmt.Errorf("reclaim: %w", err)
			}
			if used <= low || n == 0 {
				break
			}
		}
	}
	s.m.retentionDeleted.Add(float64(deleted))
	return deleted, heldBy, nil
}

// retentionBlocks is the most blocks deleted in one transaction.
const retentionBlocks = 16

// deleteBlocks deletes, in one transaction under mu, the blocks listed by
// the query sel (first_seq, entries, names) and their postings. It returns
// the entries and the blocks deleted.
func (s *Store) deleteBlocks(ctx context.Context, sel string, args ...any) (entries int64, blocks int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, 0, ErrClosed
	}
	return s.deleteBlocksLocked(ctx, sel, args...)
}

// deleteBlocksLocked is deleteBlocks with mu held.
func (s *Store) deleteBlocksLocked(ctx context.Context, sel string, args ...any) (entries int64, blocks int, err error) {
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			s.rollback()
		}
	}()
	type victim struct {
		first, n int64
		names    []byte
	}
	vs, err := queryAll(ctx, s.wc, "select blocks", func(rows *sql.Rows, v *victim) error {
		return rows.Scan(&v.first, &v.n, &v.names)
	}, sel, args...)
	if err != nil {
		return 0, 0, err
	}
	if len(vs) == 0 {
		_, err := s.wc.ExecContext(ctx, "ROLLBACK")
		return 0, 0, err
	}
	for _, v := range vs {
		ids, err := decodeIDs(v.names)
		if err != nil {
			return 0, 0, fmt.Errorf("block %d: %w", v.first, err)
		}
		for _, id := range ids {
			if _, err := s.wc.ExecContext(ctx, `DELETE FROM block_names WHERE name_id = ? AND first_seq = ?`, id, v.first); err != nil {
				return 0, 0, fmt.Errorf("delete postings of block %d: %w", v.first, err)
			}
		}
		if _, err := s.wc.ExecContext(ctx, `DELETE FROM blocks WHERE first_seq = ?`, v.first); err != nil {
			return 0, 0, fmt.Errorf("delete block %d: %w", v.first, err)
		}
		entries += v.n
	}
	if _, err := s.wc.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		return 0, 0, fmt.Errorf("commit: %w", err)
	}
	if s.postQ.ps != nil {
		firsts := make([]int64, len(vs))
		for i, v := range vs {
			firsts[i] = v.first
		}
		slices.Sort(firsts)
		s.dropQueued(firsts)
	}
	return entries, len(vs), nil
}

// dropOldest deletes up to retentionBlocks of the oldest blocks (by seq)
// that every sink has passed (last_seq <= maxSeq), in one transaction, and
// returns the entries deleted. Call with mu held.
func (s *Store) dropOldest(ctx context.Context, maxSeq int64) (int64, error) {
	n, _, err := s.deleteBlocksLocked(ctx, `SELECT first_seq, records + events, names FROM blocks
		WHERE last_seq <= ? ORDER BY first_seq LIMIT ?`, maxSeq, retentionBlocks)
	if err != nil {
		return 0, fmt.Errorf("drop oldest: %w", err)
	}
	s.m.maxBytesDropped.Add(float64(n))
	return n, nil
}

// reclaimLocked drops the oldest delivered entries until fewer than target
// bytes are used or nothing delivered is left, and returns the bytes used.
// Call with mu held.
func (s *Store) reclaimLocked(ctx context.Context, target int64) (int64, error) {
	maxSeq, _, _ := s.minCursor()
	for {
		used, err := s.usedBytes(ctx)
		if err != nil || used < target {
			return used, err
		}
		n, err := s.dropOldest(ctx, maxSeq)
		if err != nil {
			return used, err
		}
		if n == 0 {
			return used, nil
		}
	}
}
