//go:build crash

package crash

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
// the same records (by id and content) as one collector's clean run.
func TestClusterFailover(t *testing.T) {
	url, pgURL := testenv.AMQPURL(t), testenv.PostgresURL(t)
	t0 := time.Now()
	name := testenv.Uniq("xrdmon-crash-cluster")
	schema := strings.ReplaceAll(name, "-", "_")
	const shards, machines = 3, 3
	from, route, exchange, prefix := name+".shoveler", name+".route", name+".shards", name+".shard."
	queues := []string{route}
	for i := range shards {
		queues = append(queues, fmt.Sprintf("%s%02d", prefix, i))
	}
	t.Cleanup(func() { deleteAMQP(url, []string{exchange, from}, queues) })
	ctx := context.Background()
	db, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		db.Close(ctx)
	})
	busFlags := []string{"--url", url, "--shards", fmt.Sprint(shards), "--exchange", exchange, "--queue-prefix", prefix,
		"--from", from, "--route-queue", route}
	if out, err := exec.Command(xrdmonBin, append([]string{"bus", "setup", "--declare-from", "fanout"}, busFlags...)...).CombinedOutput(); err != nil {
		if strings.Contains(string(out), "x-consistent-hash") {
			testenv.Unavailable(t, string(out))
		}
		t.Fatalf("bus setup: %v\n%s", err, out)
	}
	// A queue of its own gets every message too, for a single collector's
	// clean run to compare with.
	clean := name + ".clean"
	queues = append(queues, clean)
	declareBound(t, url, from, clean)
	logDir := t.TempDir()
	router := exec.Command(xrdmonBin, append([]string{"bus", "route"}, busFlags...)...)
	rlog, err := os.Create(filepath.Join(logDir, "router.log"))
	if err != nil {
		t.Fatal(err)
	}
	router.Stdout, router.Stderr = rlog, rlog
	if err := router.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = router.Process.Kill(); _ = router.Wait(); rlog.Close() })

	var storeDirs []string
	member := func(m, shard int) *collector {
		dir := t.TempDir()
		storeDirs = append(storeDirs, dir)
		return startCollector(t, dir, filepath.Join(logDir, fmt.Sprintf("m%d-shard%d.log", m, shard)),
			"--listen.udp=", "--amqp_input.enabled=true", "--amqp_input.url="+url,
			fmt.Sprintf("--amqp_input.queue=%s%02d", prefix, shard), "--amqp_input.exchange=-",
			"--amqp_input.single_active_consumer=true", "--amqp_input.prefetch=200",
			"--correlate.shards=2", "--cluster.enabled=true", "--cluster.url="+pgURL, "--cluster.schema="+schema,
			fmt.Sprintf("--cluster.holder=machine%d", m))
	}
	ready := func(c *collector) bool {
		resp, err := http.Get("http://" + c.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	// procs[m][s]: machine m's collector for shard s. The actives first.
	procs := make([][]*collector, machines)
	for m := range procs {
		procs[m] = make([]*collector, shards)
		procs[m][m] = member(m, m)
		if !waitFor(30*time.Second, 20*time.Millisecond, func() bool { return ready(procs[m][m]) }) {
			t.Fatalf("machine %d's collector of shard %d never ready:\n%s", m, m, tail(procs[m][m].log, 20))
		}
	}
	for m := range procs {
		for s := range shards {
			if s != m {
				procs[m][s] = member(m, s)
			}
		}
	}

	// The stream.
	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients, cfg.Users = 200, 6, 2000
	cfg.Duration, cfg.Seed = 50*time.Minute, 17
	published := make(chan *loadgen.Truth, 1)
	go func() { published <- publishTo(t, url, cfg, from) }()

	// active returns the ready collector of a shard, if any.
	active := func(s int) *collector {
		for m := range procs {
			if c := procs[m][s]; c != nil && c.running() && ready(c) {
				return c
			}
		}
		return nil
	}
	// What the collectors received, scraped before they end.
	var received float64
	tally := func(c *collector) {
		if v, err := c.metrics(); err == nil {
			received += v["xrdmon_amqp_messages_received_total"]
		}
	}
	killMachine := func(m int) {
		for s := range shards {
			if c := procs[m][s]; c.running() {
				tally(c)
				c.kill()
			}
		}
	}
	failover := func(m int, after time.Duration) (shard int, took time.Duration) {
		time.Sleep(after)
		killed := time.Now()
		killMachine(m)
		// The shards machine m was active for.
		for s := range shards {
			for mm := range procs {
				if mm != m && procs[mm][s].running() && active(s) == nil {
					shard = s
				}
			}
		}
		if !waitFor(60*time.Second, 20*time.Millisecond, func() bool {
			for s := range shards {
				if active(s) == nil {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("a shard has no active collector 60 s after machine %d was killed", m)
		}
		return shard, time.Since(killed)
	}
	_, took0 := failover(0, 2*time.Second)
	left0 := queueDepth(t, url, route) + queueDepth(t, url, queues[1]) + queueDepth(t, url, queues[2]) + queueDepth(t, url, queues[3])
	_, took1 := failover(1, 1500*time.Millisecond)
	left1 := queueDepth(t, url, route) + queueDepth(t, url, queues[1]) + queueDepth(t, url, queues[2]) + queueDepth(t, url, queues[3])
	truth := <-published
	if left0 == 0 || left1 == 0 {
		t.Errorf("kills not mid-stream: %d then %d messages waiting", left0, left1)
	}

	// Run to the end: every record of the truth in the cluster's table.
	want := len(truth.Records)
	var n int
	if !waitFor(5*time.Minute, 200*time.Millisecond, func() bool {
		_ = db.QueryRow(ctx, "SELECT count(*) FROM "+schema+".records").Scan(&n)
		return n >= want
	}) {
		t.Fatalf("%d of %d records in PostgreSQL after 5 minutes", n, want)
	}
	for m := 2; m < machines; m++ {
		for s := range shards {
			if c := procs[m][s]; c.running() {
				tally(c)
				if err := c.stop(30 * time.Second); err != nil {
					t.Errorf("stop machine %d shard %d: %v", m, s, err)
				}
			}
		}
	}

	got := pgRecords(t, pgURL, schema)
	checkTruth(t, got, truth)
	gotEvs := pgEventIDs(t, pgURL, schema)
	checkEvents(t, gotEvs, truth)

	// The clean run: one collector, no cluster, no kills, on the same
	// messages: the same records, by id and content.
	cleanDir := t.TempDir()
	cc := startCollector(t, cleanDir, filepath.Join(logDir, "clean.log"), "--listen.udp=", "--amqp_input.enabled=true",
		"--amqp_input.url="+url, "--amqp_input.queue="+clean, "--amqp_input.exchange=-", "--correlate.shards=2")
	waitDrained(t, cc, url, clean, 5*time.Minute)
	if err := cc.stop(30 * time.Second); err != nil {
		t.Fatalf("clean run: %v", err)
	}
	cleanRecs, cleanEvs := storeContents(t, cleanDir)
	if evLost, ex := setDiff(cleanEvs, gotEvs); evLost != 0 || len(cleanEvs) != len(gotEvs) {
		t.Errorf("events: clean run %d, cluster %d: %d missing (e.g. %s)", len(cleanEvs), len(gotEvs), evLost, ex)
	}
	// The records the holders made, each in its own store (the killed ones'
	// too): more than the cluster stored by the duplicates PostgreSQL dropped.
	made := 0
	for _, dir := range storeDirs {
		recs, _ := storeContents(t, dir)
		made += len(recs)
	}
	lost, ex := setDiff(cleanRecs, got)
	extra, ex2 := setDiff(got, cleanRecs)
	if lost != 0 || extra != 0 {
		t.Errorf("records: clean run %d, cluster %d: %d missing (e.g. %s), %d extra (e.g. %s)", len(cleanRecs), len(got), lost, ex, extra, ex2)
	}
	differ := 0
	for id, r := range cleanRecs {
		if g, ok := got[id]; ok && (g.ReadBytes != r.ReadBytes || g.ReadvBytes != r.ReadvBytes || g.WriteBytes != r.WriteBytes ||
			g.Reason != r.Reason || g.User != r.User || g.Path != r.Path || g.FileID != r.FileID) {
			if differ++; differ <= 3 {
				t.Errorf("record %s differs:\ncluster %+v\nclean   %+v", id, g, r)
			}
		}
	}
	var epochs string
	_ = db.QueryRow(ctx, "SELECT string_agg(shard || ':' || epoch || ':' || holder, ' ' ORDER BY shard) FROM "+schema+".shard_leases").Scan(&epochs)
	t.Logf("RESULT cluster: %d servers, %d messages routed over %d shards, %d machines (3 collectors each); records %d, truth %d; events %d",
		cfg.Servers, truth.Emitted, shards, machines, len(got), want, len(gotEvs))
	t.Logf("RESULT cluster: failover after killing machine 0: %s (%d messages waiting then), machine 1: %s (%d waiting); leases %s",
		took0.Round(time.Millisecond), left0, took1.Round(time.Millisecond), left1, epochs)
	t.Logf("RESULT cluster: messages received by the collectors %v for %d published (%v redelivered); records made by the holders %d for %d stored (%d made twice, dropped by record_id); clean run %d records, %d differing; total %s",
		received, truth.Emitted, received-float64(truth.Emitted), made, len(got), made-len(got),
		len(cleanRecs), differ, time.Since(t0).Round(time.Second))
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
