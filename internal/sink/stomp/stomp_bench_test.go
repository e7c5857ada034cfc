package stomp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/stompconn"
	"github.com/xrdmon/xrdmon/internal/testenv"
	"github.com/xrdmon/xrdmon/internal/units"
)

// BenchmarkSink measures the whole sink: records appended to a store are
// read back, sent in transactions of 1000 (GRACC to one destination, WLCG
// for a third of them to another), the COMMITs' receipts awaited and the
// cursor moved, in records/s. On RabbitMQ the destinations are topics
// without subscribers, as the AMQP sink's BenchmarkSink publishes to
// exchanges without queues; on ActiveMQ (started by the benchmark) they are
// queues, whose persistent messages the broker stores before the receipt.
//
//	go test ./internal/sink/stomp -run '^$' -bench Sink -benchtime 100000x
func BenchmarkSink(b *testing.B) {
	b.Run("broker=rabbitmq", func(b *testing.B) {
		u, user, pf := testenv.RabbitSTOMP(b)
		conn := stompconn.Config{URL: u, User: user, PasswordFile: pf, VHost: "/", Heartbeat: units.Duration(10 * time.Second)}
		base := "/topic/" + testenv.Uniq("xrdmon-bench")
		sinkBench(b, conn, Destinations{Records: base + ".gracc", WLCG: base + ".wlcg"})
	})
	b.Run("broker=activemq", func(b *testing.B) {
		a := testenv.StartActiveMQ(b, false)
		conn := stompconn.Config{URL: a.URL, Heartbeat: units.Duration(10 * time.Second)}
		base := "/queue/" + testenv.Uniq("xrdmon-bench")
		d := Destinations{Records: base + ".gracc", WLCG: base + ".wlcg"}
		// A consumer takes the messages, as MONIT's do: a queue nobody
		// reads fills the broker (the test broker, 256 MiB of heap, ran
		// out of it at about 130,000 stored messages).
		drain(b, conn, d.Records, d.WLCG)
		sinkBench(b, conn, d)
	})
}

// drain consumes and drops every message of dests until the benchmark ends.
func drain(b *testing.B, conn stompconn.Config, dests ...string) {
	d, err := stompconn.NewDialer(conn, stompconn.Options{})
	if err != nil {
		b.Fatal(err)
	}
	c, err := d.Dial(context.Background())
	if err != nil {
		b.Fatalf("consumer: %v", err)
	}
	b.Cleanup(func() { _ = c.Disconnect() })
	for _, dest := range dests {
		sub, err := c.Subscribe(dest, stomp.AckAuto)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for m := range sub.C {
				if m.Err != nil {
					return
				}
			}
		}()
	}
}

func sinkBench(b *testing.B, conn stompconn.Config, d Destinations) {
	for _, perMsg := range []int{1, 100} {
		b.Run(fmt.Sprintf("per_message=%d", perMsg), func(b *testing.B) {
			st := sinktest.OpenStore(b)
			sinktest.Fill(b, st, b.N, testRecord)
			opts := fastOptions()
			cfg := DefaultConfig()
			cfg.Config, cfg.Destinations, cfg.RecordsPerMessage = conn, d, perMsg
			s, err := NewWithOptions(cfg, opts, st, sinktest.Discard(), nil)
			if err != nil {
				b.Fatal(err)
			}
			sinktest.DrainBench(b, st, opts.Name, s)
		})
	}
}
