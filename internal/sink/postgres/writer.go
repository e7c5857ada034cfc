package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/store"
)

// Staging tables: temporary, per connection, emptied at each commit.
const (
	stageRecords = "xrdmon_stage_records"
	stageEvents  = "xrdmon_stage_events"
)

// Writer loads records and events into the schema's tables over one
// connection of its own: the output's, and a cluster collector's store
// (cluster.Store) for its shard's. One goroutine uses it at a time.
type Writer struct {
	cfg  *pgx.ConnConfig
	opts Options
	log  *slog.Logger

	conn       *pgx.Conn
	partitions map[string]bool // suffixes known to exist
	// the statements of the fast path (COPY into the tables) and of the
	// deduplicating one (COPY into staging, then INSERT ... ON CONFLICT)
	recordSQL, eventSQL loadSQL
	// dupes: the last batch was (in part) a redelivery; load through
	// staging until a batch holds no duplicate.
	dupes bool

	recs []*record.Record
	evs  []*record.Event
	copy copyBuf

	// fence, when set, runs first in every load's transaction; its error
	// fails the load (a cluster collector's lease check, Lease.fence).
	fence func(ctx context.Context, tx pgx.Tx) error
}

// NewWriter returns a writer to the database at url; it connects at its
// first Deliver (or Connect).
func NewWriter(url string, opts Options, log *slog.Logger) (*Writer, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse url: %w", err)
	}
	cfg.ConnectTimeout = opts.ConnectTimeout
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = "xrdmon"
	cfg.RuntimeParams["statement_timeout"] = fmt.Sprint(opts.StatementTimeout.Milliseconds())
	s := pgx.Identifier{opts.Schema}.Sanitize()
	copySQL := func(table string, cols []string) string {
		return `COPY ` + table + ` (` + strings.Join(cols, ", ") + `) FROM STDIN (FORMAT binary)`
	}
	return &Writer{
		cfg:        cfg,
		opts:       opts,
		log:        log,
		partitions: map[string]bool{},
		recordSQL: loadSQL{
			direct: copySQL(s+`.records`, recordColumns),
			stage:  copySQL(stageRecords, recordColumns),
			insert: `INSERT INTO ` + s + `.records SELECT * FROM ` + stageRecords + ` ON CONFLICT DO NOTHING`,
		},
		eventSQL: loadSQL{
			direct: copySQL(s+`.events`, eventColumns),
			stage:  copySQL(stageEvents, eventColumns),
			insert: `INSERT INTO ` + s + `.events (` + strings.Join(eventColumns, ", ") + `) SELECT ` +
				strings.Join(eventColumns, ", ") + ` FROM ` + stageEvents + ` ON CONFLICT DO NOTHING`,
		},
	}, nil
}

// loadSQL are the statements that load one table: COPY into it (the fast
// path), and COPY into its staging table then INSERT ... ON CONFLICT (the
// deduplicating one).
type loadSQL struct{ direct, stage, insert string }

// Connect opens the connection, creates or migrates the schema and the
// staging tables.
func (w *Writer) Connect(ctx context.Context) error {
	conn, err := connectSchema(ctx, w.cfg, w.opts.Schema,
		`CREATE TEMP TABLE IF NOT EXISTS `+stageRecords+` (LIKE {{S}}.records) ON COMMIT DELETE ROWS`,
		`CREATE TEMP TABLE IF NOT EXISTS `+stageEvents+` (LIKE {{S}}.events) ON COMMIT DELETE ROWS`)
	if err != nil {
		return err
	}
	w.conn = conn
	clear(w.partitions)
	w.dupes = false
	w.log.Debug("PostgreSQL sink connected", "host", w.cfg.Host, "database", w.cfg.Database, "schema", w.opts.Schema)
	return nil
}

// connectSchema connects with cfg, creates or migrates schema (Migrate)
// and creates the staging tables of this connection with the statements
// staging, in which {{S}} stands for the schema.
func connectSchema(ctx context.Context, cfg *pgx.ConnConfig, schema string, staging ...string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := Migrate(ctx, conn, schema); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	s := pgx.Identifier{schema}.Sanitize()
	for _, q := range staging {
		if _, err := conn.Exec(ctx, strings.ReplaceAll(q, "{{S}}", s)); err != nil {
			conn.Close(ctx)
			return nil, fmt.Errorf("create staging table: %w", err)
		}
	}
	return conn, nil
}

