package amqp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/sourcetest"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// fakeAcker records channel acks.
type fakeAcker struct{ acks []uint64 }

func (f *fakeAcker) Ack(tag uint64, multiple bool) error {
	if !multiple {
		return errors.New("want multiple")
	}
	f.acks = append(f.acks, tag)
	return nil
}

func TestTrackerOrder(t *testing.T) {
	f := &fakeAcker{}
	tr := &tracker{ch: f}
	e1, e2, e3 := tr.add(10), tr.add(20), tr.add(30)
	if err := tr.done(e2); err != nil || len(f.acks) != 0 {
		t.Fatalf("acked %v before the first batch was done (%v)", f.acks, err)
	}
	if err := tr.done(e1); err != nil || fmt.Sprint(f.acks) != "[20]" {
		t.Fatalf("acks %v, want [20] (%v)", f.acks, err)
	}
	if err := tr.done(e1); err != nil || len(f.acks) != 1 {
		t.Fatalf("double ack: %v %v", f.acks, err)
	}
	tr.close()
	if err := tr.done(e3); !errors.Is(err, ErrStaleAck) {
		t.Fatalf("ack after close: %v", err)
	}
}

// broker returns a connection to the test broker and a unique queue name,
// deleted at the end of the test.
func broker(t *testing.T) (string, *amqp.Channel, string) {
	t.Helper()
	url := testenv.AMQPURL(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ dial: "+err.Error())
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("xrdmon-test-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	t.Cleanup(func() {
		if c, err := conn.Channel(); err == nil {
			c.QueueDelete(name, false, false, false)
			c.ExchangeDelete(name, false, false)
		}
		conn.Close()
	})
	return url, ch, name
}

func envelope(i int) []byte {
	b, _ := json.Marshal(map[string]string{
		"remote":  fmt.Sprintf("192.0.2.%d:%d", i%200+1, 40000+i%1000),
		"version": "test",
		"data":    base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("datagram-%06d", i))),
	})
	return b
}

