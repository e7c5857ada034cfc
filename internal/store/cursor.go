package store

import (
	"context"
	"fmt"
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
	return s.writeLocked("set cursor "+sink, func() error {
		_, err := s.wc.ExecContext(ctx, `INSERT INTO cursors (sink, seq, updated_ns) VALUES (?, ?, ?)
		ON CONFLICT (sink) DO UPDATE SET seq = excluded.seq, updated_ns = excluded.updated_ns`,
			sink, seq, time.Now().UnixNano())
		if err != nil {
			return err
		}
		s.cursorMu.Lock()
		s.cursors[sink] = seq
		s.markRunning(sink)
		s.cursorMu.Unlock()
		return nil
	})
}

// DeleteCursor unregisters sink, so it no longer holds back retention. Use
// it when a sink is removed from the configuration for good.
func (s *Store) DeleteCursor(ctx context.Context, sink string) error {
	return s.writeLocked("delete cursor "+sink, func() error {
		if _, err := s.wc.ExecContext(ctx, `DELETE FROM cursors WHERE sink = ?`, sink); err != nil {
			return err
		}
		s.cursorMu.Lock()
		delete(s.cursors, sink)
		s.cursorMu.Unlock()
		return nil
	})
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
