package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

// Entry is one entry of the log: exactly one of Record and Event is set.
// Seq is its sequence number, strictly increasing in append order and never
// reused.
type Entry struct {
	Seq    int64
	Record *record.Record
	Event  *record.Event
}

// readSQL reads the next entries of both tables in one statement, so that
// both are seen in the same snapshot; each side is limited first so a large
// backlog is never sorted as a whole.
const readSQL = `
SELECT seq, 0, data FROM (SELECT seq, data FROM records WHERE seq > ?1 ORDER BY seq LIMIT ?2)
UNION ALL
SELECT seq, 1, data FROM (SELECT seq, data FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2)
ORDER BY 1 LIMIT ?2`

// Read returns up to max entries with Seq > afterSeq, in Seq order
// (max <= 0: Options.BatchSize). An empty result means the reader is at the
// end of the log. Entries deleted by retention are skipped silently.
func (s *Store) Read(ctx context.Context, afterSeq int64, max int) ([]Entry, error) {
	if max <= 0 {
		max = s.opts.BatchSize
	}
	rows, err := s.rdb.QueryContext(ctx, readSQL, afterSeq, max)
	if err != nil {
		return nil, fmt.Errorf("read after %d: %w", afterSeq, err)
	}
	defer rows.Close()
	out := make([]Entry, 0, min(max, 1024))
	var data []byte
	for rows.Next() {
		var e Entry
		var kind int
		if err := rows.Scan(&e.Seq, &kind, &data); err != nil {
			return nil, fmt.Errorf("read after %d: %w", afterSeq, err)
		}
		if kind == 0 {
			e.Record = new(record.Record)
			err = record.DecodeStored(data, e.Record)
		} else {
			e.Event = new(record.Event)
			err = record.DecodeStoredEvent(data, e.Event)
		}
		if err != nil {
			return nil, fmt.Errorf("read after %d: decode seq %d: %w", afterSeq, e.Seq, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read after %d: %w", afterSeq, err)
	}
	return out, nil
}

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
	return s.cursors[sink], nil
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
// destination and everything counts as delivered), and the sink holding it.
func (s *Store) minCursor() (int64, string) {
	last := s.lastSeq.Load()
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	m, who := last, ""
	for k, v := range s.cursors {
		if v < m {
			m, who = v, k
		}
	}
	return m, who
}

// Query selects records for the dashboard, the API and tests. Zero fields
// do not filter.
type Query struct {
	// From (inclusive) and To (exclusive) bound the record time: End, or
	// Start when End is unknown.
	From, To time.Time
	// Server matches ServerHost, or ServerIP for records without a host
	// name (indexed).
	Server string
	// ServerIP matches ServerIP exactly (not indexed: combine it with
	// another filter on a big store).
	ServerIP string
	Site     string
	User     string
	// PathPrefix matches paths starting with it (indexed range scan).
	PathPrefix string
	// Reason, when set, selects partial records of that reason;
	// Partial selects all partial records.
	Reason  record.Reason
	Partial bool
	// Limit caps the result (<= 0: 1000; at most 100000).
	Limit int
	// Newest returns the latest records first (default: oldest first).
	Newest bool
}

// Query returns the records matching q, ordered by time.
func (s *Store) Query(ctx context.Context, q Query) ([]record.Record, error) {
	query, args := querySQL(q, s.indexedSeq.Load())
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("query records: %w", err)
	}
	defer rows.Close()
	var out []record.Record
	var data []byte
	var end, seq int64
	for rows.Next() {
		if err := rows.Scan(&end, &seq, &data); err != nil {
			return nil, fmt.Errorf("query records: %w", err)
		}
		out = append(out, record.Record{})
		if err := record.DecodeStored(data, &out[len(out)-1]); err != nil {
			return nil, fmt.Errorf("query records: decode: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query records: %w", err)
	}
	return out, nil
}

// querySQL returns the statement and arguments of q. indexed is the index
// pass's high-water mark: every record with seq <= indexed has ix set, so
// it is in records_user and records_dir.
//
// A query with a user or path filter, whose index only holds the records
// with ix set, is the union of two disjoint parts in one statement (one
// snapshot): the rows with ix set through the partial index, and the rows
// without it, which all have seq > indexed, by a rowid range scan of that
// tail (NOT INDEXED keeps the planner on the rowid). A stale indexed (lower
// than the stored mark) only makes the tail scan longer.
func querySQL(q Query, indexed int64) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	if !q.From.IsZero() {
		add("end_ns >= ?", q.From.UnixNano())
	}
	if !q.To.IsZero() {
		add("end_ns < ?", q.To.UnixNano())
	}
	nameID := func(col string, k dictKind, name string) {
		add(col+" = (SELECT id FROM names WHERE kind = ? AND name = ?)", k, name)
	}
	if q.Server != "" {
		nameID("server_id", kindServer, q.Server)
	}
	if q.ServerIP != "" {
		nameID("ip_id", kindIP, q.ServerIP)
	}
	if q.Site != "" {
		nameID("site_id", kindSite, q.Site)
	}
	if q.User != "" {
		nameID("user_id", kindUser, q.User)
	}
	if q.PathPrefix != "" {
		cond, a := pathPrefixCond(q.PathPrefix)
		add(cond, a...)
	}
	if q.Reason != record.Complete {
		add("reason = ?", string(q.Reason))
	} else if q.Partial {
		add("reason != ''")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 1000
	}
	limit = min(limit, 100000)
	order := " ORDER BY 1, 2"
	if q.Newest {
		order = " ORDER BY 1 DESC, 2 DESC"
	}
	cond := strings.Join(where, " AND ")
	var sb strings.Builder
	switch {
	case q.User != "" || q.PathPrefix != "":
		// A compound SELECT with ORDER BY: SQLite merges the two sorted
		// parts and stops at the limit.
		sb.WriteString("SELECT end_ns, seq, data FROM records WHERE ix IS NOT NULL AND ")
		sb.WriteString(cond)
		sb.WriteString(" UNION ALL SELECT end_ns, seq, data FROM records NOT INDEXED WHERE seq > ? AND ix IS NULL AND ")
		sb.WriteString(cond)
		tail := append(append([]any{}, args...), indexed)
		args = append(tail, args...)
	case len(where) > 0:
		sb.WriteString("SELECT end_ns, seq, data FROM records WHERE ")
		sb.WriteString(cond)
	default:
		sb.WriteString("SELECT end_ns, seq, data FROM records")
	}
	sb.WriteString(order)
	sb.WriteString(" LIMIT ?")
	args = append(args, limit)
	return sb.String(), args
}

// pathPrefixCond returns the condition selecting records whose path starts
// with p. A path is stored as dir_id (its directory, up to the last '/', in
// names) and file (the rest). The path starts with p when its directory
// starts with p (a range of names), or when its directory is p's own
// directory and its file starts with the rest of p. The candidates are
// found through the (dir_id, end_ns) index.
func pathPrefixCond(p string) (string, []any) {
	rangeSQL, args := textRange("name", p)
	rangeDirs := "SELECT id FROM names WHERE kind = ? AND " + rangeSQL
	rangeArgs := append([]any{kindDir}, args...)
	pdir, rest := splitPath(p)
	if rest == "" { // p is a directory: exactly the dirs starting with p
		return "dir_id IN (" + rangeDirs + ")", rangeArgs
	}
	fileSQL, fileArgs := textRange("file", rest)
	a := append([]any{}, rangeArgs...)
	ownDir := "SELECT 0" // paths without '/' have dir_id 0
	if pdir != "" {
		ownDir = "SELECT id FROM names WHERE kind = ? AND name = ?"
		a = append(a, kindDir, pdir)
	}
	cond := "dir_id IN (" + rangeDirs + " UNION ALL " + ownDir + ") AND (" +
		fileSQL + " OR dir_id IN (" + rangeDirs + "))"
	a = append(a, fileArgs...)
	a = append(a, rangeArgs...)
	return cond, a
}

// textRange returns the condition "col starts with p" as an index range.
func textRange(col, p string) (string, []any) {
	if hi, ok := prefixEnd(p); ok {
		return "(" + col + " >= ? AND " + col + " < ?)", []any{p, hi}
	}
	return col + " >= ?", []any{p}
}

// prefixEnd returns the smallest string greater than every string with the
// given prefix, or false when there is none (all bytes 0xff).
func prefixEnd(p string) (string, bool) {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// PutState durably stores blob under key, replacing any previous value.
// It is meant for checkpoints of correlation state.
func (s *Store) PutState(ctx context.Context, key string, blob []byte) error {
	if blob == nil {
		blob = []byte{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("put state %s: %w", key, ErrClosed)
	}
	_, err := s.wc.ExecContext(ctx, `INSERT INTO state (key, blob, updated_ns) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET blob = excluded.blob, updated_ns = excluded.updated_ns`,
		key, blob, time.Now().UnixNano())
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

// GetState returns the blob last put under key, or ErrNotFound.
func (s *Store) GetState(ctx context.Context, key string) ([]byte, error) {
	var blob []byte
	err := s.rdb.QueryRowContext(ctx, `SELECT blob FROM state WHERE key = ?`, key).Scan(&blob)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get state %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get state %s: %w", key, err)
	}
	if blob == nil {
		blob = []byte{}
	}
	return blob, nil
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
