package stomp

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/stompconn"
	"github.com/xrdmon/xrdmon/internal/testenv"
	"github.com/xrdmon/xrdmon/internal/units"
)

// BenchmarkConsume measures the source alone: b.N shoveler envelopes wait
// in a queue, and the source takes them, each batch acknowledged as soon
// as it is handed over (the pipeline acknowledges at checkpoints, which
// only delays the acknowledgements), in messages/s. On RabbitMQ the queue
// is filled over AMQP and read through /amq/queue/ (the same queue the
// AMQP input's BenchmarkConsume reads); ActiveMQ is started by the test.
//
//	go test ./internal/source/stomp -run '^$' -bench Consume -benchtime 50000x
func BenchmarkConsume(b *testing.B) {
	b.Run("broker=rabbitmq", func(b *testing.B) {
		u, user, pf := testenv.RabbitSTOMP(b)
		amqpURL := testenv.AMQPURL(b)
		q := testenv.Uniq("xrdmon-bench-stomp")
		fillRabbit(b, amqpURL, q, b.N)
		conn := stompconn.Config{URL: u, User: user, PasswordFile: pf, VHost: "/", Heartbeat: units.Duration(10 * time.Second)}
		consumeBench(b, conn, "/amq/queue/"+q)
	})
	b.Run("broker=activemq", func(b *testing.B) {
		a := testenv.StartActiveMQ(b, false)
		conn := stompconn.Config{URL: a.URL, Heartbeat: units.Duration(10 * time.Second)}
		dest := "/queue/" + testenv.Uniq("xrdmon-bench-stomp")
		d, err := stompconn.NewDialer(conn, stompconn.Options{})
		if err != nil {
			b.Fatal(err)
		}
		c, err := d.Dial(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		p := &publisher{conn: c}
		p.publish(b, dest, 0, b.N)
		_ = c.Disconnect()
		consumeBench(b, conn, dest)
	})
}

func fillRabbit(b *testing.B, amqpURL, q string, n int) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if c, err := amqp.Dial(amqpURL); err == nil {
			if ch, err := c.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			c.Close()
		}
	})
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if _, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp.Publishing{Body: envelope(i)}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil { // a round trip after the publishes
		b.Fatal(err)
	}
}

func consumeBench(b *testing.B, conn stompconn.Config, dest string) {
	cfg := DefaultConfig()
	cfg.Config, cfg.Destination, cfg.Subscription = conn, dest, ""
	b.ResetTimer()
	start := time.Now()
	r := run(b, cfg, nil)
	n := 0
	timeout := time.After(5 * time.Minute)
	for n < b.N {
		select {
		case bt := <-r.out:
			n += len(bt.Packets)
			if err := bt.Ack(); err != nil {
				b.Fatal(err)
			}
			bt.Free()
		case <-timeout:
			b.Fatalf("consumed %d of %d", n, b.N)
		}
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "messages/s")
	b.StopTimer()
	r.cancel()
	<-r.done
}
