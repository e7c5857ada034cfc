package amqp

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// BenchmarkConsume measures the source alone: b.N shoveler envelopes wait
// in a queue, and the source takes them, each batch acknowledged as soon
// as it is handed over, in messages/s: the figure the STOMP input's
// BenchmarkConsume is compared with (BENCHMARKS.md).
//
//	go test ./internal/source/amqp -run '^$' -bench Consume -benchtime 50000x
func BenchmarkConsume(b *testing.B) {
	url := testenv.AMQPURL(b)
	q := testenv.Uniq("xrdmon-bench-amqp")
	conn, err := amqp.Dial(url)
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
	defer func() { _, _ = ch.QueueDelete(q, false, false, false) }()
	for i := range b.N {
		if err := ch.Publish("", q, false, false, amqp.Publishing{Body: envelope(i)}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	a, err := New(Config{Config: amqpconn.Config{URL: url}, Queue: q, Exchange: "-"}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan *source.Batch, 64)
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { done <- a.Run(ctx, out) }()
	n := 0
	timeout := time.After(5 * time.Minute)
	for n < b.N {
		select {
		case bt := <-out:
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
	cancel()
	<-done
}
