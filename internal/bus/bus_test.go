package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// testTopology returns a topology of fresh names, deleted at cleanup.
func testTopology(t *testing.T, conn *amqp.Connection, shards int) Topology {
	t.Helper()
	name := testenv.Uniq("xrdmon-bus")
	topo := Topology{From: name + ".shoveler", FromKey: "#", RouteQueue: name + ".route",
		Exchange: name + ".shards", QueuePrefix: name + ".shard.", Shards: shards}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(topo.From, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, q := range append(topo.Queues(), topo.RouteQueue) {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(topo.Exchange, false, false)
		_ = ch.ExchangeDelete(topo.From, false, false)
		ch.Close()
	})
	return topo
}

// dial connects to the test broker, or skips (fails in CI) without it or
// without the consistent-hash plugin.
func dial(t *testing.T) (*amqp.Connection, string) {
	t.Helper()
	u := testenv.AMQPURL(t)
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	probe := Topology{Exchange: testenv.Uniq("xrdmon-bus-probe"), QueuePrefix: "unused.", Shards: 1}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	err = ch.ExchangeDeclare(probe.Exchange, ConsistentHash, false, true, false, false, nil)
	if ae, ok := errors.AsType[*amqp.Error](err); ok && ae.Code == amqp.CommandInvalid {
		testenv.Unavailable(t, ErrNoPlugin.Error())
	} else if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDelete(probe.Exchange, false, false); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	return conn, u
}

// TestSetupIdempotent: Setup declares the exchange, the shard queues with
// single active consumer and the route queue; doing it again changes
// nothing and fails nothing.
func TestSetupIdempotent(t *testing.T) {
	conn, _ := dial(t)
	topo := testTopology(t, conn, 4)
	for range 2 {
		if err := Setup(conn, topo); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclarePassive(topo.Exchange, ConsistentHash, true, false, false, false, nil); err != nil {
		t.Fatalf("exchange: %v", err)
	}
	for _, q := range append(topo.Queues(), topo.RouteQueue) {
		if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
			t.Fatalf("queue %s: %v", q, err)
		}
	}
	// A shard queue refuses a declaration without single active consumer:
	// it has the argument.
	_, err = ch.QueueDeclare(topo.Queue(0), true, false, false, false, nil)
	if ae, ok := errors.AsType[*amqp.Error](err); !ok || ae.Code != amqp.PreconditionFailed {
		t.Errorf("a shard queue redeclared without single-active-consumer: %v", err)
	}
}

