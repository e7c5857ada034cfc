//go:build crash

package crash

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// TestClusterFailover is the scale-out proof (docs/scale-out.md): the
// shoveler's messages of 200 servers, routed by `xrdmon bus route` over 3
// shard queues, consumed by 3 "machines", each running the active
// collector of one shard and a standby for each of the others, with the
// shards' state in PostgreSQL. Machine 0 is killed (-9, every process of
// it) mid-stream, then machine 1: their shards are taken over by
// standbys, from the last checkpoints in PostgreSQL. The cluster's records
// table then holds exactly the truth's records, complete, none twice, and
// the same records, field for field, as one collector's clean run
// (compareClean).
func TestClusterFailover(t *testing.T) {
	bc := newBusCluster(t)
	bc.startMembers()
	published := bc.publish(clusterWorkload())

	took0 := bc.failover("machine 0 killed", 40000, func() { bc.killMachine(0) })
	left0 := bc.waiting()
	took1 := bc.failover("machine 1 killed", 90000, func() { bc.killMachine(1) })
	left1 := bc.waiting()
	truth := <-published
	res := bc.finish(truth)
	t.Logf("RESULT cluster: failover after killing machine 0: %s (%d messages waiting then), machine 1: %s (%d waiting); leases %s",
		took0.Round(time.Millisecond), left0, took1.Round(time.Millisecond), left1, res.leases)
}

// TestClusterPostgresOutage: the handovers issue 29 found broken. First
// PostgreSQL ends every session of the cluster (pg_terminate_backend) and
// refuses connections for 3 s: every collector loses its lease or its wait
// for one and exits, and is restarted a second later (as the systemd unit
// does) until PostgreSQL answers again; whoever gets a shard's lease
// first takes it over. Then a holder is killed (-9) in the middle of a
// checkpoint: its write of the shard's state waits on a row lock the test
// holds, some of the checkpoint written, none of the input acknowledged.
// The records table then holds exactly the truth's records, none twice,
// the same as a single collector's clean run field for field, and no
// packet was lost (the old holders give their deliveries back before the
// new ones consume: a server's messages stay in order).
func TestClusterPostgresOutage(t *testing.T) {
	bc := newBusCluster(t)
	bc.startMembers()
	// The other cluster tests' workload (about 160,000 messages), so that
	// the clean run is shared (cleanRuns); both incidents land well
	// before its end, as TestClusterFailover's kills do (left0, left1).
	published := bc.publish(clusterWorkload())

	outage := bc.failover("PostgreSQL outage", 40000, func() { bc.postgresOutage(3 * time.Second) })
	left0 := bc.waiting()
	var blocked time.Duration
	mid := bc.failover("kill in a checkpoint", 100000, func() { blocked = bc.killInCheckpoint(2) })
	left1 := bc.waiting()
	truth := <-published
	res := bc.finish(truth)
	t.Logf("RESULT cluster outage: every shard active again %s after PostgreSQL ended the sessions and refused connections for 3 s (%d messages waiting then); %s after a kill in a checkpoint (blocked %s on the row lock; %d waiting); leases %s; restarts %d",
		outage.Round(time.Millisecond), left0, mid.Round(time.Millisecond), blocked.Round(time.Millisecond), left1, res.leases, bc.restarts())
}

