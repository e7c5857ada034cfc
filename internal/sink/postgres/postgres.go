// Package postgres is the PostgreSQL sink: it reads records and events from
// the store's log, from its own persisted cursor, and bulk-loads them into
// a records table partitioned by end time and an events table.
//
// Each batch is loaded in one transaction, with a binary COPY straight
// into the tables, then COMMIT; only then does the cursor move. A
// redelivered batch (after a failure, a crash, or a cursor moved back)
// makes that COPY fail on the primary key; it is then loaded through
// temporary staging tables and INSERT ... SELECT ... ON CONFLICT DO
// NOTHING, so it inserts nothing twice: the load is idempotent on
// record_id and event_id. docs/postgres.md
// documents the schema and the reasoning; schema.go holds it as SQL.
package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Config configures the PostgreSQL output: the outputs.postgres section
// of the configuration.
type Config struct {
	Enabled bool   `yaml:"enabled" help:"write records to PostgreSQL"`
	URL     string `yaml:"url" secret:"url" help:"connection string, postgres://user:pass@host/db or key=value form"`
	// Rollups writes the collector's rollups (rollup section) to the
	// rollups table as well.
	Rollups bool `yaml:"rollups" help:"also write the rollups (time series by dimension, when rollup.enabled) to the rollups table, for Grafana"`
	// Collector names this collector in the rollups table, which several
	// collectors may share.
	Collector string `yaml:"collector" help:"this collector's name in the rollups table (several may share one database); empty: the host name"`
}

// DefaultConfig returns the defaults: off; when on, rollups too.
func DefaultConfig() Config { return Config{Rollups: true} }

// Options tune the sink beyond Config. Start from
// DefaultOptions.
type Options struct {
	// Options tune the delivery loop: the cursor name, the number of log
	// entries loaded per transaction (BatchSize), polling, backoff and the
	// drain after Run's context is cancelled.
	deliver.Options
	// Schema is the PostgreSQL schema holding the tables; it is created
	// if missing.
	Schema string
	// Partition is PartitionDay or PartitionMonth: the range of end times
	// of one records partition.
	Partition string
	// PartitionsAhead is how many partitions after the current one are
	// created in advance (partitions for the records of a batch are always
	// created before it is loaded, whatever their time).
	PartitionsAhead int
	// ConnectTimeout bounds connecting (TCP, TLS, authentication).
	ConnectTimeout time.Duration
	// StatementTimeout bounds one batch's load; on expiry the batch is
	// rolled back and retried.
	StatementTimeout time.Duration
	// RollupInterval is how often the rollups that changed are exported
	// (Config.Rollups).
	RollupInterval time.Duration
}

// DefaultOptions returns the defaults: cursor name "postgres", schema
// "xrdmon", daily partitions with one created ahead, 5000 entries per
// transaction, 100 ms polling, backoff from 200 ms to 30 s.
func DefaultOptions() Options {
	o := deliver.DefaultOptions() // a plain Deliverer: one batch in flight
	o.Name, o.BatchSize, o.PollInterval = "postgres", 5000, 100*time.Millisecond
	return Options{
		Options:          o,
		Schema:           "xrdmon",
		Partition:        PartitionDay,
		PartitionsAhead:  1,
		ConnectTimeout:   10 * time.Second,
		StatementTimeout: 60 * time.Second,
		RollupInterval:   10 * time.Second,
	}
}

func (o *Options) fill() error {
	d := DefaultOptions()
	o.Options = o.Options.WithDefaults(d.Options)
	if o.Schema == "" {
		o.Schema = d.Schema
	}
	if err := units.DefaultChoice(&o.Partition, d.Partition, "partition", PartitionDay, PartitionMonth); err != nil {
		return err
	}
	if o.PartitionsAhead < 0 {
		o.PartitionsAhead = 0
	}
	units.Default(&o.ConnectTimeout, d.ConnectTimeout)
	units.Default(&o.StatementTimeout, d.StatementTimeout)
	units.Default(&o.RollupInterval, d.RollupInterval)
	return nil
}

// Sink loads the store's log into PostgreSQL. Create it with New and call
// Run once.
type Sink struct {
	loop    *deliver.Loop
	w       *Writer
	rollups *rollupExporter // nil: rollups not exported
}

// New returns a sink for cfg with DefaultOptions. See NewWithOptions.
func New(cfg Config, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (*Sink, error) {
	return NewWithOptions(cfg, DefaultOptions(), st, log, reg)
}

// NewWithOptions returns a sink loading the log of st into the database
// cfg names. It does not connect: Run does (creating or migrating the
// schema), and keeps retrying while the database is down. Metrics are
// registered on reg (nil: not registered); a nil log discards.
func NewWithOptions(cfg Config, opts Options, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (*Sink, error) {
	if err := deliver.CheckSink("postgres", st, cfg.URL); err != nil {
		return nil, err
	}
	if err := opts.fill(); err != nil {
		return nil, fmt.Errorf("new postgres sink: %w", err)
	}
	log = deliver.Discard(log)
	l, w, err := deliver.NewSink("postgres", st, opts.Options, log, reg, func(log *slog.Logger) (*Writer, error) {
		return NewWriter(cfg.URL, opts, log)
	})
	if err != nil {
		return nil, err
	}
	s := &Sink{loop: l, w: w}
	if cfg.Rollups {
		s.rollups, err = newRollupExporter(w.cfg, opts, cfg.Collector, st.Reader, log.With("sink", opts.Name, "part", "rollups"), reg)
		if err != nil {
			return nil, fmt.Errorf("new postgres sink: %w", err)
		}
	}
	return s, nil
}

// Run loads until ctx is cancelled, then loads what is left of the backlog
// within Options.DrainTimeout, closes the connection and returns. Failures
// are retried forever; Run returns an error only when it cannot start (the
// cursor cannot be read).
func (s *Sink) Run(ctx context.Context) error {
	defer s.w.Close()
	if s.rollups != nil {
		done := make(chan struct{})
		go func() { s.rollups.run(ctx); close(done) }()
		defer func() { <-done }()
	}
	return s.loop.RunSink(ctx, "postgres", nil)
}
