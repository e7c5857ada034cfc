package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/cluster"
	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// TestClusterFailoverKeepsState: two collectors configured for one shard
// queue, with their state in PostgreSQL. The first holds the shard and
// takes the first half of the stream (files opened, not yet closed); it
// stops, and the second, which waited for the lease with an empty store of
// its own, takes the shard over from the first one's checkpoint in
// PostgreSQL: every transfer, also those open across the failover, ends as
// one complete record in the cluster's records table, equal to the truth.
func TestClusterFailoverKeepsState(t *testing.T) {
	amqpURL, pgURL := testenv.AMQPURL(t), testenv.PostgresURL(t)
	ctx := context.Background()
	schema := strings.ReplaceAll(testenv.Uniq("xrdmon_cluster"), "-", "_")
	queue := testenv.Uniq("xrdmon-cluster-shard")
	pg, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pg.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pg.Close(ctx)
	})
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-single-active-consumer": true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })

	// The stream: long transfers, so that many are open at the midpoint.
	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients, cfg.Duration, cfg.Seed, cfg.KeepRecords = 6, 8, 6*time.Minute, 21, true
	cfg.TransferMin, cfg.TransferMax = time.Minute, 3*time.Minute
	gen, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lines bytes.Buffer
	jl := loadgen.NewJSONL(&lines)
	truth, err := gen.Run(ctx, jl)
	if err != nil {
		t.Fatal(err)
	}
	if err := jl.Close(); err != nil {
		t.Fatal(err)
	}
	msgs := strings.Split(strings.TrimSuffix(lines.String(), "\n"), "\n")
	publish := func(part []string) {
		for _, m := range part {
			if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{Body: []byte(m), DeliveryMode: amqp.Persistent}); err != nil {
				t.Fatal(err)
			}
		}
	}
	member := func(c *config.Config) {
		c.Listen.UDP = ""
		c.AMQPInput.Enabled, c.AMQPInput.URL, c.AMQPInput.Queue, c.AMQPInput.Exchange = true, amqpURL, queue, "-"
		c.AMQPInput.SingleActiveConsumer = true
		c.Correlate.Shards = 2
		c.Cluster.Enabled, c.Cluster.URL, c.Cluster.Schema = true, pgURL, schema
		c.Store.Retention = 0
	}
	waitDrained := func() {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if q.Messages == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the shard queue still holds %d messages", q.Messages)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	a := startDaemon(t, func(c *config.Config) { member(c); c.Cluster.Holder = "a" })
	// Ready once it holds the shard and its pipeline runs (a collector
	// waiting for the lease answers /healthz, not /readyz).
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := http.Get("http://" + a.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector a not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The second collector starts now and waits for the lease.
	bcfg := config.Default()
	member(bcfg)
	bcfg.Cluster.Holder = "b"
	bcfg.Store.Path, bcfg.HTTP.Address, bcfg.DNS.Enabled = t.TempDir(), "", false
	bctx, stopB := context.WithCancel(ctx)
	bdone := make(chan error, 1)
	go func() { bdone <- collect(bctx, bcfg, slog.New(slog.DiscardHandler)) }()

	half := len(msgs) / 2
	publish(msgs[:half])
	a.waitMetric(t, `xrdmon_packets_total{outcome="accounted"}`, float64(half))
	openAtFailover := a.metric(t, `xrdmon_state_entries{kind="open_files"}`)
	if err := a.stop(t); err != nil {
		t.Fatalf("collector a: %v", err)
	}
	publish(msgs[half:])
	waitDrained()
	// Every record of the truth in the cluster's table.
	var n int
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := pg.QueryRow(ctx, "SELECT count(*) FROM "+schema+".records").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= len(truth.Records) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopB()
	if err := <-bdone; err != nil {
		t.Fatalf("collector b: %v", err)
	}
	rows, err := pg.Query(ctx, "SELECT server_ip, path, read_bytes, readv_bytes, write_bytes, reason FROM "+schema+".records")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for i := range truth.Records {
		r := &truth.Records[i]
		want[fmt.Sprintf("%s|%s|%d|%d|%d|%s", r.ServerIP, r.Path, r.ReadBytes, r.ReadvBytes, r.WriteBytes, r.Reason)]++
	}
	got := 0
	for rows.Next() {
		var ip, path, reason string
		var rd, rv, wr int64
		if err := rows.Scan(&ip, &path, &rd, &rv, &wr, &reason); err != nil {
			t.Fatal(err)
		}
		got++
		want[fmt.Sprintf("%s|%s|%d|%d|%d|%s", ip, path, rd, rv, wr, reason)]--
	}
	for k, d := range want {
		if d != 0 {
			t.Errorf("record %s: %+d against the truth", k, -d)
		}
	}
	if got != len(truth.Records) || openAtFailover == 0 {
		t.Errorf("%d records, truth %d; %v files open at the failover", got, len(truth.Records), openAtFailover)
	}
	// And every event of the truth, once.
	var wantEvents int64
	for _, n := range truth.Events {
		wantEvents += n
	}
	var events, distinct int64
	if err := pg.QueryRow(ctx, "SELECT count(*), count(DISTINCT event_id) FROM "+schema+".events").Scan(&events, &distinct); err != nil {
		t.Fatal(err)
	}
	if events != wantEvents || distinct != events {
		t.Errorf("%d events (%d distinct) in PostgreSQL, truth %d", events, distinct, wantEvents)
	}
	var epoch int64
	if err := pg.QueryRow(ctx, "SELECT epoch FROM "+schema+".shard_leases WHERE shard = $1", queue).Scan(&epoch); err != nil || epoch != 2 {
		t.Errorf("lease epoch %d (%v), want 2: a, then b", epoch, err)
	}
	t.Logf("%d messages, %d records; %v files open when a stopped and b took the shard over", len(msgs), got, openAtFailover)
}

// TestClusterStandbyStopsCleanly: a standby stopped (SIGTERM) while it
// waits for its shard's lease ends cleanly, not as a failure (systemd
// would count a failure, and a template unit's instances all wait so).
func TestClusterStandbyStopsCleanly(t *testing.T) {
	amqpURL, pgURL := testenv.AMQPURL(t), testenv.PostgresURL(t)
	ctx := context.Background()
	schema := strings.ReplaceAll(testenv.Uniq("xrdmon_standby"), "-", "_")
	queue := testenv.Uniq("xrdmon-standby-shard")
	pg, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pg.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pg.Close(ctx)
	})
	holder, err := cluster.AcquireLease(ctx, pgURL, schema, queue, "holder", 50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	cfg := config.Default()
	cfg.Listen.UDP = ""
	cfg.AMQPInput.Enabled, cfg.AMQPInput.URL, cfg.AMQPInput.Queue, cfg.AMQPInput.Exchange = true, amqpURL, queue, "-"
	cfg.Cluster.Enabled, cfg.Cluster.URL, cfg.Cluster.Schema, cfg.Cluster.Holder = true, pgURL, schema, "standby"
	cfg.Store.Path, cfg.HTTP.Address, cfg.DNS.Enabled = t.TempDir(), "", false
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- collect(sctx, cfg, slog.New(slog.DiscardHandler)) }()
	// Waiting: its lease connection polls.
	for deadline := time.Now().Add(15 * time.Second); ; {
		var n int
		if err := pg.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", "xrdmon lease "+queue).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 2 { // the holder's and the standby's
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the standby never waited for the lease")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("a standby stopped while waiting: %v, want a clean stop", err)
	}
}