// TestClusterFrozenHolder: the holder of shard 0 stops dead (SIGSTOP: its
// sockets stay open and its kernel still answers, as behind a partition
// or on a machine that hangs; no reset, no keepalive failure). PostgreSQL
// ends its silent lease session (idle_session_timeout), a standby takes
// the lease, and consumes once the broker has dropped the frozen
// holder's connection (heartbeats) and requeued what it held. The frozen
// holder, resumed, finds itself fenced and stops; the records are still
// the clean run's, field for field. This measures what a dead machine
// costs a shard (docs/scale-out.md).
func TestClusterFrozenHolder(t *testing.T) {
	bc := newBusCluster(t)
	bc.startMembers()
	published := bc.publish(clusterWorkload())
	var frozen *collector
	var frozenAt time.Time
	took := bc.failover("holder frozen", 40000, func() {
		frozen, frozenAt = bc.active(0), time.Now()
		if frozen == nil {
			t.Fatal("shard 0 has no holder")
		}
		if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	})
	var consuming time.Duration
	if !waitFor(3*time.Minute, 20*time.Millisecond, func() bool {
		c := bc.active(0)
		if c == nil {
			return false
		}
		m, err := c.metrics()
		return err == nil && m["xrdmon_amqp_connected"] == 1
	}) {
		t.Fatal("the new holder of shard 0 never consumed")
	}
	consuming = time.Since(frozenAt)
	left := bc.waiting()
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-frozen.done:
	case <-time.After(time.Minute):
		t.Error("the resumed holder did not stop within a minute")
	}
	truth := <-published
	res := bc.finish(truth)
	t.Logf("RESULT cluster frozen holder: lease taken over %s after the holder froze, the queue consumed again after %s (%d messages waiting then); the resumed holder exited with %v; leases %s",
		took.Round(time.Millisecond), consuming.Round(time.Millisecond), left, frozen.err, res.leases)
}

// clusterWorkload is the stream of the cluster tests: 200 servers, their
// transfers traced on the t-stream (I/O profiles), so that those fields
// are compared with a single collector's too. (No redirectors: linking
// redirects across shards is issue 29 item 3, and the redirect linker's
// checkpoint, megabytes with them, written at every checkpoint, would
// make the run last many minutes.)
func clusterWorkload() loadgen.Config {
	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients, cfg.Users = 200, 6, 2000
	cfg.Duration, cfg.Seed = 50*time.Minute, 17
	cfg.Trace = "io"
	return cfg
}

// busCluster is the topology of the cluster tests: a router, 3 shard
// queues, 3 "machines" each running a collector for every shard (the
// holder of one, a standby for the others), their state in a PostgreSQL
// database of the test's own, and a queue that gets every message too,
// for a single collector's clean run.
type busCluster struct {
	t                         *testing.T
	url, pgURL, dbURL, dbName string
	hostPort                  string
	schema                    string
	shards, machines          int
	busFlags                  []string
	from, route, prefix       string
	clean                     string
	queues                    []string // the route queue, then the shard queues
	logDir                    string
	db                        *pgx.Conn
	members                   [][]*member // [machine][shard]
	t0                        time.Time
	published                 atomic.Bool // the workload is all published
}

func newBusCluster(t *testing.T) *busCluster {
	url, base := testenv.AMQPURL(t), testenv.PostgresURL(t)
	bc := &busCluster{t: t, url: url, pgURL: base, shards: 3, machines: 3, logDir: t.TempDir(), t0: time.Now(), schema: "xrdmon"}
	name := testenv.Uniq("xrdmon-crash-cluster")
	bc.from, bc.route, bc.prefix = name+".shoveler", name+".route", name+".shard."
	exchange := name + ".shards"
	bc.queues = []string{bc.route}
	for i := range bc.shards {
		bc.queues = append(bc.queues, fmt.Sprintf("%s%02d", bc.prefix, i))
	}
	bc.clean = name + ".clean"
	t.Cleanup(func() { deleteAMQP(url, []string{exchange, bc.from}, append(bc.queues, bc.clean)) })
	pu, err := neturl.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	bc.hostPort = pu.Host
	if pu.Port() == "" {
		bc.hostPort += ":5432"
	}
	// A database of the test's own: the outage refuses connections to it.
	bc.dbURL = newDatabase(t, base, bc.hostPort)
	du, _ := neturl.Parse(bc.dbURL)
	bc.dbName = strings.TrimPrefix(du.Path, "/")
	ctx := context.Background()
	if bc.db, err = pgx.Connect(ctx, base); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bc.db.Close(ctx) })

	bc.busFlags = []string{"--url", url, "--shards", fmt.Sprint(bc.shards), "--exchange", exchange, "--queue-prefix", bc.prefix,
		"--from", bc.from, "--route-queue", bc.route}
	if out, err := exec.Command(xrdmonBin, append([]string{"bus", "setup", "--declare-from", "fanout"}, bc.busFlags...)...).CombinedOutput(); err != nil {
		if strings.Contains(string(out), "x-consistent-hash") {
			testenv.Unavailable(t, string(out))
		}
		t.Fatalf("bus setup: %v\n%s", err, out)
	}
	declareBound(t, url, bc.from, bc.clean)
	router := exec.Command(xrdmonBin, append([]string{"bus", "route"}, bc.busFlags...)...)
	rlog, err := os.Create(filepath.Join(bc.logDir, "router.log"))
	if err != nil {
		t.Fatal(err)
	}
	router.Stdout, router.Stderr = rlog, rlog
	if err := router.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = router.Process.Kill(); _ = router.Wait(); rlog.Close() })
	t.Cleanup(bc.shutdown)
	return bc
}

