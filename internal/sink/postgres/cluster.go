package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/store"
)

// A collector of a bus cluster (docs/scale-out.md) holds its shard through
// a Lease and keeps, through a ClusterStore, what another collector needs
// to take the shard over in PostgreSQL: the records and events (the
// records and events tables, deduplicated by id) and the correlation
// checkpoint (shard_state), written before the input they cover is
// acknowledged. A local disk that vanishes with its machine then loses
// nothing: the next holder of the shard restores the checkpoint from
// PostgreSQL, and the broker redelivers what was not acknowledged.
//
// Fencing: a Lease is a session advisory lock, held on its own connection
// for as long as the collector runs, and an epoch in shard_leases that
// each new holder increments. Every checkpoint is written in a
// transaction that reads the epoch FOR SHARE and writes only if it is the
// holder's: a collector that lost its lease (its connection to PostgreSQL
// broke, another took the shard) can never overwrite the newer holder's
// state, and its commit fails, so it acknowledges nothing more.

// ClusterConfig is the cluster section of the configuration: a collector
// of a bus cluster holds its shard queue (amqp_input.queue) through a
// lease in this PostgreSQL database and keeps the shard's records, events
// and checkpoint there (docs/scale-out.md).
type ClusterConfig struct {
	Enabled bool   `yaml:"enabled" help:"hold the shard (amqp_input.queue) through a lease in PostgreSQL and keep its records, events and checkpoint there, so another collector can take it over"`
	URL     string `yaml:"url" secret:"url" help:"PostgreSQL connection string of the cluster's state (may be outputs.postgres.url's)"`
	Schema  string `yaml:"schema" help:"schema of the cluster's tables (shard_leases, shard_state, shard_redirects, records, events)"`
	Holder  string `yaml:"holder" help:"this collector's name in shard_leases; empty: the host name"`
}

// DefaultClusterConfig returns the defaults: off, schema xrdmon.
func DefaultClusterConfig() ClusterConfig { return ClusterConfig{Schema: DefaultOptions().Schema} }

// ErrFenced is returned by ClusterStore.PutState and Append when this
// collector no longer holds the shard (another may hold it now).
var ErrFenced = errors.New("the shard's lease was taken over by another collector")

// Lease is this process's hold on one shard.
type Lease struct {
	Shard  string
	Epoch  int64
	schema string
	conn   *pgx.Conn
	pid    uint32 // the lease connection's backend, which holds the lock
	lost   chan struct{}
	stop   context.CancelFunc
	done   chan struct{}
}

// leaseKey is the advisory lock's key text of a shard.
func leaseKey(schema, shard string) string { return "xrdmon/" + schema + "/" + shard }

// AcquireLease waits until this process holds shard (polling every
// interval, logging while it waits), then takes the next epoch. The lease
// lasts until Release, or until its connection breaks (Lost).
func AcquireLease(ctx context.Context, url, schema, shard, holder string, interval time.Duration, log *slog.Logger) (*Lease, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("lease: parse url: %w", err)
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = "xrdmon lease " + shard
	cfg.DialFunc = (&net.Dialer{Timeout: 30 * time.Second, KeepAliveConfig: leaseKeepAlive}).DialContext
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("lease: connect: %w", err)
	}
	keepAliveOnServer(ctx, conn, 10*interval, log)
	if err := migrate(ctx, conn, schema); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("lease: %w", err)
	}
	start, logged := time.Now(), false
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, leaseKey(schema, shard)).Scan(&got); err != nil {
			conn.Close(context.Background())
			return nil, fmt.Errorf("lease %s: %w", shard, err)
		}
		if got {
			break
		}
		if err := endSilentHolder(ctx, conn, schema, shard, 10*interval, log); err != nil {
			conn.Close(context.Background())
			return nil, fmt.Errorf("lease %s: %w", shard, err)
		}
		if !logged {
			log.Info("Waiting for the shard: another collector holds it", "shard", shard)
			logged = true
		}
		select {
		case <-ctx.Done():
			conn.Close(context.Background())
			return nil, ctx.Err()
		case <-time.After(interval):
		}
	}
	s := pgx.Identifier{schema}.Sanitize()
	l := &Lease{Shard: shard, schema: schema, conn: conn, pid: conn.PgConn().PID(), lost: make(chan struct{}), done: make(chan struct{})}
	err = conn.QueryRow(ctx, `INSERT INTO `+s+`.shard_leases (shard, epoch, holder, acquired) VALUES ($1, 1, $2, now())
		ON CONFLICT (shard) DO UPDATE SET epoch = shard_leases.epoch + 1, holder = EXCLUDED.holder, acquired = now()
		RETURNING epoch`, shard, holder).Scan(&l.Epoch)
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("lease %s: take the epoch: %w", shard, err)
	}
	log.Info("Holding the shard", "shard", shard, "epoch", l.Epoch, "waited", time.Since(start).Round(time.Millisecond))
	var mctx context.Context
	mctx, l.stop = context.WithCancel(context.Background())
	go l.watch(mctx, interval)
	return l, nil
}

