package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/backoff"
	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/metrics"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/rollup"
)

// stageRollups is the staging table of a rollup export: temporary, per
// connection, emptied at each commit.
const stageRollups = "xrdmon_stage_rollups"

// rollupDims are the dimension columns of the rollups table, in table
// order, with the dimension each holds.
var rollupDims = []struct {
	col string
	dim record.Dim
}{
	{"server", record.DimServer}, {"site", record.DimSite}, {"vo", record.DimVO},
	{"user_name", record.DimUser}, {"identity", record.DimIdentity}, {"domain", record.DimDomain},
	{"protocol", record.DimProtocol}, {"app", record.DimApp}, {"dir", record.DimDir},
	{"locality", record.DimLocality},
}

// rollupMeasures are the measure columns, in table order (rowOf writes
// them in this order).
var rollupMeasures = []string{
	"read_bytes", "readv_bytes", "write_bytes", "transfers", "partial", "partial_by", "users",
	"duration_ms_sum", "duration_ms_p50", "duration_ms_p90", "duration_ms_p99",
	"size_bytes_p50", "size_bytes_p90", "size_bytes_p99",
}

// rollupColumns are all the columns a row of the export sets.
func rollupColumns() []string {
	cols := []string{"collector", "step", "bucket", "key", "dims"}
	for _, d := range rollupDims {
		cols = append(cols, d.col)
	}
	return append(cols, rollupMeasures...)
}

// rollupExporter writes the collector's rollups (package rollup, in the
// store) into the rollups table: every RollupInterval, the series of the
// buckets that changed since the last export, each with its whole value,
// upserted with the part number reached, in one transaction. The number
// is kept in the database (rollup_exports), so the export resumes where
// the database is, even after the database is restored from a backup.
type rollupExporter struct {
	cfg       *pgx.ConnConfig
	opts      Options
	collector string
	src       rollup.PartReader
	log       *slog.Logger
	m         rollupMetrics

	conn       *pgx.Conn
	copyStage  string
	upsert     string
	copy       copyBuf
	lastExpire time.Time
}

type rollupMetrics struct {
	rows, errors prometheus.Counter
	part         prometheus.Gauge
}

func newRollupExporter(cfg *pgx.ConnConfig, opts Options, collector string, src rollup.PartReader, log *slog.Logger, reg prometheus.Registerer) (*rollupExporter, error) {
	if collector == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("collector name: %w", err)
		}
		collector = h
	}
	ms := metrics.NewSet(reg)
	lbl := prometheus.Labels{"sink": opts.Name}
	m := rollupMetrics{
		rows: metrics.Add(ms, prometheus.NewCounter(prometheus.CounterOpts{Name: "xrdmon_rollup_export_rows_total",
			Help: "Rollup series written to an output (a series is rewritten each time its bucket changes).", ConstLabels: lbl})),
		errors: metrics.Add(ms, prometheus.NewCounter(prometheus.CounterOpts{Name: "xrdmon_rollup_export_errors_total",
			Help: "Rollup exports that failed (retried).", ConstLabels: lbl})),
		part: metrics.Add(ms, prometheus.NewGauge(prometheus.GaugeOpts{Name: "xrdmon_rollup_export_part",
			Help: "The rollup part number an output has exported up to.", ConstLabels: lbl})),
	}
	if err := ms.Err(); err != nil {
		return nil, err
	}
	s := pgx.Identifier{opts.Schema}.Sanitize()
	cols := rollupColumns()
	var set []string
	for _, c := range append([]string{"dims"}, cols[5:]...) {
		set = append(set, c+" = excluded."+c)
	}
	return &rollupExporter{
		cfg: cfg, opts: opts, collector: collector, src: src, log: log, m: m,
		copyStage: `COPY ` + stageRollups + ` (` + strings.Join(cols, ", ") + `) FROM STDIN (FORMAT binary)`,
		upsert: `INSERT INTO ` + s + `.rollups (` + strings.Join(cols, ", ") + `, updated) SELECT ` + strings.Join(cols, ", ") +
			`, now() FROM ` + stageRollups + ` ON CONFLICT (collector, step, bucket, key) DO UPDATE SET ` +
			strings.Join(set, ", ") + `, updated = now()`,
	}, nil
}

// run exports until ctx is cancelled, then once more (what the builder
// flushed when it stopped), within the drain timeout.
func (x *rollupExporter) run(ctx context.Context) {
	defer x.close()
	bo := backoff.Backoff{Min: x.opts.MinBackoff, Max: x.opts.MaxBackoff}
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.opts.DrainTimeout)
			defer cancel()
			if err := x.export(dctx); err != nil {
				x.log.Warn("Rollup export at stop failed; the next start exports it", "err", err)
			}
			return
		case <-time.After(wait):
		}
		if err := x.export(ctx); err != nil {
			if ctx.Err() != nil {
				continue
			}
			x.m.errors.Inc()
			x.close()
			wait = bo.Next()
			x.log.Warn("Rollup export failed; retrying", "err", err, "retry_in", wait.Round(time.Millisecond))
			continue
		}
		bo.Reset()
		wait = x.opts.RollupInterval
	}
}