// member is one collector of one machine for one shard, restarted one
// second after it exits on its own (Restart=on-failure) until it is taken
// down (its machine killed, or the end of the test). Its store directory
// is the same across restarts, as on a machine.
type member struct {
	bc     *busCluster
	m, s   int
	dir    string
	mu     sync.Mutex
	c      *collector
	down   bool
	downCh chan struct{} // closed with down
	starts int
	done   chan struct{}
}

func (bc *busCluster) startMember(m, s int) *member {
	mb := &member{bc: bc, m: m, s: s, dir: bc.t.TempDir(), downCh: make(chan struct{}), done: make(chan struct{})}
	c, err := mb.launch()
	if err != nil {
		bc.t.Fatal(err)
	}
	mb.c, mb.starts = c, 1
	go mb.supervise()
	return mb
}

func (mb *member) launch() (*collector, error) {
	bc := mb.bc
	return startCollectorErr(bc.t, mb.dir, filepath.Join(bc.logDir, fmt.Sprintf("m%d-shard%d.log", mb.m, mb.s)),
		"--listen.udp=", "--amqp_input.enabled=true", "--amqp_input.url="+bc.url,
		fmt.Sprintf("--amqp_input.queue=%s%02d", bc.prefix, mb.s), "--amqp_input.exchange=-",
		"--amqp_input.single_active_consumer=true", "--amqp_input.prefetch=200",
		"--correlate.shards=2", "--cluster.enabled=true", "--cluster.url="+bc.dbURL, "--cluster.schema="+bc.schema,
		fmt.Sprintf("--cluster.holder=machine%d", mb.m))
}

func (mb *member) supervise() {
	defer close(mb.done)
	for {
		select {
		case <-mb.cur().done:
		case <-mb.downCh:
			return
		}
		for {
			select {
			case <-time.After(time.Second):
			case <-mb.downCh:
				return
			}
			c, err := mb.launch()
			if err != nil {
				continue // PostgreSQL still refusing, say: again a second later
			}
			mb.mu.Lock()
			down := mb.down
			if !down {
				mb.c = c
				mb.starts++
			}
			mb.mu.Unlock()
			if down {
				c.kill()
				return
			}
			break
		}
	}
}

func (mb *member) cur() *collector {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.c
}

func (mb *member) isDown() bool {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.down
}

// takeDown stops restarting the member and kills its process (kill) or
// stops it (SIGTERM, within 30 s).
func (mb *member) takeDown(kill bool) error {
	mb.mu.Lock()
	if !mb.down {
		mb.down = true
		close(mb.downCh)
	}
	mb.mu.Unlock()
	var err error
	if c := mb.cur(); c.running() {
		if kill {
			c.kill()
		} else {
			err = c.stop(30 * time.Second)
		}
	}
	<-mb.done
	return err
}

// startMembers starts the holders first (machine m holds shard m), then
// the standbys.
func (bc *busCluster) startMembers() {
	bc.members = make([][]*member, bc.machines)
	for m := range bc.members {
		bc.members[m] = make([]*member, bc.shards)
		bc.members[m][m] = bc.startMember(m, m)
		if !waitFor(30*time.Second, 20*time.Millisecond, func() bool { return ready(bc.members[m][m].cur()) }) {
			bc.t.Fatalf("machine %d's collector of shard %d never ready:\n%s", m, m, tail(bc.members[m][m].cur().log, 20))
		}
	}
	for m := range bc.members {
		for s := range bc.shards {
			if s != m {
				bc.members[m][s] = bc.startMember(m, s)
			}
		}
	}
}