// leaseKeepAlive probes the lease connection when it is idle, so that a
// peer that vanished without a reset is noticed within about 20 s on this
// side (the watch's pings notice it sooner).
var leaseKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 3}

// keepAliveOnServer sets the server's side of the lease connection alike:
// PostgreSQL releases the advisory lock only when it ends the session, and
// with its default keepalives (tcp_keepalives_idle 7200 s on Linux) a
// session whose client vanished without a reset lives for hours. And it
// sets idle_session_timeout to silent (PostgreSQL 14 and later): the
// holder runs a statement every poll interval (watch), so a session idle
// for longer is a holder that stopped (a dead machine, a frozen process
// whose kernel still answers the keepalives), and the server ends it
// itself, without waiting for a standby's endSilentHolder (which needs
// the right to end another session). Settings the server refuses (an
// older version, a pooler) are logged and skipped: endSilentHolder still
// frees the shard.
func keepAliveOnServer(ctx context.Context, conn *pgx.Conn, silent time.Duration, log *slog.Logger) {
	for _, set := range []string{"SET tcp_keepalives_idle = 10", "SET tcp_keepalives_interval = 5",
		"SET tcp_keepalives_count = 3", "SET tcp_user_timeout = 30000",
		fmt.Sprintf("SET idle_session_timeout = %d", silent.Milliseconds())} {
		if _, err := conn.Exec(ctx, set); err != nil {
			log.Debug("Lease connection setting refused", "setting", set, "err", err)
		}
	}
}

