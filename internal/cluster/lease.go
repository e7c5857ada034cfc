package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/signal"
	"github.com/xrdmon/xrdmon/internal/sink/postgres"
	"github.com/xrdmon/xrdmon/internal/store"
)

// ErrFenced is returned by Store.PutState and Append when this
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
	if err := postgres.Migrate(ctx, conn, schema); err != nil {
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
	return signal.Closed(l.lost)
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