// shutdown takes every member down (the end of the test).
func (bc *busCluster) shutdown() {
	for _, ms := range bc.members {
		for _, mb := range ms {
			if mb != nil && !mb.isDown() {
				_ = mb.takeDown(true)
			}
		}
	}
}

func (bc *busCluster) restarts() int {
	n := 0
	for _, ms := range bc.members {
		for _, mb := range ms {
			mb.mu.Lock()
			n += mb.starts - 1
			mb.mu.Unlock()
		}
	}
	return n
}

// readyClient does not wait for a frozen collector.
var readyClient = http.Client{Timeout: 2 * time.Second}

func ready(c *collector) bool {
	if !c.running() {
		return false
	}
	resp, err := readyClient.Get("http://" + c.http + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// active returns the ready collector of a shard, if any.
func (bc *busCluster) active(s int) *collector {
	for m := range bc.members {
		if c := bc.members[m][s].cur(); ready(c) {
			return c
		}
	}
	return nil
}

// publish runs the workload into the shovelers' exchange, in the background.
func (bc *busCluster) publish(cfg loadgen.Config) <-chan *loadgen.Truth {
	published := make(chan *loadgen.Truth, 1)
	go func() {
		truth := publishTo(bc.t, bc.url, cfg, bc.from)
		bc.published.Store(true)
		published <- truth
	}()
	return published
}

// waiting is the messages still waiting in the route and shard queues.
func (bc *busCluster) waiting() int {
	n := 0
	for _, q := range bc.queues {
		n += queueDepth(bc.t, bc.url, q)
	}
	return n
}

// failover waits until after messages have been published (the clean
// run's queue holds every message, consumed only at the end), runs the
// incident, and returns how long until every shard had an active
// collector again. The incident must land mid-stream: when the shards
// are active again, the publisher is still at work or messages still
// wait. (The queues alone do not say it: collectors that keep up with
// the publisher leave them empty mid-stream.)
func (bc *busCluster) failover(what string, after int, incident func()) time.Duration {
	if !waitFor(5*time.Minute, 10*time.Millisecond, func() bool { return queueDepth(bc.t, bc.url, bc.clean) >= after }) {
		bc.t.Fatalf("%d messages not published within 5 minutes", after)
	}
	start := time.Now()
	incident()
	if !waitFor(90*time.Second, 20*time.Millisecond, func() bool {
		for s := range bc.shards {
			if bc.active(s) == nil {
				return false
			}
		}
		return true
	}) {
		bc.t.Fatalf("a shard has no active collector 90 s after the incident (%s)", what)
	}
	if bc.published.Load() && bc.waiting() == 0 {
		bc.t.Errorf("%s: not mid-stream (every message published and consumed when the shards were active again)", what)
	}
	return time.Since(start)
}

func (bc *busCluster) killMachine(m int) {
	for s := range bc.shards {
		_ = bc.members[m][s].takeDown(true)
	}
}

// postgresOutage ends every session of the cluster's database and refuses
// connections to it for d.
func (bc *busCluster) postgresOutage(d time.Duration) {
	ctx := context.Background()
	db := pgx.Identifier{bc.dbName}.Sanitize()
	if _, err := bc.db.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS false"); err != nil {
		bc.t.Fatalf("refuse connections: %v", err)
	}
	var n int
	if err := bc.db.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1", bc.dbName).Scan(&n); err != nil {
		bc.t.Fatalf("terminate the sessions: %v", err)
	}
	bc.t.Logf("PostgreSQL outage: %d sessions ended, connections refused for %s", n, d)
	time.Sleep(d)
	if _, err := bc.db.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true"); err != nil {
		bc.t.Fatalf("accept connections again: %v", err)
	}
}