func (x *rollupExporter) close() {
	closeConn(x.conn)
	x.conn = nil
}

func (x *rollupExporter) connect(ctx context.Context) error {
	if x.conn != nil && !x.conn.IsClosed() {
		return nil
	}
	conn, err := connectSchema(ctx, x.cfg, x.opts.Schema,
		`CREATE TEMP TABLE IF NOT EXISTS `+stageRollups+` (LIKE {{S}}.rollups INCLUDING DEFAULTS) ON COMMIT DELETE ROWS`)
	if err != nil {
		return err
	}
	x.conn = conn
	return nil
}

// export writes what changed since the part number the database holds,
// and deletes what the store's retention deleted, in one transaction.
func (x *rollupExporter) export(ctx context.Context) error {
	if err := x.connect(ctx); err != nil {
		return err
	}
	s := pgx.Identifier{x.opts.Schema}.Sanitize()
	tx, err := x.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	var after int64
	err = tx.QueryRow(ctx, `SELECT part FROM `+s+`.rollup_exports WHERE collector = $1 FOR UPDATE`, x.collector).Scan(&after)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read export position: %w", err)
	}
	rows := 0
	upTo, err := rollup.Changed(ctx, x.src, after, func(step, start int64, series []rollup.ExportRow) error {
		x.copy.reset()
		for i := range series {
			x.row(step, start, &series[i])
		}
		if _, err := x.conn.PgConn().CopyFrom(ctx, bytes.NewReader(x.copy.finish()), x.copyStage); err != nil {
			return fmt.Errorf("copy rollups: %w", err)
		}
		if _, err := tx.Exec(ctx, x.upsert); err != nil {
			return fmt.Errorf("upsert rollups: %w", err)
		}
		// The staging table is emptied at commit only: empty it for the
		// next bucket.
		if _, err := tx.Exec(ctx, `DELETE FROM `+stageRollups); err != nil {
			return fmt.Errorf("clear staging: %w", err)
		}
		rows += len(series)
		return nil
	})
	if err != nil {
		return err
	}
	if upTo == after && time.Since(x.lastExpire) < time.Minute {
		return nil // nothing new
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+s+`.rollup_exports (collector, part, updated) VALUES ($1, $2, now())
		ON CONFLICT (collector) DO UPDATE SET part = excluded.part, updated = excluded.updated`, x.collector, upTo); err != nil {
		return fmt.Errorf("save export position: %w", err)
	}
	cut, err := rollup.Cutoffs(ctx, x.src)
	if err != nil {
		return err
	}
	for step, before := range cut {
		if _, err := tx.Exec(ctx, `DELETE FROM `+s+`.rollups WHERE collector = $1 AND step = $2 AND bucket < $3`,
			x.collector, step, time.Unix(before, 0).UTC()); err != nil {
			return fmt.Errorf("expire rollups: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	x.lastExpire = time.Now()
	x.m.rows.Add(float64(rows))
	x.m.part.Set(float64(upTo))
	return nil
}

// row appends one series to x.copy, in rollupColumns order.
func (x *rollupExporter) row(step, start int64, r *rollup.ExportRow) {
	c := &x.copy
	c.fields(5 + len(rollupDims) + len(rollupMeasures))
	c.text(x.collector)
	c.int4(int32(step))
	c.timestamptz(time.Unix(start, 0))
	c.bytea(rollupKey(r))
	c.text(string(r.Spec))
	dims := r.Spec.Dims()
	for _, d := range rollupDims {
		i := -1
		for j, sd := range dims {
			if sd == d.dim {
				i = j
			}
		}
		if i < 0 || i >= len(r.Keys) {
			c.null()
		} else {
			c.text(r.Keys[i])
		}
	}
	s := r.Agg.Summary()
	c.int8(s.ReadBytes)
	c.int8(s.ReadvBytes)
	c.int8(s.WriteBytes)
	c.int8(s.Transfers)
	c.int8(s.Partial)
	if len(s.PartialBy) == 0 {
		c.null()
	} else {
		b, _ := json.Marshal(s.PartialBy) // reason names: plain strings
		c.jsonb(b)
	}
	c.int8(s.Users)
	c.int8(s.DurationMSSum)
	for _, q := range []rollup.Quantiles{s.DurationMS, s.SizeBytes} {
		c.float8(q.P50)
		c.float8(q.P90)
		c.float8(q.P99)
	}
}

// rollupKey is a series' identity in the table: its dimensions, a zero
// byte, then each value length-prefixed (values may hold any byte, the
// dimension columns hold them made valid UTF-8).
func rollupKey(r *rollup.ExportRow) []byte {
	b := append([]byte(r.Spec), 0)
	for _, v := range r.Keys {
		b = codec.AppendString(b, v)
	}
	return b
}
