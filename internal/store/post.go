package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// postInterval is how often the postings of new blocks are added to
// block_names, in one bulk insert sorted by name. Posting every block as it
// is written would dirty one index page per distinct name in every commit
// (random writes, the trap version 2 fell into); in bulk each name's page
// is dirtied once per interval. Query reads the blocks not yet posted by
// their names column, so results never depend on when the pass ran.
const postInterval = 10 * time.Second

// postLocked adds the postings of every block after meta 'posted_seq' to
// block_names and moves the mark to the last of them, on c in the caller's
// transaction (call with mu held). It returns the postings added.
func (s *Store) postLocked(ctx context.Context, c dbtx) (int, error) {
	start := time.Now()
	from := s.postedSeq.Load()
	rows, err := s.wc.QueryContext(ctx, `SELECT first_seq, names FROM blocks WHERE first_seq > ? ORDER BY first_seq`, from)
	if err != nil {
		return 0, fmt.Errorf("list unposted blocks: %w", err)
	}
	ps := s.postings[:0]
	last := from
	for rows.Next() {
		var first int64
		var names []byte
		if err := rows.Scan(&first, &names); err != nil {
			rows.Close()
			return 0, fmt.Errorf("list unposted blocks: %w", err)
		}
		ids, err := decodeIDs(names)
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("block %d: %w", first, err)
		}
		for _, id := range ids {
			ps = append(ps, posting{id, first})
		}
		last = first
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return 0, fmt.Errorf("list unposted blocks: %w", err)
	}
	if last == from {
		return 0, nil
	}
	slices.SortFunc(ps, func(a, b posting) int {
		if a.name != b.name {
			return int(a.name - b.name)
		}
		return int(a.first - b.first)
	})
	if err := insertPostings(ctx, c, ps, &s.postArgs, &s.postBox); err != nil {
		return 0, err
	}
	if _, err := c.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'posted_seq'`, last); err != nil {
		return 0, fmt.Errorf("update posted seq: %w", err)
	}
	s.postings = ps[:0]
	s.pendingPosted = last
	s.m.postDuration.Observe(time.Since(start).Seconds())
	return len(ps), nil
}

// PostNow adds the postings of every block written since the last pass
// (Append does so every postInterval, and Close once more). Tests and
// tools use it; queries are exact either way.
func (s *Store) PostNow(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("post: %w", ErrClosed)
	}
	return s.postTx(ctx)
}

// postTx runs postLocked in its own transaction. Call with mu held.
func (s *Store) postTx(ctx context.Context) (err error) {
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("post: begin: %w", err)
	}
	defer func() {
		if err != nil {
			s.rollback()
		}
	}()
	if _, err := s.postLocked(ctx, s.wc); err != nil {
		return fmt.Errorf("post: %w", err)
	}
	if _, err := s.wc.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		return fmt.Errorf("post: commit: %w", err)
	}
	s.postCommitted()
	return nil
}

// postCommitted makes a committed pass's mark current.
func (s *Store) postCommitted() {
	if s.pendingPosted > s.postedSeq.Load() {
		s.postedSeq.Store(s.pendingPosted)
	}
	s.lastPost = time.Now()
}