func publish(t *testing.T, ch *amqp.Channel, exchange string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := ch.Publish(exchange, "", false, false, amqp.Publishing{Body: envelope(i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func queueLen(t *testing.T, ch *amqp.Channel, q string) int {
	t.Helper()
	qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return qi.Messages
}

type runner struct {
	a      *AMQP
	out    chan *source.Batch
	cancel context.CancelFunc
	done   chan error
}

func run(t *testing.T, cfg Config, reg prometheus.Registerer) *runner {
	t.Helper()
	a, err := New(cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{a: a, out: make(chan *source.Batch, 64), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx, r.out) }()
	return r
}

func (r *runner) stop(t *testing.T) {
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// take receives until n distinct datagrams are seen, acking (or not) each batch.
func (r *runner) take(t *testing.T, n int, ack bool, seen map[string]int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
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

func TestConsumeAll(t *testing.T) {
	url, ch, name := broker(t)
	reg := prometheus.NewRegistry()
	const n = 10000
	cfg := Config{Config: amqpconn.Config{URL: url}, Queue: name, Exchange: name, ExchangeType: "fanout"}
	r := run(t, cfg, reg)
	// Wait for the queue and binding to exist before publishing.
	waitFor(t, func() bool { return testutil.ToFloat64(r.a.m.Connected) == 1 })
	start := time.Now()
	publish(t, ch, name, 0, n)
	if err := ch.Publish(name, "", false, false, amqp.Publishing{Body: []byte("not json")}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	r.take(t, n, true, seen)
	elapsed := time.Since(start)
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("%s seen %d times", k, c)
		}
	}
	waitFor(t, func() bool { return sourcetest.SumLabels(r.a.m.Invalid, source.ShovelerReasons) == 1 })
	r.stop(t)
	if q := queueLen(t, ch, name); q != 0 {
		t.Errorf("queue holds %d messages after all were acked", q)
	}
	if got := testutil.ToFloat64(r.a.m.Received); got != n+1 {
		t.Errorf("received counter %v, want %d", got, n+1)
	}
	t.Logf("published and consumed %d messages in %v (%.0f messages/s)", n, elapsed, n/elapsed.Seconds())
}

func TestUnackedRedelivered(t *testing.T) {
	url, ch, name := broker(t)
	cfg := Config{Config: amqpconn.Config{URL: url}, Queue: name, Exchange: "-", RelayOptions: source.RelayOptions{DrainTimeout: 10 * time.Millisecond}}
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if err := ch.Publish("", name, false, false, amqp.Publishing{Body: envelope(i)}); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, cfg, nil)
	seen := map[string]int{}
	r.take(t, 500, false, seen) // never acked
	r.stop(t)

	r = run(t, cfg, nil)
	seen2 := map[string]int{}
	r.take(t, 500, true, seen2)
	r.stop(t)
	if q := queueLen(t, ch, name); q != 0 {
		t.Errorf("queue holds %d messages", q)
	}
}

func TestReconnect(t *testing.T) {
	url, ch, name := broker(t)
	reg := prometheus.NewRegistry()
	cfg := Config{Config: amqpconn.Config{URL: url}, Queue: name, Exchange: name, ExchangeType: "fanout", RelayOptions: source.RelayOptions{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond}}
	r := run(t, cfg, reg)
	waitFor(t, func() bool { return testutil.ToFloat64(r.a.m.Connected) == 1 })
	publish(t, ch, name, 0, 100)
	seen := map[string]int{}
	// Hold the first batch unacknowledged across the failure.
	var held *source.Batch
	select {
	case held = <-r.out:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch")
	}
	for _, p := range held.Packets {
		seen[string(p.Data)]++
	}
	r.a.conn.Break()
	waitFor(t, func() bool {
		return testutil.ToFloat64(r.a.m.Reconnects) >= 1 && testutil.ToFloat64(r.a.m.Connected) == 1
	})
	if err := held.Ack(); !errors.Is(err, ErrStaleAck) {
		t.Errorf("ack across reconnect: %v, want ErrStaleAck", err)
	}
	if got := testutil.ToFloat64(r.a.m.AckFailed); got != 1 {
		t.Errorf("failed acks %v", got)
	}
	publish(t, ch, name, 100, 200)
	r.take(t, 200, true, seen) // the held ones come again, plus the rest
	r.stop(t)
	if q := queueLen(t, ch, name); q != 0 {
		t.Errorf("queue holds %d messages", q)
	}
}

func TestTokenFile(t *testing.T) {
	url, _, name := broker(t)
	// The test broker knows guest/guest: the "token" is the password.
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("guest\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, _ := amqp.ParseURI(url)
	reg := prometheus.NewRegistry()
	cfg := Config{Config: amqpconn.Config{URL: fmt.Sprintf("amqp://guest@%s:%d/", u.Host, u.Port), TokenFile: tok}, Queue: name, Exchange: "-",
		TokenCheck: 20 * time.Millisecond, RelayOptions: source.RelayOptions{ReconnectMin: 10 * time.Millisecond}}
	r := run(t, cfg, reg)
	defer r.stop(t)
	waitFor(t, func() bool { return testutil.ToFloat64(r.a.m.Connected) == 1 })
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(tok, later, later); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return testutil.ToFloat64(r.a.m.Reconnects) >= 1 && testutil.ToFloat64(r.a.m.Connected) == 1
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOversizedMessageRejected: a 10 MB message on the bus (a datagram is
// at most 65,535 bytes) is counted as oversized and acknowledged, and the
// messages around it are consumed.
func TestOversizedMessageRejected(t *testing.T) {
	url, ch, name := broker(t)
	reg := prometheus.NewRegistry()
	cfg := Config{Config: amqpconn.Config{URL: url}, Queue: name, Exchange: name, ExchangeType: "fanout"}
	r := run(t, cfg, reg)
	waitFor(t, func() bool { return testutil.ToFloat64(r.a.m.Connected) == 1 })
	publish(t, ch, name, 0, 5)
	huge := []byte(`{"remote":"192.0.2.1:1094","version":"t","data":"` + strings.Repeat("QUFB", 10<<20/4) + `"}`)
	if err := ch.Publish(name, "", false, false, amqp.Publishing{Body: huge}); err != nil {
		t.Fatal(err)
	}
	publish(t, ch, name, 5, 10)
	seen := map[string]int{}
	r.take(t, 10, true, seen)
	waitFor(t, func() bool { return testutil.ToFloat64(r.a.m.Invalid.WithLabelValues("oversized")) == 1 })
	r.stop(t)
	if q := queueLen(t, ch, name); q != 0 {
		t.Errorf("queue holds %d messages: the oversized one was not acknowledged", q)
	}
}

// TestHandoverKeepsOrder: a consumer that stops (or is abandoned) while it
// holds unacknowledged deliveries gives them back before the next consumer
// of the queue gets anything, so the next one sees every message in the
// order published: with single active consumer by the broker's choice (the
// first consumer is never cancelled while its channel is open), and on a
// plain queue by HandoverWait (the next one waits until the queue has no
// consumer).
func TestHandoverKeepsOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		sac  bool
		wait time.Duration
	}{
		{"single_active_consumer", true, 0},
		{"handover_wait", false, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, ch, name := broker(t)
			var args amqp.Table
			if tc.sac {
				args = amqp.Table{"x-single-active-consumer": true}
			}
			if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
				t.Fatal(err)
			}
			const n = 600
			for i := range n {
				if err := ch.Publish("", name, false, false, amqp.Publishing{Body: envelope(i)}); err != nil {
					t.Fatal(err)
				}
			}
			base := Config{Config: amqpconn.Config{URL: url}, Queue: name, Exchange: "-", SingleActiveConsumer: tc.sac,
				Prefetch: 100, RelayOptions: source.RelayOptions{BatchSize: 10}}
			// The old holder: takes what the broker sends ahead, acknowledges
			// nothing, and is stopped with a drain that would last a minute.
			old := base
			old.DrainTimeout = time.Minute
			a := run(t, old, nil)
			held := map[string]int{}
			a.take(t, 100, false, held)
			a.cancel()

			next := base
			next.HandoverWait = tc.wait
			b := run(t, next, nil)
			defer b.stop(t)
			if tc.sac {
				// Both consumers registered: the next one waits its turn.
				waitFor(t, func() bool {
					q, err := ch.QueueDeclarePassive(name, true, false, false, false, args)
					return err == nil && q.Consumers == 2
				})
			} else {
				// The next one waits for the queue to have no consumer.
				waitFor(t, func() bool { return testutil.ToFloat64(b.a.m.Connected) == 0 && b.a.waiting.Load() })
			}
			select {
			case bt := <-b.out:
				t.Fatalf("the next consumer got %d messages while the old one held deliveries", len(bt.Packets))
			case <-time.After(200 * time.Millisecond):
			}
			// The old holder is abandoned (its lease lost): what it held goes
			// back to the queue at once, before the next consumer starts.
			a.a.Abandon()
			if err := <-a.done; err != nil {
				t.Fatalf("old holder's Run: %v", err)
			}
			last := -1
			seen := 0
			timeout := time.After(60 * time.Second)
			for seen < n {
				select {
				case bt := <-b.out:
					for _, p := range bt.Packets {
						var i int
						if _, err := fmt.Sscanf(string(p.Data), "datagram-%d", &i); err != nil {
							t.Fatalf("datagram %q: %v", p.Data, err)
						}
						if i <= last {
							t.Fatalf("after the handover, message %d came after message %d", i, last)
						}
						last = i
						seen++
					}
					if err := bt.Ack(); err != nil {
						t.Fatalf("ack: %v", err)
					}
					bt.Free()
				case <-timeout:
					t.Fatalf("the next consumer got %d of %d messages", seen, n)
				}
			}
		})
	}
}
