package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

// DeadLetter is a log entry that a sink's destination refused for good (a
// PostgreSQL data error, a message the broker rejected): the sink set it
// aside here and moved on, so that one bad row never stops the rest. The
// entry itself stays in the log; the dead letter keeps a readable copy and
// the destination's reason, for an operator to inspect and replay.
type DeadLetter struct {
	ID      int64     `json:"id"`
	Sink    string    `json:"sink"`
	Seq     int64     `json:"seq"`      // the entry's position in the log
	EntryID string    `json:"entry_id"` // record_id or event_id
	Kind    string    `json:"kind"`     // "record" or "event"
	Data    []byte    `json:"-"`        // the entry in the native JSON schema (docs/records.md)
	Error   string    `json:"error"`    // what the destination said
	Time    time.Time `json:"time"`     // when it was set aside
}

// PutDeadLetter sets entry e aside for sink with the destination's error.
// An entry is set aside once per sink: putting it again (an isolation
// retried after an outage refuses it again) keeps the first, and added
// is false.
func (s *Store) PutDeadLetter(ctx context.Context, sink string, e Entry, reason error) (added bool, err error) {
	var id, kind string
	var data []byte
	switch {
	case e.Record != nil:
		id, kind, data = e.Record.RecordID, "record", record.AppendJSON(nil, e.Record)
	case e.Event != nil:
		id, kind, data = e.Event.EventID, "event", record.AppendEventJSON(nil, e.Event)
	default:
		return false, fmt.Errorf("dead letter %d: empty entry: %w", e.Seq, ErrInvalid)
	}
	msg := "refused"
	if reason != nil {
		msg = reason.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, fmt.Errorf("dead letter: %w", ErrClosed)
	}
	res, err := s.wc.ExecContext(ctx, `INSERT INTO dead_letters (sink, seq, entry_id, kind, data, error, time_ns)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (sink, seq) DO NOTHING`, sink, e.Seq, id, kind, data, msg, time.Now().UnixNano())
	if err != nil {
		return false, fmt.Errorf("dead letter %d for %s: %w", e.Seq, sink, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("dead letter %d for %s: %w", e.Seq, sink, err)
	}
	return n > 0, nil
}

// DeadLetters returns the dead letters of sink ("" for every sink) with an
// id greater than after, oldest first, at most limit of them.
func (r *Reader) DeadLetters(ctx context.Context, sink string, after int64, limit int) ([]DeadLetter, error) {
	return queryAll(ctx, r.rdb, "read dead letters", func(rows *sql.Rows, d *DeadLetter) error {
		var ns int64
		err := rows.Scan(&d.ID, &d.Sink, &d.Seq, &d.EntryID, &d.Kind, &d.Data, &d.Error, &ns)
		d.Time = time.Unix(0, ns).UTC()
		return err
	}, `SELECT id, sink, seq, entry_id, kind, data, error, time_ns FROM dead_letters
		WHERE id > ? AND (? = '' OR sink = ?) ORDER BY id LIMIT ?`, after, sink, sink, limit)
}

// DeleteDeadLetters removes dead letters once an operator has dealt with
// them (sent them again, or dismissed them: xrdmon deadletters --delete):
// those of ids, or with ids nil every one of sink ("": of every sink).
// It returns how many it removed; a missing id is not an error.
func (s *Store) DeleteDeadLetters(ctx context.Context, sink string, ids []int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("delete dead letters: %w", ErrClosed)
	}
	if ids == nil {
		res, err := s.wc.ExecContext(ctx, `DELETE FROM dead_letters WHERE ? = '' OR sink = ?`, sink, sink)
		if err != nil {
			return 0, fmt.Errorf("delete dead letters: %w", err)
		}
		return res.RowsAffected()
	}
	var n int64
	for _, id := range ids {
		res, err := s.wc.ExecContext(ctx, `DELETE FROM dead_letters WHERE id = ? AND (? = '' OR sink = ?)`, id, sink, sink)
		if err != nil {
			return n, fmt.Errorf("delete dead letter %d: %w", id, err)
		}
		k, err := res.RowsAffected()
		if err != nil {
			return n, fmt.Errorf("delete dead letter %d: %w", id, err)
		}
		n += k
	}
	return n, nil
}
