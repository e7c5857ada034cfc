package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/sink/postgres"
	"github.com/xrdmon/xrdmon/internal/store"
)

// idleInTransaction bounds how long a cluster collector's writer may leave
// a transaction idle (it never does so, alive: its statements follow each
// other at once); 10 s, the silence a lease tolerates at the collector's
// 1 s poll interval.
const idleInTransaction = 10 * time.Second

// LocalStore is what a Store keeps locally: the pipeline's store
// interface (store.Store).
type LocalStore interface {
	AppendWithProgress(ctx context.Context, recs []record.Record, evs []record.Event, progress []record.Record) error
	PutState(ctx context.Context, key string, blob []byte) error
	GetState(ctx context.Context, key string) ([]byte, error)
}

// Store is the pipeline's store of a cluster collector: the local
// store (which the outputs read), and PostgreSQL for the records, events
// and checkpoints of the lease's shard, under the lease's epoch.
type Store struct {
	local LocalStore
	lease *Lease
	log   *slog.Logger

	mu      sync.Mutex // the writer and state queries share its connection
	w       *postgres.Writer
	refused int64
	feed    redirectFeed // reading position in shard_redirects (redirects.go)
}

// NewStore returns the store of a collector holding lease, writing
// to the PostgreSQL database at url (schema) and to local.
func NewStore(local LocalStore, lease *Lease, url, schema string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := postgres.DefaultOptions()
	opts.Schema = schema
	w, err := postgres.NewWriter(url, opts, log)
	if err != nil {
		return nil, err
	}
	w.Fence(lease.fence)
	// A holder that stops dead inside a transaction (a frozen machine)
	// would keep its row lock on the shard's lease, and the next holder
	// could never take the epoch: the server ends such a transaction after
	// the silence the lease tolerates.
	w.SetRuntimeParam("idle_in_transaction_session_timeout", fmt.Sprint(idleInTransaction.Milliseconds()))
	return &Store{local: local, lease: lease, log: log, w: w, feed: redirectFeed{seen: map[string]uint64{}}}, nil
}

// Append writes recs and evs to PostgreSQL (a redelivery's duplicates are
// dropped there), in a transaction fenced by the lease (ErrFenced,
// permanent, once another collector may hold the shard), then to the local
// store. A row PostgreSQL refuses is logged and left to the local store's
// outputs (the PostgreSQL output sets it aside); anything else fails the
// commit, which the pipeline retries (PostgreSQL drops what it has
// already).
func (c *Store) Append(ctx context.Context, recs []record.Record, evs []record.Event) error {
	return c.AppendWithProgress(ctx, recs, evs, nil)
}

// AppendWithProgress is Append with progress snapshots, which only the
// local store keeps (no output delivers them).
func (c *Store) AppendWithProgress(ctx context.Context, recs []record.Record, evs []record.Event, progress []record.Record) error {
	if err := c.appendShared(ctx, recs, evs); err != nil {
		return err
	}
	return c.local.AppendWithProgress(ctx, recs, evs, progress)
}

func (c *Store) appendShared(ctx context.Context, recs []record.Record, evs []record.Event) error {
	if c.lease.lostYet() {
		return fmt.Errorf("cluster store: records: %w: %w", store.ErrPermanent, ErrFenced)
	}
	batch := make([]store.Entry, 0, len(recs)+len(evs))
	for i := range recs {
		batch = append(batch, store.Entry{Record: &recs[i]})
	}
	for i := range evs {
		batch = append(batch, store.Entry{Event: &evs[i]})
	}
	if len(batch) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.w.Deliver(ctx, batch)
	if errors.Is(err, deliver.ErrRefused) {
		c.refused++
		c.log.Warn("PostgreSQL refused a batch of the shard's records; they stay in the local store", "err", err, "refused_batches", c.refused)
		if _, err := c.w.Conn(ctx); err != nil {
			return fmt.Errorf("cluster store: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("cluster store: records: %w", err)
	}
	if err := c.publishRedirects(ctx, evs); err != nil {
		c.w.Close()
		return fmt.Errorf("cluster store: %w", err)
	}
	return nil
}

// PutState writes a checkpoint locally and to PostgreSQL, if the lease's
// epoch is still the shard's (else ErrFenced, permanent).
func (c *Store) PutState(ctx context.Context, key string, blob []byte) error {
	if err := c.local.PutState(ctx, key, blob); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	conn, err := c.w.Conn(ctx)
	if err != nil {
		return err
	}
	s := pgx.Identifier{c.lease.schema}.Sanitize()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := c.lease.fence(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+s+`.shard_state (shard, key, epoch, state, updated) VALUES ($1, $2, $3, $4, now())
			ON CONFLICT (shard, key) DO UPDATE SET epoch = EXCLUDED.epoch, state = EXCLUDED.state, updated = now()`,
			c.lease.Shard, key, c.lease.Epoch, blob)
		return err
	})
	if err != nil {
		if !errors.Is(err, ErrFenced) {
			c.w.Close()
		}
		return fmt.Errorf("cluster store: checkpoint %s: %w", key, err)
	}
	return nil
}

// GetState reads the shard's checkpoint from PostgreSQL (the last holder
// wrote it there). When the shard has none there (a collector that ran
// alone, now joining a cluster), it is the local store's, if any.
func (c *Store) GetState(ctx context.Context, key string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn, err := c.w.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var blob []byte
	err = conn.QueryRow(ctx, `SELECT state FROM `+pgx.Identifier{c.lease.schema}.Sanitize()+`.shard_state WHERE shard = $1 AND key = $2`,
		c.lease.Shard, key).Scan(&blob)
	if errors.Is(err, pgx.ErrNoRows) {
		return c.local.GetState(ctx, key)
	}
	if err != nil {
		c.w.Close()
		return nil, fmt.Errorf("cluster store: read checkpoint %s: %w", key, err)
	}
	return blob, nil
}

// Close closes the PostgreSQL connection (not the local store).
func (c *Store) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.w.Close()
}
