package stomp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/sourcetest"
	"github.com/xrdmon/xrdmon/internal/stompconn"
	"github.com/xrdmon/xrdmon/internal/testenv"
	"github.com/xrdmon/xrdmon/internal/units"
)

// broker is a STOMP broker under test and the connection settings of the
// source.
type broker struct {
	name string
	conn stompconn.Config
	// cleanup deletes what a test left on a shared broker (RabbitMQ).
	cleanup func(t *testing.T, dest string)
}

// TestSTOMP runs the source's behaviour against both brokers: RabbitMQ's
// STOMP plugin (shared: unique destinations) and an ActiveMQ the test
// starts.
func TestSTOMP(t *testing.T) {
	t.Run("rabbitmq", func(t *testing.T) {
		u, user, pf := testenv.RabbitSTOMP(t)
		amqpURL := testenv.AMQPURL(t)
		b := broker{name: "rabbitmq", conn: stompconn.Config{URL: u, User: user, PasswordFile: pf, VHost: "/", Heartbeat: units.Duration(time.Second)},
			cleanup: func(t *testing.T, dest string) { deleteRabbitQueue(t, amqpURL, dest) }}
		runSuite(t, b)
	})
	t.Run("activemq", func(t *testing.T) {
		a := testenv.StartActiveMQ(t, true)
		b := broker{name: "activemq", conn: stompconn.Config{URL: a.URL, Heartbeat: units.Duration(time.Second)}}
		runSuite(t, b)
		t.Run("TLSClientCertificate", func(t *testing.T) { testTLS(t, a) })
	})
}

func runSuite(t *testing.T, b broker) {
	t.Run("ConsumeAll", func(t *testing.T) { testConsumeAll(t, b) })
	t.Run("UnackedRedelivered", func(t *testing.T) { testUnackedRedelivered(t, b) })
	t.Run("Reconnect", func(t *testing.T) { testReconnect(t, b) })
	t.Run("DurableTopic", func(t *testing.T) { testDurableTopic(t, b) })
	t.Run("Oversized", func(t *testing.T) { testOversized(t, b) })
}

// testOversized: a 1 MiB message (a datagram is at most 65,535 bytes) is
// counted as oversized and acknowledged, and the messages around it are
// consumed.
func testOversized(t *testing.T, b broker) {
	dest := uniqueQueue(t, b)
	reg := prometheus.NewRegistry()
	p := newPublisher(t, b)
	p.publish(t, dest, 0, 5)
	p.send(t, dest, []byte(`{"remote":"192.0.2.1:1094","version":"t","data":"`+strings.Repeat("QUFB", 1<<20/4)+`"}`))
	p.publish(t, dest, 5, 10)
	r := run(t, config(b, dest), reg)
	r.take(t, 10, true, map[string]int{})
	waitFor(t, func() bool { return testutil.ToFloat64(r.s.m.Invalid.WithLabelValues("oversized")) == 1 })
	r.stop(t)
	r = run(t, config(b, dest), nil)
	r.quiet(t, time.Second)
	r.stop(t)
}

func deleteRabbitQueue(t *testing.T, amqpURL, dest string) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	if ch, err := conn.Channel(); err == nil {
		_, _ = ch.QueueDelete(queueName(dest), false, false, false)
	}
}

func queueName(dest string) string {
	if len(dest) > len("/queue/") && dest[:len("/queue/")] == "/queue/" {
		return dest[len("/queue/"):]
	}
	return dest
}

func envelope(i int) []byte {
	b, _ := json.Marshal(map[string]string{
		"remote":  fmt.Sprintf("192.0.2.%d:%d", i%200+1, 40000+i%1000),
		"version": "test",
		"data":    base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "datagram-%06d", i)),
	})
	return b
}

// publisher sends as the shoveler does: text/plain, persistent; the last
// message of a call asks for a receipt, so all are at the broker when
// publish returns.
type publisher struct {
	conn *stomp.Conn
}

func newPublisher(t *testing.T, b broker) *publisher {
	t.Helper()
	d, err := stompconn.NewDialer(b.conn, stompconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Dial(context.Background())
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect() })
	return &publisher{conn: c}
}

func (p *publisher) publish(t testing.TB, dest string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		opts := []func(*frame.Frame) error{stomp.SendOpt.Header("persistent", "true")}
		if i == to-1 {
			opts = append(opts, stomp.SendOpt.Receipt)
		}
		if err := p.conn.Send(dest, "text/plain", envelope(i), opts...); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
}