// Close closes the connection, if open.
func (w *Writer) Close() {
	closeConn(w.conn)
	w.conn = nil
}

// closeConn closes conn, if not nil, giving it a second to say goodbye to
// the server.
func closeConn(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = conn.Close(ctx)
	cancel()
}

// Conn returns the open connection, connecting it if need be: a cluster
// store's checkpoints share it with the loads.
func (w *Writer) Conn(ctx context.Context) (*pgx.Conn, error) {
	if w.conn != nil && !w.conn.IsClosed() {
		return w.conn, nil
	}
	w.Close()
	if err := w.Connect(ctx); err != nil {
		return nil, err
	}
	return w.conn, nil
}

// Fence makes fn run first in every load's transaction, its error failing
// the load (a cluster collector's lease check).
func (w *Writer) Fence(fn func(ctx context.Context, tx pgx.Tx) error) { w.fence = fn }

// SetRuntimeParam sets a server parameter of the connections opened from
// now on.
func (w *Writer) SetRuntimeParam(name, value string) { w.cfg.RuntimeParams[name] = value }

// Deliver loads batch in one transaction. On any failure the connection
// is dropped; the next call reconnects.
func (w *Writer) Deliver(ctx context.Context, batch []store.Entry) error {
	if w.conn == nil || w.conn.IsClosed() {
		w.Close()
		if err := w.Connect(ctx); err != nil {
			return err
		}
	}
	if err := w.load(ctx, batch); err != nil {
		w.Close()
		if Refused(err) {
			return fmt.Errorf("%w: %w", deliver.ErrRefused, err)
		}
		return err
	}
	return nil
}

// Refused reports whether PostgreSQL refused the data itself, so that the
// same rows would fail again: SQLSTATE class 22 (data exception: a value
// out of range, bad encoding), 23 (integrity constraint violation; the
// duplicate keys of a redelivery are handled before this) and 54 (program
// limit exceeded: a row or index entry too large). Everything else (the
// connection, the server, permissions) is an outage to retry.
func Refused(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	switch pe.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}

func (w *Writer) load(ctx context.Context, batch []store.Entry) error {
	w.recs, w.evs = w.recs[:0], w.evs[:0]
	for i := range batch {
		if r := batch[i].Record; r != nil {
			w.recs = append(w.recs, r)
		} else if e := batch[i].Event; e != nil {
			w.evs = append(w.evs, e)
		}
	}
	if err := w.ensurePartitions(ctx); err != nil {
		return err
	}
	if !w.dupes {
		err := w.loadTx(ctx, false)
		if !isUniqueViolation(err) {
			return err
		}
		// Part of the batch is in the tables already: a redelivery.
		// Redeliveries come in runs (a crash, a cursor moved back), so
		// the next batches go through staging too, until one holds no
		// duplicate.
		w.dupes = true
		w.log.Debug("PostgreSQL batch already loaded in part, deduplicating", "entries", len(batch))
	}
	return w.loadTx(ctx, true)
}

