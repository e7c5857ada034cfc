package amqp

import (
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// testURL returns the broker URL, skipping (or failing under CI=true) when
// the broker does not answer.
func testURL(tb testing.TB) string { return testenv.AMQPURL(tb) }

// brokerAddr is host:port of a URL.
func brokerAddr(tb testing.TB, u string) string {
	uri, err := amqp.ParseURI(u)
	if err != nil {
		tb.Fatal(err)
	}
	return net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port))
}

// withAddr returns u pointing at addr instead.
func withAddr(tb testing.TB, u, addr string) string {
	uri, err := amqp.ParseURI(u)
	if err != nil {
		tb.Fatal(err)
	}
	h, p, _ := net.SplitHostPort(addr)
	uri.Host = h
	fmt.Sscan(p, &uri.Port)
	return uri.String()
}

// testExchanges returns unique exchange names for one test, declared on the
// broker and deleted at cleanup.
func testExchanges(tb testing.TB, u string) Exchanges {
	tb.Helper()
	base := testenv.Uniq("xrdmon-test")
	e := Exchanges{
		Records: base + ".detailed",
		WLCG:    base + ".wlcg",
		Cache:   base + ".cache",
		TPC:     base + ".tpc",
		Events:  base + ".events",
	}
	c, err := amqp.Dial(u)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	for _, n := range exchangeNames(e) {
		if err := ch.ExchangeDeclare(n, "topic", false, false, false, false, nil); err != nil {
			tb.Fatalf("declare %s: %v", n, err)
		}
	}
	tb.Cleanup(func() {
		c, err := amqp.Dial(u)
		if err != nil {
			return
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return
		}
		for _, n := range exchangeNames(e) {
			_ = ch.ExchangeDelete(n, false, false)
		}
	})
	return e
}

func exchangeNames(e Exchanges) []string {
	return []string{e.Records, e.WLCG, e.Cache, e.TPC, e.Events}
}

// msg is one consumed message, split into its entries.
type msg struct {
	exchange, key, id, typ string
	mode                   uint8
	contentType            string
	entries                []json.RawMessage
}

// consumer collects everything published to a set of exchanges.
type consumer struct {
	mu   sync.Mutex
	msgs []msg
}

// consume binds an exclusive queue per exchange (routing "#").
func consume(tb testing.TB, u string, exchanges ...string) *consumer {
	tb.Helper()
	c, err := amqp.Dial(u)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	cons := &consumer{}
	for _, ex := range exchanges {
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			tb.Fatal(err)
		}
		if err := ch.QueueBind(q.Name, "#", ex, false, nil); err != nil {
			tb.Fatal(err)
		}
		d, err := ch.Consume(q.Name, "", true, true, false, false, nil)
		if err != nil {
			tb.Fatal(err)
		}
		go func() {
			for m := range d {
				var ents []json.RawMessage
				if len(m.Body) > 0 && m.Body[0] == '[' {
					if err := json.Unmarshal(m.Body, &ents); err != nil {
						panic(err)
					}
				} else {
					ents = []json.RawMessage{append([]byte(nil), m.Body...)}
				}
				cons.mu.Lock()
				cons.msgs = append(cons.msgs, msg{m.Exchange, m.RoutingKey, m.MessageId, m.Type, m.DeliveryMode, m.ContentType, ents})
				cons.mu.Unlock()
			}
		}()
	}
	return cons
}

// entries returns the number of entries received on exchange.
func (c *consumer) entries(exchange string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.msgs {
		if m.exchange == exchange {
			n += len(m.entries)
		}
	}
	return n
}

func (c *consumer) snapshot() []msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]msg(nil), c.msgs...)
}

// testRecord is record i, one per second; every third one is a CMS /store
// read (WLCG), the others OSG reads.
func testRecord(i int) record.Record {
	r := sinktest.Record(i, time.Second)
	if i%3 != 0 {
		r.VO, r.Path = "osg", fmt.Sprintf("/ospool/data/file%d.root", i)
	}
	return r
}

func testRecords(from, n int) []record.Record { return sinktest.Records(from, n, testRecord) }

// fastOptions make retries quick for tests.
func fastOptions() Options {
	o := DefaultOptions()
	o.Name = testenv.Uniq("amqp")
	o.PollInterval = 10 * time.Millisecond
	o.MinBackoff = 20 * time.Millisecond
	o.MaxBackoff = 200 * time.Millisecond
	o.DialTimeout = 2 * time.Second
	o.AckTimeout = 20 * time.Second
	return o
}
