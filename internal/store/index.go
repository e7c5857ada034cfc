package store

import (
	"context"
	"fmt"
	"time"
)

// IndexNow runs the index pass: it adds the records appended since the last
// pass to records_user and records_dir (sets ix = 1 on them) in one
// transaction and moves the high-water mark (meta 'indexed_seq') to the
// last sequence number. Run calls it every Options.IndexInterval and Close
// once more; Query reads the records after the mark by a scan of the tail,
// so results never depend on when the pass ran. See FORMAT.md, "Cost as
// the store grows". It returns the number of records indexed.
func (s *Store) IndexNow(ctx context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("index: %w", ErrClosed)
	}
	n, err := s.indexLocked(ctx)
	if err != nil {
		return n, fmt.Errorf("index: %w", err)
	}
	return n, nil
}

// indexLocked is IndexNow with mu held.
func (s *Store) indexLocked(ctx context.Context) (n int64, err error) {
	from, to := s.indexedSeq.Load(), s.lastSeq.Load()
	if to <= from {
		return 0, nil
	}
	start := time.Now()
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			s.rollback()
		}
	}()
	// The rows are taken in seq (rowid) order: the table pages are
	// rewritten sequentially, and each index leaf is dirtied once for the
	// whole pass however many of its keys arrive. ix IS NULL skips the
	// rows that are already set (a pass is idempotent).
	res, err := s.wc.ExecContext(ctx, `UPDATE records SET ix = 1 WHERE seq > ? AND seq <= ? AND ix IS NULL`, from, to)
	if err != nil {
		return 0, fmt.Errorf("mark records: %w", err)
	}
	n, _ = res.RowsAffected()
	if _, err := s.wc.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'indexed_seq'`, to); err != nil {
		return 0, fmt.Errorf("update indexed seq: %w", err)
	}
	if _, err := s.wc.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	s.indexedSeq.Store(to)
	s.m.indexed.Add(float64(n))
	s.m.indexDuration.Observe(time.Since(start).Seconds())
	return n, nil
}
