// Package postgres is the PostgreSQL sink: it reads records and events from
// the store's log, from its own persisted cursor, and bulk-loads them into
// a records table partitioned by end time and an events table.
//
// Each batch is loaded in one transaction: COPY into temporary staging
// tables, then INSERT ... SELECT ... ON CONFLICT DO NOTHING into the real
// tables, then COMMIT; only then does the cursor move. A redelivered batch
// (after a failure, a crash, or a cursor moved back) inserts nothing twice:
// the load is idempotent on record_id and event_id. docs/postgres.md
// documents the schema and the reasoning; schema.go holds it as SQL.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/store"
)

// Options tune the sink beyond config.PostgresOutput. Start from
// DefaultOptions.
type Options struct {
	// Name is the sink's cursor name in the store and its metric label.
	Name string
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
	// BatchSize is the number of log entries loaded per transaction.
	BatchSize int
	// PollInterval is how often the store is polled when nothing is new.
	PollInterval time.Duration
	// MinBackoff and MaxBackoff bound the exponential retry delay.
	MinBackoff, MaxBackoff time.Duration
	// DrainTimeout bounds the delivery of the backlog after Run's context
	// is cancelled.
	DrainTimeout time.Duration
	// ConnectTimeout bounds connecting (TCP, TLS, authentication).
	ConnectTimeout time.Duration
	// StatementTimeout bounds one batch's load; on expiry the batch is
	// rolled back and retried.
	StatementTimeout time.Duration
}

// DefaultOptions returns the defaults: cursor name "postgres", schema
// "xrdmon", daily partitions with one created ahead, 5000 entries per
// transaction, 100 ms polling, backoff from 200 ms to 30 s.
func DefaultOptions() Options {
	return Options{
		Name:             "postgres",
		Schema:           "xrdmon",
		Partition:        PartitionDay,
		PartitionsAhead:  1,
		BatchSize:        5000,
		PollInterval:     100 * time.Millisecond,
		MinBackoff:       200 * time.Millisecond,
		MaxBackoff:       30 * time.Second,
		DrainTimeout:     10 * time.Second,
		ConnectTimeout:   10 * time.Second,
		StatementTimeout: 60 * time.Second,
	}
}

func (o *Options) fill() error {
	d := DefaultOptions()
	if o.Name == "" {
		o.Name = d.Name
	}
	if o.Schema == "" {
		o.Schema = d.Schema
	}
	switch o.Partition {
	case "":
		o.Partition = d.Partition
	case PartitionDay, PartitionMonth:
	default:
		return fmt.Errorf("partition %q: want %s or %s", o.Partition, PartitionDay, PartitionMonth)
	}
	if o.PartitionsAhead < 0 {
		o.PartitionsAhead = 0
	}
	if o.BatchSize <= 0 {
		o.BatchSize = d.BatchSize
	}
	if o.PollInterval <= 0 {
		o.PollInterval = d.PollInterval
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = d.MinBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(d.MaxBackoff, o.MinBackoff)
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = d.DrainTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = d.ConnectTimeout
	}
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = d.StatementTimeout
	}
	return nil
}

// Sink loads the store's log into PostgreSQL. Create it with New and call
// Run once.
type Sink struct {
	loop *loop
	w    *writer
}

// New returns a sink for cfg with DefaultOptions. See NewWithOptions.
func New(cfg config.PostgresOutput, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (*Sink, error) {
	return NewWithOptions(cfg, DefaultOptions(), st, log, reg)
}

// NewWithOptions returns a sink loading the log of st into the database
// cfg names. It does not connect: Run does (creating or migrating the
// schema), and keeps retrying while the database is down. Metrics are
// registered on reg (nil: not registered); a nil log discards.
func NewWithOptions(cfg config.PostgresOutput, opts Options, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (*Sink, error) {
	if st == nil {
		return nil, errors.New("new postgres sink: nil store")
	}
	if cfg.URL == "" {
		return nil, errors.New("new postgres sink: empty url")
	}
	if err := opts.fill(); err != nil {
		return nil, fmt.Errorf("new postgres sink: %w", err)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := newWriter(cfg.URL, opts, log.With("sink", opts.Name))
	if err != nil {
		return nil, fmt.Errorf("new postgres sink: %w", err)
	}
	m, err := newLoopMetrics(reg, opts.Name)
	if err != nil {
		return nil, fmt.Errorf("new postgres sink: %w", err)
	}
	s := &Sink{w: w}
	s.loop = &loop{
		o: loopOptions{
			name:         opts.Name,
			batchSize:    opts.BatchSize,
			pollInterval: opts.PollInterval,
			minBackoff:   opts.MinBackoff,
			maxBackoff:   opts.MaxBackoff,
			drainTimeout: opts.DrainTimeout,
		},
		st:      st,
		log:     log,
		m:       m,
		deliver: w.deliver,
	}
	return s, nil
}

// Run loads until ctx is cancelled, then loads what is left of the backlog
// within Options.DrainTimeout, closes the connection and returns. Failures
// are retried forever; Run returns an error only when it cannot start (the
// cursor cannot be read).
func (s *Sink) Run(ctx context.Context) error {
	defer s.w.close()
	if err := s.loop.run(ctx); err != nil {
		return fmt.Errorf("postgres sink %s: %w", s.loop.o.name, err)
	}
	return nil
}
