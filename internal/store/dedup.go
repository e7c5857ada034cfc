package store

import (
	"context"
	"fmt"
)

// maxRecent bounds the ids loaded by loadRecent. The window is one
// checkpoint interval of entries (2 s with AMQP input, 30 s for UDP only);
// a store without checkpoints (or migrated from version 3, whose states
// have seq 0) has no bound of its own.
const maxRecent = 4 << 20

// loadRecent fills s.recent with the ids of the entries appended after the
// oldest stored checkpoint (state.seq): the entries a restart may append
// again (see Append). Without any state every entry counts, newest first,
// up to maxRecent.
func (s *Store) loadRecent(ctx context.Context) error {
	var from int64
	if err := s.wc.QueryRowContext(ctx, `SELECT IFNULL(MIN(seq), 0) FROM state`).Scan(&from); err != nil {
		return fmt.Errorf("read checkpoint seq: %w", err)
	}
	s.recent = make(map[uint64]struct{})
	rows, err := s.wc.QueryContext(ctx, `SELECT first_seq, data FROM blocks WHERE last_seq > ? ORDER BY first_seq DESC`, from)
	if err != nil {
		return fmt.Errorf("read recent blocks: %w", err)
	}
	defer rows.Close()
	var buf []byte
	for rows.Next() && len(s.recent) < maxRecent {
		var first int64
		var data []byte
		if err := rows.Scan(&first, &data); err != nil {
			return fmt.Errorf("read recent blocks: %w", err)
		}
		raw, err := blockEntries(buf, data)
		if err != nil {
			return fmt.Errorf("read recent block %d: %w", first, err)
		}
		buf = raw
		it := newEntryIter(raw, first)
		for it.next() {
			if it.cur.seq > from {
				s.recent[it.cur.rid] = struct{}{}
			}
		}
		if it.err != nil {
			return fmt.Errorf("read recent block %d: %w", first, it.err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read recent blocks: %w", err)
	}
	if len(s.recent) >= maxRecent {
		s.log.Warn("Store duplicate window capped: ids older than the newest ones are not checked",
			"ids", len(s.recent), "after_seq", from)
	}
	return nil
}