// loadTx loads w.recs and w.evs in one transaction. The fast path
// (staged false) copies them into the tables directly, and fails with a
// unique violation when any is there already; staged copies them into the
// staging tables and inserts those ON CONFLICT DO NOTHING, which skips
// what is there already. After a staged load that skipped nothing,
// w.dupes is cleared.
func (w *Writer) loadTx(ctx context.Context, staged bool) error {
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	if w.fence != nil {
		if err := w.fence(ctx, tx); err != nil {
			return err
		}
	}
	skippedRecs, err := w.loadTable(ctx, staged, w.recordSQL, len(w.recs), func(i int) { w.copy.record(w.recs[i]) })
	if err != nil {
		return fmt.Errorf("load records: %w", err)
	}
	skippedEvs, err := w.loadTable(ctx, staged, w.eventSQL, len(w.evs), func(i int) { w.copy.event(w.evs[i]) })
	if err != nil {
		return fmt.Errorf("load events: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if staged && !skippedRecs && !skippedEvs {
		w.dupes = false
	}
	return nil
}

// loadTable encodes rows rows into w.copy (add appends row i) and copies them
// into the table of q (see copyIn). It reports whether any row was skipped
// as there already; with no rows it does nothing.
func (w *Writer) loadTable(ctx context.Context, staged bool, q loadSQL, rows int, add func(i int)) (skipped bool, err error) {
	if rows == 0 {
		return false, nil
	}
	w.copy.reset()
	for i := range rows {
		add(i)
	}
	n, err := w.copyIn(ctx, staged, q, rows)
	return n < int64(rows), err
}

// copyIn sends w.copy with the direct COPY statement of q, or with the
// staging one followed by the insert; it returns the rows inserted.
func (w *Writer) copyIn(ctx context.Context, staged bool, q loadSQL, rows int) (int64, error) {
	pc := w.conn.PgConn()
	if !staged {
		if _, err := pc.CopyFrom(ctx, bytes.NewReader(w.copy.finish()), q.direct); err != nil {
			return 0, fmt.Errorf("copy: %w", err)
		}
		return int64(rows), nil
	}
	if _, err := pc.CopyFrom(ctx, bytes.NewReader(w.copy.finish()), q.stage); err != nil {
		return 0, fmt.Errorf("copy to staging: %w", err)
	}
	tag, err := w.conn.Exec(ctx, q.insert)
	if err != nil {
		return 0, fmt.Errorf("insert: %w", err)
	}
	return tag.RowsAffected(), nil
}

// isUniqueViolation reports whether err is PostgreSQL's unique_violation.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// ensurePartitions creates the partitions the batch's records fall in, and
// PartitionsAhead after the current one.
func (w *Writer) ensurePartitions(ctx context.Context) error {
	need := func(t time.Time) error {
		suffix, from, to := partitionOf(t, w.opts.Partition)
		if w.partitions[suffix] {
			return nil
		}
		if err := createPartition(ctx, w.conn, w.opts.Schema, suffix, from, to); err != nil {
			return err
		}
		w.partitions[suffix] = true
		return nil
	}
	now := time.Now()
	for i := 0; i <= w.opts.PartitionsAhead; i++ {
		t := now.AddDate(0, 0, i)
		if w.opts.Partition == PartitionMonth {
			t = now.AddDate(0, i, 0)
		}
		if err := need(t); err != nil {
			return err
		}
	}
	var lo, hi time.Time // the range of the last partition checked
	for _, r := range w.recs {
		t := partitionTime(r)
		if !t.Before(lo) && t.Before(hi) {
			continue
		}
		recv := r.Received
		if recv.IsZero() {
			recv = now
		}
		if !ownPartition(t, recv, w.opts.Partition, w.opts.PartitionsAhead) {
			continue // records_pdefault takes it
		}
		if err := need(t); err != nil {
			return err
		}
		_, lo, hi = partitionOf(t, w.opts.Partition)
	}
	return nil
}

// partitionTime is the end_time column: End, else Start, else the Unix
// epoch. It depends on the record alone, so a redelivered record has the
// same (record_id, end_time) key. record_id hashes End, so for a given
// record_id it is always the same.
func partitionTime(r *record.Record) time.Time {
	switch {
	case !r.End.IsZero():
		return r.End
	case !r.Start.IsZero():
		return r.Start
	}
	return time.Unix(0, 0)
}

// clean makes s storable in a PostgreSQL text column, which takes neither
// NUL bytes nor invalid UTF-8: they become U+FFFD. Valid strings are
// returned as they are, without allocating.
func clean(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == 0 || c >= utf8.RuneSelf {
			if strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
				return s
			}
			return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
		}
	}
	return s
}

// cleanJSON returns data as a string jsonb accepts: jsonb rejects the
// escape \u0000, which becomes \ufffd.
func cleanJSON(data []byte) string {
	s := clean(string(data))
	if strings.Contains(s, `\u0000`) {
		s = strings.ReplaceAll(s, `\u0000`, `\ufffd`)
	}
	return s
}