func (p *publisher) send(t *testing.T, dest string, body []byte) {
	t.Helper()
	if err := p.conn.Send(dest, "text/plain", body, stomp.SendOpt.Receipt); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

type runner struct {
	s      *STOMP
	out    chan *source.Batch
	cancel context.CancelFunc
	done   chan error
}

func run(t testing.TB, cfg Config, reg prometheus.Registerer) *runner {
	t.Helper()
	s, err := New(cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{s: s, out: make(chan *source.Batch, 64), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx, r.out) }()
	return r
}

func (r *runner) stop(t *testing.T) {
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// take receives until n distinct datagrams are seen, acking (or not) each
// batch.
func (r *runner) take(t *testing.T, n int, ack bool, seen map[string]int) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for len(seen) < n {
		select {
		case b := <-r.out:
			for _, p := range b.Packets {
				seen[string(p.Data)]++
				if !p.Sender.Addr().Is4() || p.Sender.Port() < 40000 {
					t.Fatalf("bad sender %v", p.Sender)
				}
			}
			if ack {
				if err := b.Ack(); err != nil && !errors.Is(err, ErrStaleAck) {
					t.Fatalf("ack: %v", err)
				}
			}
			b.Free()
		case <-timeout:
			t.Fatalf("received %d of %d datagrams", len(seen), n)
		}
	}
}

// quiet checks that nothing more arrives for a while: what was acked is
// not redelivered.
func (r *runner) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case b := <-r.out:
		t.Errorf("a batch of %d arrived after all were acked (first %q)", len(b.Packets), b.Packets[0].Data)
		b.Free()
	case <-time.After(d):
	}
}

func config(b broker, dest string) Config {
	cfg := DefaultConfig()
	cfg.Config = b.conn
	cfg.Destination = dest
	cfg.Subscription = ""
	cfg.ReconnectMin, cfg.ReconnectMax = 10*time.Millisecond, 100*time.Millisecond
	return cfg
}

func uniqueQueue(t *testing.T, b broker) string {
	dest := "/queue/" + testenv.Uniq("xrdmon-test-stomp")
	if b.cleanup != nil {
		t.Cleanup(func() { b.cleanup(t, dest) })
	}
	return dest
}

// testConsumeAll: shoveler envelopes sent to a queue all arrive once, an
// invalid message is counted and acknowledged, and nothing is left.
func testConsumeAll(t *testing.T, b broker) {
	dest := uniqueQueue(t, b)
	reg := prometheus.NewRegistry()
	p := newPublisher(t, b)
	const n = 5000
	p.publish(t, dest, 0, n)
	p.send(t, dest, []byte("not json"))
	start := time.Now()
	r := run(t, config(b, dest), reg)
	seen := map[string]int{}
	r.take(t, n, true, seen)
	elapsed := time.Since(start)
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("%s seen %d times", k, c)
		}
	}
	waitFor(t, func() bool { return sourcetest.SumLabels(r.s.m.Invalid, source.ShovelerReasons) == 1 })
	r.stop(t)
	if got := testutil.ToFloat64(r.s.m.Received); got != n+1 {
		t.Errorf("received counter %v, want %d", got, n+1)
	}
	t.Logf("%s: consumed %d messages in %v (%.0f messages/s)", b.name, n, elapsed, n/elapsed.Seconds())
	// Everything was acknowledged: a new consumer gets nothing.
	r = run(t, config(b, dest), nil)
	r.quiet(t, time.Second)
	r.stop(t)
}

// testUnackedRedelivered: what the pipeline never acknowledged comes
// again to the next consumer.
func testUnackedRedelivered(t *testing.T, b broker) {
	dest := uniqueQueue(t, b)
	p := newPublisher(t, b)
	p.publish(t, dest, 0, 500)
	cfg := config(b, dest)
	cfg.DrainTimeout = 10 * time.Millisecond
	r := run(t, cfg, nil)
	r.take(t, 500, false, map[string]int{}) // never acked
	r.stop(t)

	r = run(t, cfg, nil)
	seen := map[string]int{}
	r.take(t, 500, true, seen)
	r.stop(t)
	r = run(t, cfg, nil)
	r.quiet(t, time.Second)
	r.stop(t)
}

// testReconnect: a batch held across a broken connection cannot be
// acknowledged (ErrStaleAck) and is redelivered on the new connection.
func testReconnect(t *testing.T, b broker) {
	dest := uniqueQueue(t, b)
	reg := prometheus.NewRegistry()
	p := newPublisher(t, b)
	p.publish(t, dest, 0, 100)
	r := run(t, config(b, dest), reg)
	seen := map[string]int{}
	var held *source.Batch
	select {
	case held = <-r.out:
	case <-time.After(30 * time.Second):
		t.Fatal("no batch")
	}
	for _, p := range held.Packets {
		seen[string(p.Data)]++
	}
	r.s.conn.Break()
	waitFor(t, func() bool {
		return testutil.ToFloat64(r.s.m.Reconnects) >= 1 && testutil.ToFloat64(r.s.m.Connected) == 1
	})
	if err := held.Ack(); !errors.Is(err, ErrStaleAck) {
		t.Errorf("ack across reconnect: %v, want ErrStaleAck", err)
	}
	if got := testutil.ToFloat64(r.s.m.AckFailed); got != 1 {
		t.Errorf("failed acks %v", got)
	}
	p.publish(t, dest, 100, 200)
	r.take(t, 200, true, seen) // the held ones come again, plus the rest
	r.stop(t)
	r = run(t, config(b, dest), nil)
	r.quiet(t, time.Second)
	r.stop(t)
}

