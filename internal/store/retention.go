package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Run applies retention and the MaxBytes bound every
// Options.RetentionInterval and runs the index pass (IndexNow) every
// Options.IndexInterval until ctx is cancelled, then returns nil. Errors of
// a pass are logged and the next pass tries again.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.RetentionInterval)
	defer t.Stop()
	it := time.NewTicker(s.opts.IndexInterval)
	defer it.Stop()
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
		if h != "" && !held {
			s.log.Warn("Store retention held back by a sink behind the retention period", "sink", h)
		}
		held = h != ""
		if !s.waitRetention(ctx, t.C, it.C) {
			return nil
		}
	}
}

// waitRetention runs index passes on ticks of index until retain ticks
// (true) or ctx is done (false).
func (s *Store) waitRetention(ctx context.Context, retain, index <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-retain:
			return true
		case <-index:
			if _, err := s.IndexNow(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
				s.log.Warn("Store index pass failed", "err", err)
			}
		}
	}
}

// retain runs one retention pass at time now: it deletes entries older than
// Retention that every registered sink has passed, then, if MaxBytes is set
// and more than 90% of it is used, the oldest passed entries whatever their
// age until usage is under 90%. It returns the number of deleted entries and
// the name of a sink that keeps expired entries alive, if any.
func (s *Store) retain(ctx context.Context, now time.Time) (deleted int64, heldBy string, err error) {
	maxSeq, who := s.minCursor()
	if s.opts.Retention > 0 {
		cutoff := now.Add(-s.opts.Retention).UnixNano()
		for _, q := range []string{
			`DELETE FROM records WHERE seq IN (SELECT seq FROM records WHERE end_ns < ?1 AND seq <= ?2 LIMIT ?3)`,
			`DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE time_ns < ?1 AND seq <= ?2 LIMIT ?3)`,
		} {
			for {
				n, err := s.deleteChunk(ctx, q, cutoff, maxSeq, s.opts.BatchSize)
				deleted += n
				if err != nil {
					return deleted, "", fmt.Errorf("retention: %w", err)
				}
				if n < int64(s.opts.BatchSize) {
					break
				}
			}
		}
		if who != "" {
			var one int
			err := s.rdb.QueryRowContext(ctx, `SELECT 1 FROM records WHERE end_ns < ? AND seq > ? LIMIT 1`, cutoff, maxSeq).Scan(&one)
			if err == nil {
				heldBy = who
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

// deleteChunk runs one bounded delete statement under mu.
func (s *Store) deleteChunk(ctx context.Context, q string, args ...any) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	res, err := s.wc.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// dropOldest deletes up to BatchSize of the oldest entries (by Seq, in both
// tables) with Seq <= maxSeq, in one transaction. Call with mu held.
func (s *Store) dropOldest(ctx context.Context, maxSeq int64) (n int64, err error) {
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			s.rollback()
		}
	}()
	for _, q := range []string{
		`DELETE FROM records WHERE seq IN (SELECT seq FROM records WHERE seq <= ? ORDER BY seq LIMIT ?)`,
		`DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE seq <= ? ORDER BY seq LIMIT ?)`,
	} {
		res, err := s.wc.ExecContext(ctx, q, maxSeq, s.opts.BatchSize)
		if err != nil {
			return 0, fmt.Errorf("drop oldest: %w", err)
		}
		k, _ := res.RowsAffected()
		n += k
	}
	if _, err := s.wc.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	s.m.maxBytesDropped.Add(float64(n))
	return n, nil
}

// reclaimLocked drops the oldest delivered entries until fewer than target
// bytes are used or nothing delivered is left, and returns the bytes used.
// Call with mu held.
func (s *Store) reclaimLocked(ctx context.Context, target int64) (int64, error) {
	maxSeq, _ := s.minCursor()
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
