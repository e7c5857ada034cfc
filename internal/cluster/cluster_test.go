package cluster

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

func acquire(t *testing.T, u, schema, shard, holder string, within time.Duration) (*Lease, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return AcquireLease(ctx, u, schema, shard, holder, 50*time.Millisecond, nil)
}

// TestLeaseExclusive: one holder at a time; the next one waits, then gets
// the next epoch; a lease whose connection is killed is lost, and another
// collector takes the shard.
func TestLeaseExclusive(t *testing.T) {
	u := testenv.PostgresURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	a, err := acquire(t, u, schema, "shard.00", "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquire(t, u, schema, "shard.00", "b", 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second holder: %v, want to be kept waiting", err)
	}
	other, err := acquire(t, u, schema, "shard.01", "b", 10*time.Second) // another shard is free
	if err != nil {
		t.Fatal(err)
	}
	other.Release()
	a.Release()
	b, err := acquire(t, u, schema, "shard.00", "b", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if a.Epoch != 1 || b.Epoch != 2 {
		t.Errorf("epochs %d then %d, want 1 then 2", a.Epoch, b.Epoch)
	}

	// Kill b's session, as a vanished machine's is ended: b learns it lost
	// the shard, and c takes it.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'xrdmon lease shard.00'`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease was not lost with its connection")
	}
	c, err := acquire(t, u, schema, "shard.00", "c", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if c.Epoch != 3 {
		t.Errorf("epoch %d, want 3", c.Epoch)
	}
}