// TestRouterShardsByServer: the shoveler's messages of 40 servers, routed,
// land in the shard queues each exactly once; every server's messages in
// one queue, in the order the shoveler published them; the servers spread
// over the shards.
func TestRouterShardsByServer(t *testing.T) {
	conn, u := dial(t)
	topo := testTopology(t, conn, 4)
	if err := Setup(conn, topo); err != nil {
		t.Fatal(err)
	}

	// The shoveler: loadgen publishing to the shoveler's exchange, and the
	// same messages in a file, in publishing order.
	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients, cfg.Duration, cfg.Seed = 40, 4, 3*time.Minute, 7
	gen, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := loadgen.NewAMQP(loadgen.AMQPConfig{URL: u, Exchange: topo.From})
	if err != nil {
		t.Fatal(err)
	}
	var lines bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := loadgen.Tee(pub, loadgen.NewJSONL(&lines))
	truth, err := gen.Run(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	sent := strings.Split(strings.TrimSuffix(lines.String(), "\n"), "\n")
	if int64(len(sent)) != truth.Emitted || len(sent) < 1000 {
		t.Fatalf("%d lines for %d packets", len(sent), truth.Emitted)
	}
	// And one message that is not a shoveler message: routed, not lost.
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.PublishWithContext(ctx, topo.From, "", false, false, amqp.Publishing{Body: []byte("not json")}); err != nil {
		t.Fatal(err)
	}

	d, err := amqpconn.NewDialer(amqpconn.Config{URL: u}, amqpconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultRouterOptions()
	opts.Batch = 100 // several batches
	r, err := NewRouter(d, topo, opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()

	// Read the shards until every message is there.
	byServer := map[string][]string{} // remote -> bodies, in shard order
	shardOf := map[string]int{}
	total, bad := 0, 0
	for deadline := time.Now().Add(time.Minute); total < len(sent)+1; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages reached the shards", total, len(sent)+1)
		}
		got := 0
		for i, q := range topo.Queues() {
			for {
				m, ok, err := ch.Get(q, true)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				got++
				total++
				remote := remoteOf(m.Body)
				if remote == "" {
					bad++
					continue
				}
				if s, seen := shardOf[remote]; seen && s != i {
					t.Fatalf("server %s in shards %d and %d", remote, s, i)
				}
				shardOf[remote] = i
				byServer[remote] = append(byServer[remote], string(m.Body))
			}
		}
		if got == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if total != len(sent)+1 || bad != 1 {
		t.Errorf("%d messages in the shards (%d without a remote), want %d and 1", total, bad, len(sent)+1)
	}
	// Per server, the shoveler's order.
	want := map[string][]string{}
	for _, l := range sent {
		want[remoteOf([]byte(l))] = append(want[remoteOf([]byte(l))], l)
	}
	if len(want) != len(byServer) {
		t.Errorf("%d servers routed, %d sent", len(byServer), len(want))
	}
	for remote, w := range want {
		if g := byServer[remote]; fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("server %s: %d messages, order or content differs from the %d sent", remote, len(g), len(w))
		}
	}
	used := map[int]int{}
	for _, s := range shardOf {
		used[s]++
	}
	if len(used) < 3 {
		t.Errorf("40 servers over 4 shards used only %v", used)
	}
	// The route queue is empty: everything was acknowledged upstream.
	if q, err := ch.QueueDeclarePassive(topo.RouteQueue, true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Errorf("route queue: %d messages left (%v)", q.Messages, err)
	}
}

// remoteOf returns the shard key a message is routed by ("" when it does
// not parse).
func remoteOf(body []byte) string {
	_, k := routingKey(nil, body)
	return k
}

// TestRouterDropsOversized: a message larger than any shoveler message is
// acknowledged, counted and not republished; the messages around it are
// (issue 25: ten 60 MB messages filled the shard queue with 629 MB before
// the collector rejected them).
func TestRouterDropsOversized(t *testing.T) {
	conn, u := dial(t)
	topo := testTopology(t, conn, 2)
	if err := Setup(conn, topo); err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	small := []byte(`{"remote":"192.0.2.7:1094","data":"AAAA"}`)
	big := bytes.Repeat([]byte("A"), source.MaxShovelerMessage+1)
	for _, b := range [][]byte{big, small, big, small} {
		if err := ch.PublishWithContext(ctx, topo.From, "", false, false, amqp.Publishing{Body: b}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := amqpconn.NewDialer(amqpconn.Config{URL: u}, amqpconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := NewRouter(d, topo, DefaultRouterOptions(), nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	routed := 0
	for routed < 2 && ctx.Err() == nil {
		for _, q := range topo.Queues() {
			m, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				routed++
				if !bytes.Equal(m.Body, small) {
					t.Errorf("a message of %d bytes republished", len(m.Body))
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	for testutil.ToFloat64(r.oversized) < 2 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(r.oversized); routed != 2 || got != 2 {
		t.Errorf("%d routed, %v counted oversized; want 2 and 2", routed, got)
	}
	if q, err := ch.QueueDeclarePassive(topo.RouteQueue, true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Errorf("route queue: %d messages left (%v)", q.Messages, err)
	}
	for _, name := range topo.Queues() {
		if q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err != nil || q.Messages != 0 {
			t.Errorf("shard queue %s: %d messages left (%v)", name, q.Messages, err)
		}
	}
}
