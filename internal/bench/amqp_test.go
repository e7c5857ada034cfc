package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

func TestAMQPSource(t *testing.T) {
	url := testenv.AMQPURL(t)
	queue := fmt.Sprintf("xrdmon-bench-test-%d", time.Now().UnixNano())
	s, err := newAMQPSource(url, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.QueueDelete(queue, false, false, false)
	ctx := context.Background()
	for _, body := range []string{
		`[{"server_ip":"127.0.0.2","filename":"/a","read":1},{"server_ip":"127.0.0.2","filename":"/b","read":2}]`,
		`{"server_ip":"127.0.0.3","path":"/c","read_bytes":3,"server_stod":5,"file_id":9}`,
	} {
		if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	var got []Observed
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < 3 && time.Now().Before(deadline) {
		obs, err := s.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, obs...)
		time.Sleep(20 * time.Millisecond)
	}
	if len(got) != 3 {
		t.Fatalf("got %d records, want 3: %+v", len(got), got)
	}
	if got[2] != (Observed{ServerIP: "127.0.0.3", Path: "/c", Read: 3, Stod: 5, FileID: 9, HasID: true}) {
		t.Errorf("third record: %+v", got[2])
	}
}
