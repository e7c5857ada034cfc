package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/bus"
	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// TestBusShardedCollectors: the shoveler's messages of 24 servers, routed
// by `xrdmon bus route` over two shard queues set up by `xrdmon bus setup`,
// consumed by two collectors (one shard queue each, single active
// consumer): together they write every record of the truth once, and each
// server's records are all in one collector.
func TestBusShardedCollectors(t *testing.T) {
	url := testenv.AMQPURL(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // after the cleanup below, which uses it
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Uniq("xrdmon-cluster")
	topo := bus.Topology{From: name + ".shoveler", FromKey: "#", RouteQueue: name + ".route",
		Exchange: name + ".shards", QueuePrefix: name + ".shard.", Shards: 2}
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

	flags := []string{"--url", url, "--shards", "2", "--exchange", topo.Exchange, "--queue-prefix", topo.QueuePrefix,
		"--from", topo.From, "--route-queue", topo.RouteQueue}
	var out, errb bytes.Buffer
	if code := run(context.Background(), append([]string{"bus", "setup"}, flags...), &out, &errb); code != 0 {
		if bytes.Contains(errb.Bytes(), []byte("x-consistent-hash")) {
			testenv.Unavailable(t, errb.String())
		}
		t.Fatalf("bus setup: exit %d: %s", code, errb.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	routed := make(chan int, 1)
	go func() {
		routed <- run(ctx, append([]string{"bus", "route"}, flags...), &bytes.Buffer{}, &bytes.Buffer{})
	}()
	defer func() {
		cancel()
		if code := <-routed; code != 0 {
			t.Errorf("bus route: exit %d", code)
		}
	}()

	collectors := make([]*daemon, topo.Shards)
	for i := range collectors {
		collectors[i] = startDaemon(t, func(c *config.Config) {
			c.Listen.UDP = ""
			c.AMQPInput.Enabled, c.AMQPInput.URL = true, url
			c.AMQPInput.Queue, c.AMQPInput.Exchange, c.AMQPInput.SingleActiveConsumer = topo.Queue(i), "-", true
		})
	}

	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients, cfg.Duration, cfg.Seed, cfg.KeepRecords = 24, 4, 4*time.Minute, 11, true
	gen, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := loadgen.NewAMQP(loadgen.AMQPConfig{URL: url, Exchange: topo.From})
	if err != nil {
		t.Fatal(err)
	}
	truth, err := gen.Run(context.Background(), pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		t.Fatal(err)
	}

	// Wait for every record and event, then stop the collectors.
	var n, events int
	var wantEvents int64
	for _, n := range truth.Events {
		wantEvents += n
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		n, events = 0, 0
		for _, d := range collectors {
			n += int(d.metric(t, "xrdmon_pipeline_records_committed_total"))
			events += d.events(t)
		}
		if n >= len(truth.Records) && int64(events) >= wantEvents {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records and %d of %d events committed", n, len(truth.Records), events, wantEvents)
		}
		time.Sleep(100 * time.Millisecond)
	}
	key := func(r *record.Record) string {
		return fmt.Sprintf("%s|%s|%d|%d|%d|%s", r.ServerIP, r.Path, r.ReadBytes, r.ReadvBytes, r.WriteBytes, r.Reason)
	}
	want := map[string]int{}
	for i := range truth.Records {
		want[key(&truth.Records[i])]++
	}
	serverIn := map[string]int{}
	got := 0
	for i, d := range collectors {
		if err := d.stop(t); err != nil {
			t.Fatal(err)
		}
		recs := d.records(t)
		if len(recs) == 0 {
			t.Errorf("collector %d (shard queue %s) wrote nothing: the servers did not spread", i, topo.Queue(i))
		}
		for j := range recs {
			r := &recs[j]
			got++
			want[key(r)]--
			if s, ok := serverIn[r.ServerIP]; ok && s != i {
				t.Fatalf("server %s has records in collectors %d and %d", r.ServerIP, s, i)
			}
			serverIn[r.ServerIP] = i
		}
	}
	for k, n := range want {
		if n != 0 {
			t.Errorf("record %s: %+d against the truth", k, -n)
		}
	}
	if int64(events) != wantEvents {
		t.Errorf("%d events stored by the collectors, truth %d", events, wantEvents)
	}
	if got != len(truth.Records) || len(serverIn) != cfg.Servers {
		t.Errorf("%d records from %d servers, truth %d from %d", got, len(serverIn), len(truth.Records), cfg.Servers)
	}
	t.Logf("%d messages, %d records from %d servers over %d collectors", truth.Emitted, got, len(serverIn), len(collectors))
}

// events returns the number of events (not internal ones) in d's store,
// read while it runs.
func (d *daemon) events(t *testing.T) int {
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
	return len(evs)
}
