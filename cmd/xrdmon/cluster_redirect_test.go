package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/bus"
	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/testenv"
	"github.com/xrdmon/xrdmon/internal/units"
)

// TestClusterRedirectsThroughBus: a workload with two redirectors in front
// of six data servers goes through the bus as a federation's does
// (`xrdmon bus setup`, `xrdmon bus route`, three shard queues) to three
// collectors in cluster mode; the redirectors and the data servers spread
// over the shards. A single collector consumes a copy of the same
// messages at the same time. The redirect fields of the records in
// PostgreSQL are the single collector's, for every record, also where the
// redirector and the data server are on different shards
// (docs/scale-out.md, "Redirects across shards"). (The comparison with a
// replay, whose clock is the input's, is TestClusterLinksRedirectsAcrossShards
// in internal/pipeline: here the messages arrive in one burst, so the
// link windows see them by their arrival, not by the servers' pace.)
func TestClusterRedirectsThroughBus(t *testing.T) {
	url, pgURL := testenv.AMQPURL(t), testenv.PostgresURL(t)
	ctx := context.Background()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Uniq("xrdmon-redir")
	topo := bus.Topology{From: name + ".shoveler", FromKey: "#", RouteQueue: name + ".route",
		Exchange: name + ".shards", QueuePrefix: name + ".shard.", Shards: 3}
	if err := ch.ExchangeDeclare(topo.From, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, q := range append(topo.Queues(), topo.RouteQueue) {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(topo.Exchange, false, false)
		_ = ch.ExchangeDelete(topo.From, false, false)
	})
	// The single collector's queue: a copy of every message of the
	// shoveler's exchange.
	singleQueue := name + ".single"
	if _, err := ch.QueueDeclare(singleQueue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(singleQueue, "#", topo.From, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(singleQueue, false, false, false) })
	schema := strings.ReplaceAll(testenv.Uniq("xrdmon_redir"), "-", "_")
	pg, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pg.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pg.Close(ctx)
	})

	flags := []string{"--url", url, "--shards", fmt.Sprint(topo.Shards), "--exchange", topo.Exchange, "--queue-prefix", topo.QueuePrefix,
		"--from", topo.From, "--route-queue", topo.RouteQueue}
	var errb bytes.Buffer
	if code := run(ctx, append([]string{"bus", "setup"}, flags...), &bytes.Buffer{}, &errb); code != 0 {
		if bytes.Contains(errb.Bytes(), []byte("x-consistent-hash")) {
			testenv.Unavailable(t, errb.String())
		}
		t.Fatalf("bus setup: exit %d: %s", code, errb.String())
	}
	rctx, cancel := context.WithCancel(ctx)
	routed := make(chan int, 1)
	go func() {
		routed <- run(rctx, append([]string{"bus", "route"}, flags...), &bytes.Buffer{}, &bytes.Buffer{})
	}()
	defer func() {
		cancel()
		if code := <-routed; code != 0 {
			t.Errorf("bus route: exit %d", code)
		}
	}()

	// A short link window, so that the collectors decide the opens (and
	// write the records they hold) seconds after the input, not minutes.
	const window = 2 * time.Second
	collectors := make([]*daemon, topo.Shards)
	for i := range collectors {
		collectors[i] = startDaemon(t, func(c *config.Config) {
			c.Listen.UDP = ""
			c.AMQPInput.Enabled, c.AMQPInput.URL = true, url
			c.AMQPInput.Queue, c.AMQPInput.Exchange, c.AMQPInput.SingleActiveConsumer = topo.Queue(i), "-", true
			c.Cluster.Enabled, c.Cluster.URL, c.Cluster.Schema, c.Cluster.Holder = true, pgURL, schema, fmt.Sprint("c", i)
			c.Correlate.RedirectWindow, c.Correlate.Shards = units.Duration(window), 2
		})
	}

	single := startDaemon(t, func(c *config.Config) {
		c.Listen.UDP = ""
		c.AMQPInput.Enabled, c.AMQPInput.URL = true, url
		c.AMQPInput.Queue, c.AMQPInput.Exchange = singleQueue, "-"
		c.Correlate.RedirectWindow = units.Duration(window)
	})

	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients, cfg.Duration, cfg.Seed, cfg.KeepRecords = 6, 6, 2*time.Minute, 31, true
	cfg.Redirectors = 2
	cfg.TransferMin, cfg.TransferMax = time.Second, 20*time.Second
	gen, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lines bytes.Buffer
	var mem loadgen.Memory
	jl := loadgen.NewJSONL(&lines)
	truth, err := gen.Run(ctx, loadgen.Tee(jl, &mem))
	if err != nil {
		t.Fatal(err)
	}
	if err := jl.Close(); err != nil {
		t.Fatal(err)
	}
	msgs := strings.Split(strings.TrimSuffix(lines.String(), "\n"), "\n")
	publish := func(part []string) {
		for _, m := range part {
			if err := ch.PublishWithContext(ctx, topo.From, "", false, false, amqp.Publishing{Body: []byte(m), DeliveryMode: amqp.Persistent}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Up to the first redirect first, as in a cluster that runs: every
	// collector has seen a redirect shared before the transfers come, so
	// its linker holds short transfers' records for them (a collector
	// that has never seen a redirect writes records at once).
	first := slices.IndexFunc(mem.Packets, func(p source.Packet) bool { return packet.Classify(p.Data) == packet.KindRedir })
	if first < 0 || len(msgs) != len(mem.Packets) {
		t.Fatalf("%d messages, %d packets, first redirect %d", len(msgs), len(mem.Packets), first)
	}
	publish(msgs[:first+1])
	for deadline := time.Now().Add(20 * time.Second); ; {
		var n int
		if err := pg.QueryRow(ctx, "SELECT count(*) FROM "+schema+".shard_redirects").Scan(&n); err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first redirect was not shared")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // read by every collector
	publish(msgs[first+1:])

	// The single collector's records, once it has written them all (its
	// linker holds short transfers' ones for two windows).
	for deadline := time.Now().Add(60 * time.Second); single.metric(t, "xrdmon_pipeline_records_committed_total") < float64(len(truth.Records)); {
		if time.Now().After(deadline) {
			t.Fatalf("the single collector committed %v of %d records", single.metric(t, "xrdmon_pipeline_records_committed_total"), len(truth.Records))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := single.stop(t); err != nil {
		t.Fatal(err)
	}
	want := map[string]record.Record{}
	for _, r := range single.records(t) {
		want[r.RecordID] = r
	}
	linked := 0
	for _, r := range want {
		if r.RedirectHops > 0 {
			linked++
		}
	}
	if linked < 50 {
		t.Fatalf("%d of %d records linked by the single collector: workload too tame", linked, len(want))
	}

	// Every record in PostgreSQL (the linkers hold short transfers' ones
	// for two windows).
	type link struct{ hops, dmin, dmax int64 }
	got := map[string]link{}
	for deadline := time.Now().Add(60 * time.Second); ; {
		rows, err := pg.Query(ctx, "SELECT record_id, redirect_hops, redirect_delay_ms, redirect_delay_max_ms FROM "+schema+".records")
		if err != nil {
			t.Fatal(err)
		}
		clear(got)
		for rows.Next() {
			var id string
			var l link
			if err := rows.Scan(&id, &l.hops, &l.dmin, &l.dmax); err != nil {
				t.Fatal(err)
			}
			got[id] = l
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(got) >= len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records in PostgreSQL", len(got), len(want))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Which shard each server's packets went to: its collector's records.
	shardOf := map[string]int{}
	for i, d := range collectors {
		if err := d.stop(t); err != nil {
			t.Fatal(err)
		}
		for _, r := range d.records(t) {
			shardOf[r.ServerIP] = i
		}
	}
	var redirShards []int
	rows, err := pg.Query(ctx, "SELECT DISTINCT server_ip FROM "+schema+".shard_redirects")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ip string
		if err := rows.Scan(&ip); err != nil {
			t.Fatal(err)
		}
		redirShards = append(redirShards, collectorOf(t, collectors, ip))
	}
	cross := 0
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("record %s (%s file %d) not in PostgreSQL", id, w.ServerIP, w.FileID)
			continue
		}
		if g != (link{int64(w.RedirectHops), w.RedirectDelayMS, w.RedirectDelayMaxMS}) {
			t.Errorf("record %s (%s file %d): hops %d delay %d..%d ms, the single collector's %d, %d..%d",
				id, w.ServerIP, w.FileID, g.hops, g.dmin, g.dmax, w.RedirectHops, w.RedirectDelayMS, w.RedirectDelayMaxMS)
		}
		for _, s := range redirShards {
			if w.RedirectHops > 0 && s != shardOf[w.ServerIP] {
				cross++
				break
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d records in PostgreSQL, the single collector made %d", len(got), len(want))
	}
	if cross == 0 {
		t.Errorf("no linked record has a redirector on another shard (redirectors on shards %v, servers %v)", redirShards, shardOf)
	}
	t.Logf("%d messages, %d records, %d linked (%d with a redirector on another shard); redirectors on shards %v",
		len(msgs), len(want), linked, cross, redirShards)
}

// collectorOf returns the index of the collector that stored the redirect
// events of server ip.
func collectorOf(t *testing.T, ds []*daemon, ip string) int {
	t.Helper()
	for i, d := range ds {
		for _, e := range d.storedEvents(t) {
			if e.ServerIP == ip && e.Type == record.EventRedirect {
				return i
			}
		}
	}
	t.Fatalf("no collector stored the redirects of %s", ip)
	return -1
}

// storedEvents returns the events in d's store.
func (d *daemon) storedEvents(t *testing.T) []record.Event {
	t.Helper()
	r, err := store.OpenReader(d.cfg.Store.Options().Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	evs, _, err := r.QueryEvents(context.Background(), store.EventQuery{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
