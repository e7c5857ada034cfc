package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// PutState durably stores blob under key, replacing any previous value.
// It is meant for checkpoints of correlation state: the state is stored
// with the current last sequence number, and the entries appended after
// the oldest stored state are the ones a restart may append again, so the
// next process skips their ids (see Append).
func (s *Store) PutState(ctx context.Context, key string, blob []byte) error {
	if blob == nil {
		blob = []byte{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("put state %s: %w", key, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put state %s: %w", key, err)
	}
	_, err := s.wc.ExecContext(sqlCtx(ctx), `INSERT INTO state (key, blob, updated_ns, seq) VALUES (?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET blob = excluded.blob, updated_ns = excluded.updated_ns, seq = excluded.seq`,
		key, blob, time.Now().UnixNano(), s.lastSeq.Load())
	if err != nil {
		if isDiskFull(err) {
			// Counted and logged like a full Append: a checkpoint is often
			// the first write to meet a full disk.
			s.setFull(true, "disk full", err)
			s.m.fullRefusals.Inc()
			return fmt.Errorf("put state %s: %w", key, fullErr{err})
		}
		return fmt.Errorf("put state %s: %w", key, err)
	}
	return nil
}

// DeleteState removes key; deleting a missing key is not an error.
func (s *Store) DeleteState(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("delete state %s: %w", key, ErrClosed)
	}
	if _, err := s.wc.ExecContext(ctx, `DELETE FROM state WHERE key = ?`, key); err != nil {
		return fmt.Errorf("delete state %s: %w", key, err)
	}
	return nil
}

// PruneStates deletes the states whose key starts with prefix, except the
// keys in keep, and returns how many it deleted. The pipeline calls it once
// its current layout has checkpointed: states of an earlier layout (another
// shard count) are never read again, and would otherwise hold the start of
// the duplicate window (see Append) back for good.
func (s *Store) PruneStates(ctx context.Context, prefix string, keep []string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("prune states: %w", ErrClosed)
	}
	rows, err := s.wc.QueryContext(ctx, `SELECT key FROM state`)
	if err != nil {
		return 0, fmt.Errorf("prune states: %w", err)
	}
	var drop []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return 0, fmt.Errorf("prune states: %w", err)
		}
		if strings.HasPrefix(k, prefix) && !slices.Contains(keep, k) {
			drop = append(drop, k)
		}
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return 0, fmt.Errorf("prune states: %w", err)
	}
	for _, k := range drop {
		if _, err := s.wc.ExecContext(ctx, `DELETE FROM state WHERE key = ?`, k); err != nil {
			return 0, fmt.Errorf("prune state %s: %w", k, err)
		}
	}
	return len(drop), nil
}