// killInCheckpoint kills shard s's holder in the middle of a checkpoint: it
// holds the row of the shard's redirect checkpoint (written last) locked
// until the holder's write of it waits on the lock (its correlation state
// written, none of its input acknowledged), kills the holder (-9; it is
// restarted as a standby), and lets the lock go. It returns how long the
// write waited for the lock before the kill.
func (bc *busCluster) killInCheckpoint(s int) time.Duration {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, bc.dbURL)
	if err != nil {
		bc.t.Fatal(err)
	}
	defer conn.Close(ctx)
	holder := bc.active(s)
	if holder == nil {
		bc.t.Fatalf("shard %d has no holder", s)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		bc.t.Fatal(err)
	}
	var one int
	if err := tx.QueryRow(ctx, "SELECT 1 FROM "+bc.schema+".shard_state WHERE shard = $1 AND key = 'correlate/redirects' FOR UPDATE",
		fmt.Sprintf("%s%02d", bc.prefix, s)).Scan(&one); err != nil {
		bc.t.Fatalf("lock the checkpoint: %v", err)
	}
	start := time.Now()
	var since time.Duration
	if !waitFor(30*time.Second, 5*time.Millisecond, func() bool {
		var n int
		_ = bc.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE '%shard_state%'`,
			bc.dbName).Scan(&n)
		return n > 0
	}) {
		bc.t.Fatal("no checkpoint waited on the lock within 30 s")
	}
	since = time.Since(start)
	holder.kill()
	_ = tx.Rollback(ctx)
	return since
}

// clusterResult is what finish found.
type clusterResult struct {
	leases string
}

// finish runs the stream to the end, takes every member down and checks
// the cluster's records and events: the truth's, none twice, and the same
// as a single collector's clean run on the same messages, field for field.
func (bc *busCluster) finish(truth *loadgen.Truth) clusterResult {
	t := bc.t
	ctx := context.Background()
	want := len(truth.Records)
	count := func() int {
		var n int
		c, err := pgx.Connect(ctx, bc.dbURL)
		if err != nil {
			return 0
		}
		defer c.Close(ctx)
		_ = c.QueryRow(ctx, "SELECT count(*) FROM "+bc.schema+".records").Scan(&n)
		return n
	}
	var n int
	if !waitFor(5*time.Minute, 200*time.Millisecond, func() bool { n = count(); return n >= want && bc.waiting() == 0 }) {
		t.Fatalf("%d of %d records in PostgreSQL after 5 minutes", n, want)
	}
	// The final holders' losses, before they stop.
	var lost float64
	for s := range bc.shards {
		if c := bc.active(s); c != nil {
			if m, err := c.metrics(); err == nil {
				lost += sumPrefix(m, "xrdmon_packets_lost_total")
			}
		}
	}
	for m := range bc.members {
		for s := range bc.shards {
			if mb := bc.members[m][s]; !mb.isDown() {
				if err := mb.takeDown(false); err != nil {
					t.Errorf("stop machine %d shard %d: %v; its log ends:\n%s", m, s, err, tail(mb.cur().log, 30))
				}
			}
		}
	}
	got := pgRecords(t, bc.dbURL, bc.schema)
	checkTruth(t, got, truth)
	gotEvs := pgEventIDs(t, bc.dbURL, bc.schema)
	checkEvents(t, gotEvs, truth)
	if lost != 0 {
		t.Errorf("the holders lost %v packets (a server's messages out of order)", lost)
	}

	// The clean run: one collector, no cluster, no incident, on the same
	// messages, loading its PostgreSQL output into a database of its own.
	clean := bc.cleanRun(truth)
	cleanRecs, cleanEvs, cleanURL := clean.recs, clean.evs, clean.url
	if evLost, ex := setDiff(cleanEvs, gotEvs); evLost != 0 || len(cleanEvs) != len(gotEvs) {
		t.Errorf("events: clean run %d, cluster %d: %d missing (e.g. %s)", len(cleanEvs), len(gotEvs), evLost, ex)
	}
	lostRecs, ex := setDiff(cleanRecs, got)
	extra, ex2 := setDiff(got, cleanRecs)
	if lostRecs != 0 || extra != 0 {
		t.Errorf("records: clean run %d, cluster %d: %d missing (e.g. %s), %d extra (e.g. %s)", len(cleanRecs), len(got), lostRecs, ex, extra, ex2)
	}
	pgDiffer := bc.compareTables(cleanURL, len(cleanRecs))
	made, madeDiffer := bc.compareStores(cleanRecs)

	var leases string
	c2, err := pgx.Connect(ctx, bc.dbURL)
	if err == nil {
		_ = c2.QueryRow(ctx, "SELECT string_agg(shard || ':' || epoch || ':' || holder, ' ' ORDER BY shard) FROM "+bc.schema+".shard_leases").Scan(&leases)
		c2.Close(ctx)
	}
	t.Logf("RESULT cluster: %d messages routed over %d shards, %d machines (3 collectors each); records %d, truth %d; events %d; packets lost %v",
		truth.Emitted, bc.shards, bc.machines, len(got), want, len(gotEvs), lost)
	t.Logf("RESULT cluster: clean run %d records; compared field by field: %d rows of PostgreSQL (%s), %d records made by the holders (%d made twice, dropped by record_id; %s); total %s",
		len(cleanRecs), len(got), pgDiffer, made, made-len(got), madeDiffer, time.Since(bc.t0).Round(time.Second))
	return clusterResult{leases: leases}
}

// cleanRun is what a single collector's clean run on a cluster workload
// made: no cluster, no incident; it consumed the workload's every message
// (the queue bc.clean) into a store of its own and, through its PostgreSQL
// output, a database of its own.
type cleanRun struct {
	recs map[string]record.Record
	evs  map[string]bool
	url  string // the database its PostgreSQL output loaded
	test string // the test that made it
}

// cleanRuns are the clean runs made so far, by the digest of their
// workload's truth. The cluster tests publish the same workload
// (clusterWorkload), and loadgen is deterministic (the same configuration
// makes the same messages, and the same truth): a later test compares
// with an earlier test's clean run when its truth is the same, field for
// field (the digest of the whole truth, every expected record, every
// server's counts), which saves a run of a minute or more per test. A
// test run alone makes its own. Their databases are dropped when the
// package's tests end.
var cleanRuns = map[[sha256.Size]byte]*cleanRun{}

// truthDigest is the SHA-256 of the truth's JSON (maps in key order).
func truthDigest(t testing.TB, truth *loadgen.Truth) [sha256.Size]byte {
	t.Helper()
	b, err := json.Marshal(truth)
	if err != nil {
		t.Fatalf("encode the truth: %v", err)
	}
	return sha256.Sum256(b)
}

// cleanRun returns the clean run on the messages of truth: an earlier
// test's on the same workload (see cleanRuns), or one it makes from the
// queue bc.clean, which got every message of the run.
func (bc *busCluster) cleanRun(truth *loadgen.Truth) *cleanRun {
	t := bc.t
	key := truthDigest(t, truth)
	if cr := cleanRuns[key]; cr != nil {
		t.Logf("clean run: %s's, on the same messages (same workload, same truth): %d records, %d events", cr.test, len(cr.recs), len(cr.evs))
		return cr
	}
	cleanDir := t.TempDir()
	cleanURL, drop := createDatabase(t, bc.pgURL, bc.hostPort)
	packageCleanup(func() {
		if err := drop(); err != nil {
			fmt.Fprintf(os.Stderr, "crash tests: cleanup: %v\n", err)
		}
	})
	cc := startCollector(t, cleanDir, filepath.Join(bc.logDir, "clean.log"), "--listen.udp=", "--amqp_input.enabled=true",
		"--amqp_input.url="+bc.url, "--amqp_input.queue="+bc.clean, "--amqp_input.exchange=-", "--correlate.shards=2",
		"--outputs.postgres.enabled=true", "--outputs.postgres.url="+cleanURL)
	waitDrained(t, cc, bc.url, bc.clean, 5*time.Minute)
	if !waitFor(2*time.Minute, 100*time.Millisecond, func() bool {
		return cc.metric(`xrdmon_sink_backlog_records{sink="postgres"}`) == 0
	}) {
		t.Fatal("the clean run's PostgreSQL output never caught up")
	}
	if err := cc.stop(30 * time.Second); err != nil {
		t.Fatalf("clean run: %v", err)
	}
	recs, evs := storeContents(t, cleanDir)
	cr := &cleanRun{recs: recs, evs: evs, url: cleanURL, test: t.Name()}
	if !t.Failed() {
		// (Shared only from a test that has passed so far, so that the
		// store certainly passed storeContents's checks: otherwise the
		// next test makes its own, and checks it again.)
		cleanRuns[key] = cr
	}
	return cr
}

// skippedColumns are the records columns (and Record fields) that differ
// legitimately between the cluster and the clean run: received is the
// collector's clock when the record's last packet arrived, which is each
// process's own.
//
// knownColumns and knownFields would be compared and their differences
// logged without failing, for a known bug fixed elsewhere: none now (the
// I/O profile of a transfer open across a restore, counted twice before
// issue 29 item 2, is compared like every other field).
var (
	skippedColumns = map[string]bool{"received": true}
	skippedFields  = map[string]bool{"Received": true}
	knownColumns   = map[string]bool{}
	knownFields    = map[string]bool{}
)

// compareTables compares every column of every row of the cluster's
// records table with the clean run's (in the database at cleanURL, loaded
// by its PostgreSQL output), by record_id, but skippedColumns. It returns
// a summary of the differences (failing the test for any).
func (bc *busCluster) compareTables(cleanURL string, want int) string {
	t := bc.t
	cluster, clean := pgRows(t, bc.dbURL), pgRows(t, cleanURL)
	if len(clean) != want {
		t.Fatalf("the clean run's table holds %d records, its store %d", len(clean), want)
	}
	var cols []string
	for _, r := range clean {
		for col := range r {
			if !skippedColumns[col] && col != "record_id" {
				cols = append(cols, col)
			}
		}
		break
	}
	sort.Strings(cols)
	byCol, known := map[string]int{}, map[string]int{}
	for id, k := range cluster {
		c, ok := clean[id]
		if !ok {
			continue // counted by the caller
		}
		for _, col := range cols {
			if reflect.DeepEqual(k[col], c[col]) {
				continue
			}
			if knownColumns[col] {
				if known[col]++; known[col] == 1 {
					t.Logf("KNOWN (issue 29 item 2): column %s differs from the clean run (e.g. %s: cluster %v, clean %v)", col, id, k[col], c[col])
				}
				continue
			}
			if byCol[col]++; byCol[col] == 1 {
				t.Errorf("column %s differs from the clean run (e.g. %s: cluster %v, clean %v)", col, id, k[col], c[col])
			}
		}
	}
	sum := fmt.Sprintf("%d columns, none differs", len(cols))
	if len(byCol) > 0 {
		t.Errorf("rows unlike the clean run's, by column: %v", byCol)
		sum = fmt.Sprintf("%d columns, differing: %v", len(cols), byCol)
	}
	if len(known) > 0 {
		sum += fmt.Sprintf("; known differences (issue 29 item 2): %v", known)
	}
	return sum + "; skipped: received"
}

// pgRows reads the records table of the database at u (schema xrdmon),
// every column, by record_id.
func pgRows(t testing.TB, u string) map[string]map[string]any {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT record_id, to_jsonb(r)::text FROM xrdmon.records r")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]map[string]any{}
	for rows.Next() {
		var id, js string
		if err := rows.Scan(&id, &js); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(js), &m); err != nil {
			t.Fatal(err)
		}
		out[id] = m
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// compareStores compares every record each holder made (its local store;
// the killed holders' too, and what a holder made twice) with the clean
// run's record of the same id, every field but skippedFields. It returns
// how many records the holders made and a summary of the differences
// (failing the test for any).
func (bc *busCluster) compareStores(clean map[string]record.Record) (int, string) {
	t := bc.t
	made := 0
	byField, known := map[string]int{}, map[string]int{}
	shown := 0
	for _, ms := range bc.members {
		for _, mb := range ms {
			recs, _ := storeContents(t, mb.dir)
			for id, r := range recs {
				made++
				c, ok := clean[id]
				if !ok {
					t.Errorf("machine %d shard %d made record %s, which the clean run did not", mb.m, mb.s, id)
					continue
				}
				var fields []string
				for _, f := range recordDiff(r, c, skippedFields) {
					if knownFields[f] {
						known[f]++
						continue
					}
					fields = append(fields, f)
				}
				if len(fields) > 0 {
					for _, f := range fields {
						byField[f]++
					}
					if shown++; shown <= 3 {
						t.Errorf("machine %d shard %d made record %s unlike the clean run's in %v:\nholder %+v\nclean  %+v", mb.m, mb.s, id, fields, r, c)
					}
				}
			}
		}
	}
	sum := fmt.Sprintf("all %d fields equal but Received", reflect.TypeFor[record.Record]().NumField()-len(skippedFields))
	if len(byField) > 0 {
		t.Errorf("records the holders made unlike the clean run's, by field: %v", byField)
		sum = fmt.Sprintf("differing by field: %v", byField)
	}
	if len(known) > 0 {
		t.Logf("KNOWN (issue 29 item 2): records the holders made unlike the clean run's in %v", known)
		sum += fmt.Sprintf("; known differences (issue 29 item 2): %v", known)
	}
	return made, sum
}

// recordDiff returns the names of the fields of a and b that differ, but
// those in skip.
func recordDiff(a, b record.Record, skip map[string]bool) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := range va.NumField() {
		f := va.Type().Field(i)
		if skip[f.Name] {
			continue
		}
		x, y := va.Field(i).Interface(), vb.Field(i).Interface()
		if tx, ok := x.(time.Time); ok {
			if !tx.Equal(y.(time.Time)) {
				out = append(out, f.Name)
			}
			continue
		}
		if !reflect.DeepEqual(x, y) {
			out = append(out, f.Name)
		}
	}
	return out
}

// publishTo runs loadgen into an existing exchange.
func publishTo(t testing.TB, url string, cfg loadgen.Config, exchange string) *loadgen.Truth {
	g, err := loadgen.New(cfg)
	if err != nil {
		t.Error(err)
		return nil
	}
	out, err := loadgen.NewAMQP(loadgen.AMQPConfig{URL: url, Exchange: exchange, Batch: 4096})
	if err != nil {
		t.Error(err)
		return nil
	}
	truth, err := g.Run(context.Background(), out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Errorf("loadgen to RabbitMQ: %v", err)
	}
	return truth
}

// pgEventIDs reads a cluster's events table's ids (an id twice fails).
func pgEventIDs(t testing.TB, pgURL, schema string) map[string]bool {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT event_id FROM "+schema+".events")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		if out[id] {
			t.Errorf("event %s twice", id)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// pgRecords reads a cluster's records table, by record id.
func pgRecords(t testing.TB, pgURL, schema string) map[string]record.Record {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pgURL) // a connection of its own: the test's may be busy
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT record_id, server_ip, server_stod, server_id, file_id, read_bytes, readv_bytes, write_bytes, reason, user_name, path FROM "+schema+".records")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]record.Record{}
	for rows.Next() {
		var r record.Record
		var sid int64
		var fid int64
		var reason string
		if err := rows.Scan(&r.RecordID, &r.ServerIP, &r.ServerStod, &sid, &fid, &r.ReadBytes, &r.ReadvBytes, &r.WriteBytes, &reason, &r.User, &r.Path); err != nil {
			t.Fatal(err)
		}
		r.ServerID, r.FileID, r.Reason = uint64(sid), uint32(fid), record.Reason(reason)
		if _, dup := out[r.RecordID]; dup {
			t.Errorf("record %s twice", r.RecordID)
		}
		out[r.RecordID] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
