package postgres

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// Staging tables: temporary, per connection, emptied at each commit.
const (
	stageRecords = "xrdmon_stage_records"
	stageEvents  = "xrdmon_stage_events"
)

// writer owns one connection. It is used by the loop goroutine only.
type writer struct {
	cfg  *pgx.ConnConfig
	opts Options
	log  *slog.Logger

	conn       *pgx.Conn
	partitions map[string]bool // suffixes known to exist
	insRecords string
	insEvents  string

	recs []*record.Record
	evs  []*record.Event
	row  []any
}

func newWriter(url string, opts Options, log *slog.Logger) (*writer, error) {
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
	return &writer{
		cfg:        cfg,
		opts:       opts,
		log:        log,
		partitions: map[string]bool{},
		insRecords: `INSERT INTO ` + s + `.records SELECT * FROM ` + stageRecords + ` ON CONFLICT DO NOTHING`,
		insEvents: `INSERT INTO ` + s + `.events (` + strings.Join(eventColumns, ", ") + `) SELECT ` +
			strings.Join(eventColumns[:10], ", ") + `, data::jsonb, valid FROM ` + stageEvents + ` ON CONFLICT DO NOTHING`,
		row: make([]any, len(recordColumns)),
	}, nil
}

// connect opens the connection, creates or migrates the schema and the
// staging tables.
func (w *writer) connect(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, w.cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if err := migrate(ctx, conn, w.opts.Schema); err != nil {
		conn.Close(ctx)
		return err
	}
	s := pgx.Identifier{w.opts.Schema}.Sanitize()
	for _, q := range []string{
		`CREATE TEMP TABLE IF NOT EXISTS ` + stageRecords + ` (LIKE ` + s + `.records) ON COMMIT DELETE ROWS`,
		// data is text here, cast to jsonb on insert.
		`CREATE TEMP TABLE IF NOT EXISTS ` + stageEvents + ` (
			event_id text, time timestamptz, received timestamptz, type text, provider text,
			server_ip text, server_host text, server_id bigint, server_stod bigint, site text,
			data text, valid boolean) ON COMMIT DELETE ROWS`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			conn.Close(ctx)
			return fmt.Errorf("create staging table: %w", err)
		}
	}
	w.conn = conn
	clear(w.partitions)
	w.log.Debug("PostgreSQL sink connected", "host", w.cfg.Host, "database", w.cfg.Database, "schema", w.opts.Schema)
	return nil
}

func (w *writer) close() {
	if w.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.conn.Close(ctx)
		cancel()
	}
	w.conn = nil
}

// Deliver loads batch in one transaction. On any failure the connection
// is dropped; the next call reconnects.
func (w *writer) Deliver(ctx context.Context, batch []store.Entry) error {
	if w.conn == nil || w.conn.IsClosed() {
		w.close()
		if err := w.connect(ctx); err != nil {
			return err
		}
	}
	if err := w.load(ctx, batch); err != nil {
		w.close()
		return err
	}
	return nil
}

func (w *writer) load(ctx context.Context, batch []store.Entry) error {
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
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	if len(w.recs) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{stageRecords}, recordColumns, &recordRows{w: w, i: -1}); err != nil {
			return fmt.Errorf("copy records: %w", err)
		}
		if _, err := tx.Exec(ctx, w.insRecords); err != nil {
			return fmt.Errorf("insert records: %w", err)
		}
	}
	if len(w.evs) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{stageEvents}, eventColumns, &eventRows{w: w, i: -1}); err != nil {
			return fmt.Errorf("copy events: %w", err)
		}
		if _, err := tx.Exec(ctx, w.insEvents); err != nil {
			return fmt.Errorf("insert events: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ensurePartitions creates the partitions the batch's records fall in, and
// PartitionsAhead after the current one.
func (w *writer) ensurePartitions(ctx context.Context) error {
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

// recordRows feeds CopyFrom; Values reuses one row slice.
type recordRows struct {
	w *writer
	i int
}

func (s *recordRows) Next() bool { s.i++; return s.i < len(s.w.recs) }
func (s *recordRows) Err() error { return nil }

func (s *recordRows) Values() ([]any, error) {
	r := s.w.recs[s.i]
	v := s.w.row[:0]
	v = append(v, r.RecordID, partitionTime(r), optTime(r.Start), r.Received, string(r.Reason),
		clean(r.ServerIP), clean(r.ServerHost), int64(r.ServerID), r.ServerStod, clean(r.Site),
		clean(r.Instance), clean(r.Program), clean(r.Version),
		clean(r.Protocol), clean(r.User), int64(r.UserDictID), clean(r.ClientHost), clean(r.ClientName),
		r.IPv6, clean(r.AuthProtocol), clean(r.DN),
		clean(r.MonInfo), clean(r.VO), clean(r.Role), clean(r.Groups), clean(r.ClientRelease),
		clean(r.AppName), clean(r.AppInfo),
		clean(r.TokenSubject), clean(r.TokenUser), clean(r.TokenOrg), clean(r.TokenRole), clean(r.TokenGroups),
		r.Experiment, r.Activity,
		int64(r.FileID), clean(r.Path), r.FileSize, r.ReadWrite, r.Forced,
		r.ReadBytes, r.ReadvBytes, r.WriteBytes,
		r.HasOps, r.ReadOps, r.ReadvOps, r.WriteOps, r.ReadvSegs, r.ReadvSegsMin, r.ReadvSegsMax,
		r.ReadMin, r.ReadMax, r.ReadvMin, r.ReadvMax, r.WriteMin, r.WriteMax,
		r.HasSSQ, r.ReadSqSum, r.ReadvSqSum, r.ReadvSegSqSum, r.WriteSqSum)
	return v, nil
}

type eventRows struct {
	w *writer
	i int
}

func (s *eventRows) Next() bool { s.i++; return s.i < len(s.w.evs) }
func (s *eventRows) Err() error { return nil }

func (s *eventRows) Values() ([]any, error) {
	e := s.w.evs[s.i]
	var data any
	if len(e.Data) > 0 && !bytes.Equal(e.Data, []byte("null")) {
		data = cleanJSON(e.Data)
	}
	v := s.w.row[:0]
	v = append(v, e.EventID, e.Time, e.Received, string(e.Type), clean(e.Provider), clean(e.ServerIP),
		clean(e.ServerHost), int64(e.ServerID), e.ServerStod, clean(e.Site), data, e.Valid)
	return v, nil
}

func optTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
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
