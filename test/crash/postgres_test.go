//go:build crash

package crash

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// pgCluster returns the version and name of the local cluster that
// pg_ctlcluster manages (Debian layout /etc/postgresql/<version>/<name>).
func pgCluster(t testing.TB) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("pg_ctlcluster"); err != nil {
		testenv.Unavailable(t, "pg_ctlcluster not found: cannot restart PostgreSQL")
	}
	versions, err := filepath.Glob("/etc/postgresql/*/main")
	if err != nil || len(versions) != 1 {
		testenv.Unavailable(t, "want exactly one cluster /etc/postgresql/*/main")
	}
	return filepath.Base(filepath.Dir(versions[0])), "main"
}

// withDatabase returns u with its database replaced by db.
func withDatabase(t testing.TB, u, db string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("parse XRDMON_TEST_PG_URL: %v", err)
	}
	pu.Path = "/" + db
	return pu.String()
}

// newDatabase creates a database of the test's own on the server of base
// (the sink creates its schema "xrdmon" in it), dropped at the end of the
// test, and returns its URL.
func newDatabase(t testing.TB, base, hostPort string) string {
	t.Helper()
	u, drop := createDatabase(t, base, hostPort)
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return u
}

// createDatabase creates a database on the server of base and returns its
// URL and a function that drops it (for newDatabase, and for a database
// that outlives its test: see packageCleanup).
func createDatabase(t testing.TB, base, hostPort string) (string, func() error) {
	t.Helper()
	ctx := context.Background()
	db := strings.ReplaceAll(testenv.Uniq("xrdmon_crash"), "-", "_")
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if !waitPort(hostPort, time.Minute) {
			return nil
		}
		a, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer a.Close(ctx)
		if _, err := a.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", db, err)
		}
		return nil
	}
	return withDatabase(t, base, db), drop
}

// TestPostgresRestart is issue "Nothing lost", part (c): PostgreSQL is
// stopped for 10 s and started again while the PostgreSQL output loads;
// every record and event ends up in its table exactly once.
func TestPostgresRestart(t *testing.T) {
	base := testenv.PostgresURL(t)
	version, cluster := pgCluster(t)
	pu, _ := url.Parse(base)
	hostPort := pu.Host
	if pu.Port() == "" {
		hostPort = net.JoinHostPort(pu.Hostname(), "5432")
	}
	outage := 10 * time.Second
	t0 := time.Now()

	dbURL := newDatabase(t, base, hostPort)

	dir := t.TempDir()
	udpAddr := freeUDPAddr(t)
	c := startCollector(t, dir, filepath.Join(t.TempDir(), "collector.log"),
		"--listen.udp="+udpAddr, "--listen.rcvbuf=8MiB",
		"--outputs.postgres.enabled=true", "--outputs.postgres.url="+dbURL)
	load := udpLoad(t, udpAddr, udpLoadConfig(31))

	if !waitFor(20*time.Second, 100*time.Millisecond, func() bool {
		m, err := c.metrics()
		return err == nil && m["xrdmon_store_last_seq"] > 500
	}) {
		t.Fatalf("no records stored after 20 s\n%s", tail(c.log, 20))
	}
	ctlArgs := func(action string) []string {
		return []string{"--skip-systemctl-redirect", version, cluster, action}
	}
	t.Cleanup(func() {
		// Whatever happened, leave PostgreSQL running.
		if !waitPort(hostPort, time.Second) {
			if _, err := run("pg_ctlcluster", ctlArgs("start")...); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
		if !waitPort(hostPort, time.Minute) {
			t.Errorf("cleanup: PostgreSQL does not answer at %s", hostPort)
		}
	})
	atStop := c.metric("xrdmon_store_last_seq")
	tStop := time.Now()
	if _, err := run("pg_ctlcluster", ctlArgs("stop")...); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outage - time.Since(tStop))
	backlog := c.metric(`xrdmon_sink_backlog_records{sink="postgres"}`)
	atStart := c.metric("xrdmon_store_last_seq")
	if _, err := run("pg_ctlcluster", ctlArgs("start")...); err != nil {
		t.Fatal(err)
	}
	if !waitPort(hostPort, time.Minute) {
		t.Fatalf("PostgreSQL does not answer at %s after start", hostPort)
	}
	down := time.Since(tStop)
	tBack := time.Now()
	if !c.running() {
		t.Fatalf("collector exited during the outage: %v\n%s", c.err, tail(c.log, 30))
	}
	if backlog == 0 {
		t.Errorf("output backlog 0 after %s without PostgreSQL: the outage was not seen", outage)
	}

	caughtUp := catchUp(t, c, "postgres", tBack)
	truth := load()
	waitStored(t, c, 2*time.Minute)
	m, _ := c.metrics()
	lost := sumPrefix(m, "xrdmon_packets_lost_total")
	if err := c.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, tail(c.log, 20))
	}

	recs, evs := storeContents(t, dir)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, distinct, evRows, evDistinct int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT record_id) FROM xrdmon.records`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM xrdmon.events`).Scan(&evRows, &evDistinct); err != nil {
		t.Fatal(err)
	}
	ids := make(map[string]bool, rows)
	r, err := conn.Query(ctx, `SELECT record_id FROM xrdmon.records`)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var id string
		if err := r.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	missing, ex := setDiff(recs, ids)
	extra, ex2 := setDiff(ids, recs)
	if rows != len(recs) || distinct != len(recs) || missing != 0 || extra != 0 {
		t.Errorf("PostgreSQL: %d rows, %d distinct record_ids; store %d records; %d missing (e.g. %s), %d extra (e.g. %s)",
			rows, distinct, len(recs), missing, ex, extra, ex2)
	}
	if evRows != len(evs) || evDistinct != len(evs) {
		t.Errorf("PostgreSQL: %d event rows, %d distinct event_ids; store %d events", evRows, evDistinct, len(evs))
	}
	if lost == 0 {
		checkTruth(t, recs, truth)
	} else {
		t.Logf("UDP: %v packets lost in transit; not comparing with the truth", lost)
	}
	t.Logf("RESULT postgres: server down %s (stop to port open); %v entries stored while down, output backlog %v at restart; output caught up %s after it was back; records: store %d, truth %d, rows %d, distinct %d; events: store %d, rows %d, distinct %d; UDP packets lost %v; test %s",
		down.Round(100*time.Millisecond), atStart-atStop, backlog, caughtUp.Round(100*time.Millisecond),
		len(recs), len(truth.Records), rows, distinct, len(evs), evRows, evDistinct, lost, time.Since(t0).Round(time.Second))
}
