package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// LastSeq returns the sequence number of the last appended entry (0 for an
// empty log). It never decreases, even when retention deletes entries.
func (s *Store) LastSeq(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.lastSeq.Load(), nil
}

// Cursor returns the persisted position of sink: the Seq of the last entry
// it has delivered, so it resumes with Read(ctx, cursor, n). An unknown sink
// is at 0 (the start of the log).
func (s *Store) Cursor(ctx context.Context, sink string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	s.markRunning(sink)
	return s.cursors[sink], nil
}

// markRunning notes that sink runs in this process. Call with cursorMu
// held.
func (s *Store) markRunning(sink string) {
	if s.running == nil {
		s.running = make(map[string]bool)
	}
	s.running[sink] = true
}

// SetCursor durably records that sink has delivered every entry up to seq,
// and registers the sink: retention never deletes entries a registered sink
// has not passed. A sink may move its cursor back to replay.
func (s *Store) SetCursor(ctx context.Context, sink string, seq int64) error {
	if sink == "" || seq < 0 {
		return fmt.Errorf("set cursor %q to %d: %w", sink, seq, ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("set cursor %s: %w", sink, ErrClosed)
	}
	_, err := s.wc.ExecContext(ctx, `INSERT INTO cursors (sink, seq, updated_ns) VALUES (?, ?, ?)
		ON CONFLICT (sink) DO UPDATE SET seq = excluded.seq, updated_ns = excluded.updated_ns`,
		sink, seq, time.Now().UnixNano())
	if err != nil {
		return fmt.Errorf("set cursor %s: %w", sink, err)
	}
	s.cursorMu.Lock()
	s.cursors[sink] = seq
	s.markRunning(sink)
	s.cursorMu.Unlock()
	return nil
}

// DeleteCursor unregisters sink, so it no longer holds back retention. Use
// it when a sink is removed from the configuration for good.
func (s *Store) DeleteCursor(ctx context.Context, sink string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("delete cursor %s: %w", sink, ErrClosed)
	}
	if _, err := s.wc.ExecContext(ctx, `DELETE FROM cursors WHERE sink = ?`, sink); err != nil {
		return fmt.Errorf("delete cursor %s: %w", sink, err)
	}
	s.cursorMu.Lock()
	delete(s.cursors, sink)
	s.cursorMu.Unlock()
	return nil
}

// Sinks returns the registered sinks and their cursors.
func (s *Store) Sinks() map[string]int64 {
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	m := make(map[string]int64, len(s.cursors))
	for k, v := range s.cursors {
		m[k] = v
	}
	return m
}

// minCursor returns the smallest cursor of the registered sinks, or the last
// sequence number when no sink is registered (then the store itself is the
// destination and everything counts as delivered), the sink holding it and
// whether that sink runs in this process.
func (s *Store) minCursor() (int64, string, bool) {
	last := s.lastSeq.Load()
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	m, who := last, ""
	for k, v := range s.cursors {
		if v < m {
			m, who = v, k
		}
	}
	return m, who, who == "" || s.running[who]
}

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
	_, err := s.wc.ExecContext(ctx, `INSERT INTO state (key, blob, updated_ns, seq) VALUES (?, ?, ?, ?)
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