// TestClusterStoreFencing: records and checkpoints reach PostgreSQL; the
// next holder reads the checkpoint; the former holder, fenced, can no
// longer write one (a permanent error, so it acknowledges nothing more);
// a redelivered batch is not stored twice.
func TestClusterStoreFencing(t *testing.T) {
	u := testenv.PostgresURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	ctx := context.Background()
	a, err := acquire(t, u, schema, "s0", "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	localA := sinktest.OpenStore(t)
	sa, err := NewStore(localA, a, u, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	if _, err := sa.GetState(ctx, "correlate/0-of-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a first holder's checkpoint: %v, want not found", err)
	}
	// A collector that ran alone joins: its local checkpoint is the shard's
	// until one is in PostgreSQL.
	if err := localA.PutState(ctx, "correlate/redirects", []byte("local")); err != nil {
		t.Fatal(err)
	}
	if got, err := sa.GetState(ctx, "correlate/redirects"); err != nil || string(got) != "local" {
		t.Fatalf("the local checkpoint: %q, %v", got, err)
	}
	recs := testRecords(0, 20)
	for range 2 { // the second time, as a redelivery
		if err := sa.Append(ctx, recs, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := sinktest.PostgresValue[int64](t, u, `SELECT count(*) FROM `+schema+`.records`); n != 20 {
		t.Errorf("%d records in PostgreSQL, want 20", n)
	}
	if err := sa.PutState(ctx, "correlate/0-of-1", []byte("state of a")); err != nil {
		t.Fatal(err)
	}

	a.Release() // a's lock is gone (its machine, say); its store lives on
	b, err := acquire(t, u, schema, "s0", "b", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	sb, err := NewStore(sinktest.OpenStore(t), b, u, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	got, err := sb.GetState(ctx, "correlate/0-of-1")
	if err != nil || string(got) != "state of a" {
		t.Fatalf("the next holder reads %q, %v", got, err)
	}
	err = sa.PutState(ctx, "correlate/0-of-1", []byte("stale"))
	if !errors.Is(err, ErrFenced) || !errors.Is(err, store.ErrPermanent) {
		t.Fatalf("a fenced holder's checkpoint: %v", err)
	}
	if err := sb.PutState(ctx, "correlate/0-of-1", []byte("state of b")); err != nil {
		t.Fatal(err)
	}
	if got, _ := sb.GetState(ctx, "correlate/0-of-1"); string(got) != "state of b" {
		t.Errorf("checkpoint %q after the fenced write", got)
	}
	// Nor does a fenced holder add records: what it made since it lost the
	// shard, the next holder makes again from the checkpoint (issue 29: a
	// stale holder's partial beside the next holder's complete record).
	err = sa.Append(ctx, testRecords(20, 10), nil)
	if !errors.Is(err, ErrFenced) || !errors.Is(err, store.ErrPermanent) {
		t.Fatalf("a fenced holder's records: %v", err)
	}
	if n := sinktest.PostgresValue[int64](t, u, `SELECT count(*) FROM `+schema+`.records`); n != 20 {
		t.Errorf("%d records in PostgreSQL after a fenced holder's append, want 20", n)
	}
}

// TestClusterStoreFencedWhenSessionEnds: PostgreSQL ends the holder's lease
// session (an outage, pg_terminate_backend) and nobody has taken the shard
// yet: the holder's records and checkpoints are refused all the same, for
// good, from the moment the lock is gone.
func TestClusterStoreFencedWhenSessionEnds(t *testing.T) {
	u := testenv.PostgresURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	ctx := context.Background()
	a, err := acquire(t, u, schema, "s0", "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	sa, err := NewStore(sinktest.OpenStore(t), a, u, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	if err := sa.Append(ctx, testRecords(0, 5), nil); err != nil {
		t.Fatal(err)
	}
	if !sinktest.PostgresValue[bool](t, u, `SELECT pg_terminate_backend($1)`, int32(a.pid)) {
		t.Fatal("lease session not terminated")
	}
	waitFor(t, func() bool {
		return sinktest.PostgresValue[int64](t, u, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int32(a.pid)) == 0
	})
	for _, err := range []error{sa.Append(ctx, testRecords(5, 5), nil), sa.PutState(ctx, "correlate/0-of-1", []byte("x"))} {
		if !errors.Is(err, ErrFenced) || !errors.Is(err, store.ErrPermanent) {
			t.Errorf("a holder whose lease session ended: %v", err)
		}
	}
	if n := sinktest.PostgresValue[int64](t, u, `SELECT count(*) FROM `+schema+`.records`); n != 5 {
		t.Errorf("%d records in PostgreSQL, want 5", n)
	}
}

// freezer is a loopback TCP proxy to PostgreSQL that can stop forwarding
// without closing anything: to both ends the connection looks alive (the
// kernel acknowledges), nothing goes through, nothing is reset.
type freezer struct {
	ln     net.Listener
	frozen chan struct{}
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, frozen: make(chan struct{})}
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			go f.pipe(c, s)
			go f.pipe(s, c)
		}
	}()
	return f
}

// pipe copies from src to dst until the proxy is frozen; then it holds
// both open and reads nothing more.
func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		_ = src.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := src.Read(buf)
		select {
		case <-f.frozen:
			return
		default:
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
	}
}

// TestLeaseFrozenConnection: the holder's connection freezes (no reset, no
// close; a partition behind a middlebox): the holder learns it lost the
// shard, and a standby gets it within a bound, rather than after the
// server's TCP keepalive gives up two hours later (issue 25: the standby
// waited until the proxy was killed).
func TestLeaseFrozenConnection(t *testing.T) {
	u := testenv.PostgresURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	target := pu.Host
	if pu.Port() == "" {
		target = net.JoinHostPort(pu.Hostname(), "5432")
	}
	f := newFreezer(t, target)
	via := *pu
	via.Host = f.ln.Addr().String()
	a, err := acquire(t, via.String(), schema, "frozen", "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	// While a's pings go through, a standby waiting three times the
	// silence it tolerates (10 polls) does not take the shard.
	if _, err := acquire(t, u, schema, "frozen", "early", 1500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a standby beside a live holder: %v, want to be kept waiting", err)
	}
	select {
	case <-a.Lost():
		t.Fatal("a live holder lost its lease")
	default:
	}
	close(f.frozen)
	b, err := acquire(t, u, schema, "frozen", "b", 30*time.Second)
	if err != nil {
		t.Fatalf("the standby did not get the shard of a frozen holder: %v", err)
	}
	defer b.Release()
	if b.Epoch != a.Epoch+1 {
		t.Errorf("epoch %d after %d", b.Epoch, a.Epoch)
	}
	select {
	case <-a.Lost():
	case <-time.After(30 * time.Second):
		t.Error("the frozen holder did not learn it lost the shard")
	}
}

// TestLeaseFrozenSessionEndedByServer: a holder freezes (its connection
// neither forwards nor resets, as a stopped machine's) and no standby is
// there to end its session: PostgreSQL ends it by itself
// (idle_session_timeout, 10 poll intervals), so the lock, and the shard,
// are free for whoever comes next, whatever its rights.
func TestLeaseFrozenSessionEndedByServer(t *testing.T) {
	u := testenv.PostgresURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	target := pu.Host
	if pu.Port() == "" {
		target = net.JoinHostPort(pu.Hostname(), "5432")
	}
	f := newFreezer(t, target)
	via := *pu
	via.Host = f.ln.Addr().String()
	a, err := acquire(t, via.String(), schema, "frozen-alone", "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	if n := sinktest.PostgresValue[int64](t, u, `SELECT count(*) FROM pg_settings WHERE name = 'idle_session_timeout'`); n == 0 {
		t.Skip("the server has no idle_session_timeout (PostgreSQL before 14)")
	}
	close(f.frozen)
	waitFor(t, func() bool {
		return sinktest.PostgresValue[int64](t, u, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int32(a.pid)) == 0
	})
}

// TestLeaseNextHolderWaitsForFrozenTransaction: the old holder froze
// inside a transaction that holds the lease's row (its writer's fence), so
// the next holder, which got the lock, waits to take the epoch. Another
// standby must not take that wait for silence and end it (issue 29: the
// standbys ended each other's sessions in turn, for minutes); the frozen
// transaction is the one the server ends, and the writer's sessions are
// set for it (idle_in_transaction_session_timeout).
func TestLeaseNextHolderWaitsForFrozenTransaction(t *testing.T) {
	u := testenv.PostgresURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	ctx := context.Background()
	a, err := acquire(t, u, schema, "s0", "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := NewStore(sinktest.OpenStore(t), a, u, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	if err := sa.PutState(ctx, "k", []byte("a")); err != nil {
		t.Fatal(err)
	}
	var timeout string
	conn, err := sa.w.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&timeout); err != nil || timeout != "10s" {
		t.Errorf("the writer's idle_in_transaction_session_timeout: %q, %v; want 10s", timeout, err)
	}
	// a's frozen writer: a transaction holding the lease's row.
	frozen, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close(ctx)
	tx, err := frozen.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT epoch FROM `+schema+`.shard_leases WHERE shard = 's0' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	a.Release()
	got := make(chan error, 1)
	var b *Lease
	go func() {
		var err error
		b, err = acquire(t, u, schema, "s0", "b", 30*time.Second)
		got <- err
	}()
	// b holds the lock and waits for the row; c waits 10 poll intervals
	// (500 ms) and more beside it.
	waitFor(t, func() bool {
		return sinktest.PostgresValue[int64](t, u, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'xrdmon lease s0' AND wait_event_type = 'Lock'`) == 1
	})
	c, err := acquire(t, u, schema, "s0", "c", 1500*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		if c != nil {
			c.Release()
		}
		t.Fatalf("a standby beside a holder taking the epoch: %v, want to be kept waiting", err)
	}
	select {
	case err := <-got:
		t.Fatalf("b's acquisition ended while the row was locked: %v", err)
	default:
	}
	_ = tx.Rollback(ctx) // the server ends the frozen transaction
	if err := <-got; err != nil {
		t.Fatalf("b: %v", err)
	}
	defer b.Release()
	if b.Epoch != a.Epoch+1 {
		t.Errorf("epoch %d after %d", b.Epoch, a.Epoch)
	}
}

// waitFor polls cond every 10 ms for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in time")
		}
	}
}

// testRecords returns records from..from+n-1, a minute apart.
func testRecords(from, n int) []record.Record {
	return sinktest.Records(from, n, func(i int) record.Record { return sinktest.Record(i, time.Minute) })
}