// endSilentHolder ends the session that holds the shard's lock when it has
// run no statement within ttl (a session running one, e.g. a new holder
// waiting for a row lock to take the epoch, is not silent): a live holder pings its lease connection
// every interval (watch), so a silent one is frozen — its machine stopped
// or partitioned behind something that neither forwards nor resets the
// connection, and no keepalive reaches the server. Whatever the frozen
// holder still writes is fenced by the epoch. Ending another session needs
// the same role as its user (or pg_signal_backend); without it the server's
// keepalives are what free the shard, and the refusal is logged.
func endSilentHolder(ctx context.Context, conn *pgx.Conn, schema, shard string, ttl time.Duration, log *slog.Logger) error {
	var pid *int32
	err := conn.QueryRow(ctx, `WITH k AS (SELECT hashtextextended($1, 0) AS k)
		SELECT a.pid FROM k, pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid = ((k.k >> 32) & 4294967295)::oid AND l.objid = (k.k & 4294967295)::oid
		  AND a.state <> 'active' AND a.state_change < now() - make_interval(secs => $2)`,
		leaseKey(schema, shard), ttl.Seconds()).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look for a silent holder: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend($1)`, *pid); err != nil {
		log.Warn("Cannot end the session of a holder silent for longer than its lease allows; waiting for the server to notice",
			"shard", shard, "pid", *pid, "silent_for_more_than", ttl, "err", err)
		return nil
	}
	log.Warn("Ended the session of a silent holder of the shard", "shard", shard, "pid", *pid, "silent_for_more_than", ttl)
	return nil
}

// watch checks the lease's connection every interval; when it breaks, the
// lock is gone (PostgreSQL released it with the session) and Lost closes.
func (l *Lease) watch(ctx context.Context, interval time.Duration) {
	defer close(l.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, 5*interval)
			err := l.conn.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				close(l.lost)
				return
			}
		}
	}
}

// Lost is closed when the lease's connection broke: another collector may
// take the shard; this one must stop.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// lostYet reports whether Lost is closed.
func (l *Lease) lostYet() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

// fence checks, in tx, that this lease still holds the shard: the shard's
// epoch is the lease's (read FOR SHARE: a new holder's increment waits for
// tx) and the lease's session still holds the advisory lock (a session
// PostgreSQL ended has released it, whether or not anyone took the shard
// yet). Otherwise it returns a permanent ErrFenced: what this collector
// made since it lost the shard is the next holder's to make again, from
// the last checkpoint, in order.
func (l *Lease) fence(ctx context.Context, tx pgx.Tx) error {
	if l.lostYet() {
		return fmt.Errorf("%w: %w (the lease's connection broke)", store.ErrPermanent, ErrFenced)
	}
	var epoch int64
	var held bool
	err := tx.QueryRow(ctx, `SELECT l.epoch, EXISTS (SELECT 1 FROM pg_locks k, (SELECT hashtextextended($3, 0) AS h) x
			WHERE k.pid = $2 AND k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
			  AND k.classid = ((x.h >> 32) & 4294967295)::oid AND k.objid = (x.h & 4294967295)::oid)
		FROM `+pgx.Identifier{l.schema}.Sanitize()+`.shard_leases l WHERE l.shard = $1 FOR SHARE OF l`,
		l.Shard, int32(l.pid), leaseKey(l.schema, l.Shard)).Scan(&epoch, &held)
	if err != nil {
		return fmt.Errorf("read the lease: %w", err)
	}
	if epoch != l.Epoch {
		return fmt.Errorf("%w: %w (epoch %d, ours %d)", store.ErrPermanent, ErrFenced, epoch, l.Epoch)
	}
	if !held {
		return fmt.Errorf("%w: %w (the lease's session has ended)", store.ErrPermanent, ErrFenced)
	}
	return nil
}

// Release gives the shard up (the lock goes with the connection).
func (l *Lease) Release() {
	l.stop()
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.conn.Close(ctx)
}

// idleInTransaction bounds how long a cluster collector's writer may leave
// a transaction idle (it never does so, alive: its statements follow each
// other at once); 10 s, the silence a lease tolerates at the collector's
// 1 s poll interval.
const idleInTransaction = 10 * time.Second

// LocalStore is what a ClusterStore keeps locally: the pipeline's store
// interface (store.Store).
type LocalStore interface {
	Append(ctx context.Context, recs []record.Record, evs []record.Event) error
	PutState(ctx context.Context, key string, blob []byte) error
	GetState(ctx context.Context, key string) ([]byte, error)
}

// ClusterStore is the pipeline's store of a cluster collector: the local
// store (which the outputs read), and PostgreSQL for the records, events
// and checkpoints of the lease's shard, under the lease's epoch.
type ClusterStore struct {
	local LocalStore
	lease *Lease
	log   *slog.Logger

	mu      sync.Mutex // the writer and state queries share its connection
	w       *writer
	refused int64
	feed    redirectFeed // reading position in shard_redirects (redirects.go)
}

// NewClusterStore returns the store of a collector holding lease, writing
// to the PostgreSQL database at url (schema) and to local.
func NewClusterStore(local LocalStore, lease *Lease, url, schema string, log *slog.Logger) (*ClusterStore, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := DefaultOptions()
	opts.Schema = schema
	if err := opts.fill(); err != nil {
		return nil, err
	}
	w, err := newWriter(url, opts, log)
	if err != nil {
		return nil, err
	}
	w.fence = lease.fence
	// A holder that stops dead inside a transaction (a frozen machine)
	// would keep its row lock on the shard's lease, and the next holder
	// could never take the epoch: the server ends such a transaction after
	// the silence the lease tolerates.
	w.cfg.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(idleInTransaction.Milliseconds())
	return &ClusterStore{local: local, lease: lease, log: log, w: w, feed: redirectFeed{seen: map[string]uint64{}}}, nil
}

// Append writes recs and evs to PostgreSQL (a redelivery's duplicates are
// dropped there), in a transaction fenced by the lease (ErrFenced,
// permanent, once another collector may hold the shard), then to the local
// store. A row PostgreSQL refuses is logged and left to the local store's
// outputs (the PostgreSQL output sets it aside); anything else fails the
// commit, which the pipeline retries (PostgreSQL drops what it has
// already).
func (c *ClusterStore) Append(ctx context.Context, recs []record.Record, evs []record.Event) error {
	if err := c.appendShared(ctx, recs, evs); err != nil {
		return err
	}
	return c.local.Append(ctx, recs, evs)
}

func (c *ClusterStore) appendShared(ctx context.Context, recs []record.Record, evs []record.Event) error {
	if c.lease.lostYet() {
		return fmt.Errorf("cluster store: records: %w: %w", store.ErrPermanent, ErrFenced)
	}
	batch := make([]store.Entry, 0, len(recs)+len(evs))
	for i := range recs {
		batch = append(batch, store.Entry{Record: &recs[i]})
	}
	for i := range evs {
		if !evs[i].Type.Internal() { // progress events stay in the local store, as with every output
			batch = append(batch, store.Entry{Event: &evs[i]})
		}
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
		if err := c.ensure(ctx); err != nil {
			return fmt.Errorf("cluster store: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("cluster store: records: %w", err)
	}
	if err := c.publishRedirects(ctx, evs); err != nil {
		c.w.close()
		return fmt.Errorf("cluster store: %w", err)
	}
	return nil
}

// PutState writes a checkpoint locally and to PostgreSQL, if the lease's
// epoch is still the shard's (else ErrFenced, permanent).
func (c *ClusterStore) PutState(ctx context.Context, key string, blob []byte) error {
	if err := c.local.PutState(ctx, key, blob); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ensure(ctx); err != nil {
		return err
	}
	s := pgx.Identifier{c.lease.schema}.Sanitize()
	err := pgx.BeginFunc(ctx, c.w.conn, func(tx pgx.Tx) error {
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
			c.w.close()
		}
		return fmt.Errorf("cluster store: checkpoint %s: %w", key, err)
	}
	return nil
}

// GetState reads the shard's checkpoint from PostgreSQL (the last holder
// wrote it there). When the shard has none there (a collector that ran
// alone, now joining a cluster), it is the local store's, if any.
func (c *ClusterStore) GetState(ctx context.Context, key string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ensure(ctx); err != nil {
		return nil, err
	}
	var blob []byte
	err := c.w.conn.QueryRow(ctx, `SELECT state FROM `+pgx.Identifier{c.lease.schema}.Sanitize()+`.shard_state WHERE shard = $1 AND key = $2`,
		c.lease.Shard, key).Scan(&blob)
	if errors.Is(err, pgx.ErrNoRows) {
		return c.local.GetState(ctx, key)
	}
	if err != nil {
		c.w.close()
		return nil, fmt.Errorf("cluster store: read checkpoint %s: %w", key, err)
	}
	return blob, nil
}

// ensure connects the writer's connection if it is not.
func (c *ClusterStore) ensure(ctx context.Context) error {
	if c.w.conn != nil && !c.w.conn.IsClosed() {
		return nil
	}
	c.w.close()
	return c.w.connect(ctx)
}

// Close closes the PostgreSQL connection (not the local store).
func (c *ClusterStore) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.w.close()
}
