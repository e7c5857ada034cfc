package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// TestAMQP publishes a run as shoveler messages and reads them back.
func TestAMQP(t *testing.T) {
	url := testenv.AMQPURL(t)
	name := fmt.Sprintf("loadgen-test-%d", time.Now().UnixNano())
	cfg := smallConfig()
	cfg.Duration, cfg.Count, cfg.Restarts = 0, 700, 0
	_, want := generate(t, cfg)

	out, err := NewAMQP(AMQPConfig{URL: url, Exchange: name, Queue: name, Batch: 100})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Run(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	if out.Published != int64(len(want.Packets)) {
		t.Errorf("%d confirmed, want %d", out.Published, len(want.Packets))
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}

	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = ch.QueueDelete(name, false, false, false)
		_ = ch.ExchangeDelete(name, false, false)
	}()
	deliveries, err := ch.Consume(name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for i := range want.Packets {
		select {
		case d := <-deliveries:
			if d.DeliveryMode != amqp.Persistent {
				t.Errorf("message %d not persistent", i)
			}
			s, err := source.ParseShoveler(d.Body)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if !bytes.Equal(s.Data, want.Packets[i].Data) || s.Sender != want.Packets[i].Sender {
				t.Fatalf("message %d differs from the generated packet", i)
			}
		case <-timeout:
			t.Fatalf("received %d of %d messages", i, len(want.Packets))
		}
	}
}