// testDurableTopic: with a durable subscription to the shoveler's kind of
// destination, a topic, what is sent while xrdmon is away waits for it.
func testDurableTopic(t *testing.T, b broker) {
	dest := "/topic/" + testenv.Uniq("xrdmon-test-stomp")
	cfg := config(b, dest)
	cfg.Subscription = testenv.Uniq("xrdmon-test-sub")
	r := run(t, cfg, prometheus.NewRegistry())
	waitFor(t, func() bool { return testutil.ToFloat64(r.s.m.Connected) == 1 })
	time.Sleep(200 * time.Millisecond) // the SUBSCRIBE is processed
	p := newPublisher(t, b)
	p.publish(t, dest, 0, 100)
	r.take(t, 100, true, map[string]int{})
	r.stop(t)
	p.publish(t, dest, 100, 300) // while away
	r = run(t, cfg, nil)
	seen := map[string]int{}
	r.take(t, 200, true, seen)
	if _, ok := seen["datagram-000000"]; ok {
		t.Error("a message acknowledged before the restart came again")
	}
	r.stop(t)
	unsubscribeDurable(t, b, cfg)
}

// unsubscribeDurable removes a durable subscription from the broker.
func unsubscribeDurable(t *testing.T, b broker, cfg Config) {
	d, err := stompconn.NewDialer(b.conn, stompconn.Options{ClientID: cfg.Subscription})
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Dial(context.Background())
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer c.Disconnect()
	sub, err := c.Subscribe(cfg.Destination, stomp.AckClientIndividual, stomp.SubscribeOpt.Id(cfg.Subscription),
		stomp.SubscribeOpt.Header("activemq.subscriptionName", cfg.Subscription),
		stomp.SubscribeOpt.Header("durable", "true"), stomp.SubscribeOpt.Header("auto-delete", "false"))
	if err != nil {
		return
	}
	_ = sub.Unsubscribe(stomp.SubscribeOpt.Header("activemq.subscriptionName", cfg.Subscription),
		stomp.SubscribeOpt.Header("durable", "true"), stomp.SubscribeOpt.Header("auto-delete", "false"))
}

// testTLS: over stomp+ssl the broker takes the client certificate the
// test made, and turns away one from a CA it does not trust.
func testTLS(t *testing.T, a *testenv.ActiveMQ) {
	c := a.Certs
	conn := stompconn.Config{URL: a.TLSURL, TLS: amqpconn.TLS{CA: c.CA, Cert: c.ClientCert, Key: c.ClientKey}}
	b := broker{name: "activemq-tls", conn: conn}
	dest := uniqueQueue(t, b)
	p := newPublisher(t, b)
	p.publish(t, dest, 0, 100)
	r := run(t, config(b, dest), nil)
	r.take(t, 100, true, map[string]int{})
	r.stop(t)

	bad := conn
	bad.TLS.Cert, bad.TLS.Key = c.OtherCert, c.OtherKey
	d, err := stompconn.NewDialer(bad, stompconn.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := d.Dial(context.Background()); err == nil {
		_ = c.Disconnect()
		t.Error("the broker took a client certificate of a CA it does not trust")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAckerOrder: batches acknowledged out of order are acknowledged to
// the broker in order, by the last message of the longest run of durable
// batches, and not at all after the session ended.
func TestAckerOrder(t *testing.T) {
	a := &acker{wake: make(chan struct{}, 1)} // no goroutine: latest is inspected
	m1, m2, m3 := &stomp.Message{}, &stomp.Message{}, &stomp.Message{}
	b1, b2, b3 := a.add(m1), a.add(m2), a.add(m3)
	if err := a.ack(b2); err != nil || a.latest != nil {
		t.Fatalf("acked %v before the first batch was done (%v)", a.latest, err)
	}
	if err := a.ack(b1); err != nil || a.latest != m2 {
		t.Fatalf("ack covers %p, want the second batch's last message %p (%v)", a.latest, m2, err)
	}
	if err := a.ack(b1); err != nil || a.outstanding() != 1 {
		t.Fatalf("double ack: outstanding %d, %v", a.outstanding(), err)
	}
	a.close()
	if err := a.ack(b3); !errors.Is(err, ErrStaleAck) {
		t.Fatalf("ack after close: %v", err)
	}
}
