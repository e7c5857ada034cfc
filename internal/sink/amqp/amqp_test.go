package amqp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/busmsg"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

func TestNewValidates(t *testing.T) {
	st := sinktest.OpenStore(t)
	good := Config{Config: amqpconn.Config{URL: "amqp://127.0.0.1:1/"}, Exchanges: Exchanges{Records: "x"}}
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"no url":       {Config{Exchanges: good.Exchanges}, "empty url"},
		"no exchanges": {Config{Config: amqpconn.Config{URL: good.URL}}, "no exchange"},
		"bad ca":       {Config{Config: amqpconn.Config{URL: good.URL, TLS: amqpconn.TLS{CA: "/nonexistent"}}, Exchanges: good.Exchanges}, "tls ca"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.cfg, st, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := New(good, st, nil, nil); err != nil {
		t.Fatalf("good config: %v", err)
	}
}

// TestTokenIsPassword: the token file's content is the password; a wrong
// one fails to connect, the right one (re-read at the next connect) works.
func TestTokenIsPassword(t *testing.T) {
	u := testURL(t)
	uri, _ := amqp.ParseURI(u)
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	uri.Password = ""
	opts := fastOptions()
	opts.fill()
	p, err := newPublisher(Config{Config: amqpconn.Config{URL: uri.String(), TokenFile: tokFile}}, opts, sinktest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.connect(); err == nil {
		p.close()
		t.Fatal("connected with a wrong token")
	}
	if err := os.WriteFile(tokFile, []byte(testPassword(t, u)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.connect(); err != nil {
		t.Fatalf("connect with the right token: %v", err)
	}
	p.close()
}

func testPassword(t *testing.T, u string) string {
	uri, err := amqp.ParseURI(u)
	if err != nil {
		t.Fatal(err)
	}
	return uri.Password
}

// TestPublish checks routing, formats and properties, one record per
// message and packed.
func TestPublish(t *testing.T) {
	u := testURL(t)
	for _, perMsg := range []int{1, 7} {
		t.Run("per_message="+string(rune('0'+perMsg)), func(t *testing.T) {
			t.Parallel()
			ex := testExchanges(t, u)
			cons := consume(t, u, exchangeNames(ex)...)
			st := sinktest.OpenStore(t)
			const n = 250
			recs := testRecords(0, n)
			evs := []record.Event{
				sinktest.Event(1, record.EventCacheFileClose), sinktest.Event(2, record.EventCacheFileClose),
				sinktest.Event(3, record.EventTPC), sinktest.Event(4, record.EventThrottle), sinktest.Event(5, record.EventOSS),
			}
			if err := st.Append(context.Background(), recs[:100], evs); err != nil {
				t.Fatal(err)
			}
			opts := fastOptions()
			opts.BatchSize = 64
			s, err := NewWithOptions(Config{Config: amqpconn.Config{URL: u}, Exchanges: ex, Format: busmsg.Format{RecordsPerMessage: perMsg}}, opts, st, sinktest.Discard(), nil)
			if err != nil {
				t.Fatal(err)
			}
			sinktest.RunSink(t, s)
			if err := st.Append(context.Background(), recs[100:], nil); err != nil {
				t.Fatal(err)
			}
			nWLCG := (n + 2) / 3
			sinktest.WaitFor(t, "all messages", 20*time.Second, func() bool {
				return cons.entries(ex.Records) == n && cons.entries(ex.WLCG) == nWLCG &&
					cons.entries(ex.Cache) == 2 && cons.entries(ex.TPC) == 1 && cons.entries(ex.Events) == 2
			})
			sinktest.WaitFor(t, "cursor at end", 5*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == sinktest.LastSeq(t, st) })

			wantGRACC := map[string]string{}
			wantWLCG := map[string]string{}
			for i := range recs {
				wantGRACC[string(record.AppendGRACC(nil, &recs[i]))] = recs[i].RecordID
				if i%3 == 0 {
					wantWLCG[string(record.AppendWLCG(nil, &recs[i]))] = recs[i].RecordID
				}
			}
			ids := map[string]bool{}
			for _, m := range cons.snapshot() {
				if m.mode != amqp.Persistent || m.contentType != "application/json" {
					t.Fatalf("message on %s: delivery mode %d, content type %q", m.exchange, m.mode, m.contentType)
				}
				if perMsg == 1 && len(m.entries) != 1 || len(m.entries) > perMsg {
					t.Fatalf("message on %s has %d entries, per message %d", m.exchange, len(m.entries), perMsg)
				}
				switch m.exchange {
				case ex.Records, ex.WLCG:
					want := wantGRACC
					if m.exchange == ex.WLCG {
						want = wantWLCG
					}
					if m.key != RoutingKeyFileClose {
						t.Errorf("routing key %q on %s", m.key, m.exchange)
					}
					for j, e := range m.entries {
						id, ok := want[string(e)]
						if !ok {
							t.Fatalf("unexpected body on %s: %s", m.exchange, e)
						}
						if j == 0 && m.id != id {
							t.Errorf("message id %q, want %q", m.id, id)
						}
						if m.exchange == ex.Records {
							ids[id] = true
						}
					}
				case ex.Cache, ex.TPC, ex.Events:
					var ev record.Event
					if err := json.Unmarshal(m.entries[0], &ev); err != nil {
						t.Fatal(err)
					}
					wantKey := map[record.EventType]string{record.EventCacheFileClose: RoutingKeyFileClose,
						record.EventTPC: RoutingKeyTPC}[ev.Type]
					if wantKey == "" {
						wantKey = string(ev.Type)
					}
					if m.key != wantKey || m.typ != string(ev.Type) {
						t.Errorf("event %s: key %q type %q", ev.Type, m.key, m.typ)
					}
				}
			}
			if len(ids) != n {
				t.Fatalf("%d distinct records on %s, want %d", len(ids), ex.Records, n)
			}
		})
	}
}

// TestWLCGOnly: matching records go only to the WLCG exchange.
func TestWLCGOnly(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	ex := testExchanges(t, u)
	ex.Cache, ex.TPC, ex.Events = "", "", ""
	cons := consume(t, u, ex.Records, ex.WLCG)
	st := sinktest.OpenStore(t)
	if err := st.Append(context.Background(), testRecords(0, 30), nil); err != nil {
		t.Fatal(err)
	}
	opts := fastOptions()
	s, err := NewWithOptions(Config{Config: amqpconn.Config{URL: u}, Exchanges: ex, Format: busmsg.Format{RecordsPerMessage: 1, WLCGOnly: true}}, opts, st, sinktest.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunSink(t, s)
	sinktest.WaitFor(t, "cursor at end", 10*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == sinktest.LastSeq(t, st) })
	sinktest.WaitFor(t, "messages", 5*time.Second, func() bool { return cons.entries(ex.Records)+cons.entries(ex.WLCG) == 30 })
	if got := cons.entries(ex.WLCG); got != 10 {
		t.Fatalf("%d on wlcg, want 10", got)
	}
}

// TestGRACCFlavourGo: with gracc_flavour go and wlcg_only in the
// configuration, the records exchange carries the Go collector's document
// (@timestamp, times in s, every field) and the WLCG-matching records go
// only to the WLCG exchange, as that collector routes them.
func TestGRACCFlavourGo(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	ex := testExchanges(t, u)
	ex.Cache, ex.TPC, ex.Events = "", "", ""
	cons := consume(t, u, ex.Records, ex.WLCG)
	st := sinktest.OpenStore(t)
	if err := st.Append(context.Background(), testRecords(0, 30), nil); err != nil {
		t.Fatal(err)
	}
	opts := fastOptions()
	cfg := Config{Config: amqpconn.Config{URL: u}, Exchanges: ex, Format: busmsg.Format{RecordsPerMessage: 1, GRACCFlavour: record.GRACCGo, WLCGOnly: true}}
	s, err := NewWithOptions(cfg, opts, st, sinktest.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunSink(t, s)
	sinktest.WaitFor(t, "messages", 10*time.Second, func() bool { return cons.entries(ex.Records)+cons.entries(ex.WLCG) == 30 })
	if got := cons.entries(ex.WLCG); got != 10 {
		t.Fatalf("%d on wlcg, want 10", got)
	}
	for _, m := range cons.snapshot() {
		if m.exchange != ex.Records {
			continue
		}
		for _, e := range m.entries {
			var d map[string]any
			if err := json.Unmarshal(e, &d); err != nil {
				t.Fatal(err)
			}
			if _, ok := d["@timestamp"]; !ok || d["site"] == nil || d["dirname1"] == nil || d["HasFileCloseMsg"] != 1.0 {
				t.Fatalf("not the Go collector's document: %s", e)
			}
		}
	}
	if _, err := NewWithOptions(Config{Config: amqpconn.Config{URL: u}, Exchanges: ex, Format: busmsg.Format{GRACCFlavour: "perl"}}, opts, st, nil, nil); err == nil {
		t.Error("an unknown flavour was accepted")
	}
}

// TestCursorMovesOnlyAfterConfirms holds back everything the broker sends
// (so confirms cannot arrive) and checks that messages reach the queue but
// the cursor stays until the confirms are let through.
func TestCursorMovesOnlyAfterConfirms(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	ex := testExchanges(t, u)
	cons := consume(t, u, ex.Records)
	st := sinktest.OpenStore(t)
	px := sinktest.NewProxy(t, brokerAddr(t, u))
	px.Start()

	opts := fastOptions()
	s, err := NewWithOptions(Config{Config: amqpconn.Config{URL: withAddr(t, u, px.Addr())}, Exchanges: Exchanges{Records: ex.Records}, Format: busmsg.Format{RecordsPerMessage: 1}}, opts, st, sinktest.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunSink(t, s)
	// Let it connect, then hold the broker's replies.
	if err := st.Append(context.Background(), testRecords(0, 1), nil); err != nil {
		t.Fatal(err)
	}
	sinktest.WaitFor(t, "first record", 10*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == 1 })
	px.Pause()
	if err := st.Append(context.Background(), testRecords(1, 200), nil); err != nil {
		t.Fatal(err)
	}
	sinktest.WaitFor(t, "messages in the queue", 10*time.Second, func() bool { return cons.entries(ex.Records) == 201 })
	time.Sleep(200 * time.Millisecond) // give a wrong implementation the chance to move
	if c := sinktest.Cursor(t, st, opts.Name); c != 1 {
		t.Fatalf("cursor moved to %d before confirms arrived", c)
	}
	px.Resume()
	sinktest.WaitFor(t, "cursor after confirms", 10*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == 201 })
}

// TestMissingExchange: publishing to an exchange that does not exist fails
// (the broker closes the channel); the cursor stays and the errors are
// counted until the exchange appears.
func TestMissingExchange(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	name := testenv.Uniq("xrdmon-test-missing")
	st := sinktest.OpenStore(t)
	if err := st.Append(context.Background(), testRecords(0, 10), nil); err != nil {
		t.Fatal(err)
	}
	opts := fastOptions()
	reg := prometheus.NewRegistry()
	s, err := NewWithOptions(Config{Config: amqpconn.Config{URL: u}, Exchanges: Exchanges{Records: name}, Format: busmsg.Format{RecordsPerMessage: 1}}, opts, st, sinktest.Discard(), reg)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunSink(t, s)
	sinktest.WaitFor(t, "failed attempts", 10*time.Second, func() bool { return sinktest.SinkCounter(t, reg, "xrdmon_sink_errors_total", opts.Name) >= 2 })
	if c := sinktest.Cursor(t, st, opts.Name); c != 0 {
		t.Fatalf("cursor %d with the exchange missing", c)
	}
	c, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, _ := c.Channel()
	if err := ch.ExchangeDeclare(name, "topic", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.ExchangeDelete(name, false, false)
	sinktest.WaitFor(t, "delivery", 10*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == 10 })
	if got := sinktest.SinkCounter(t, reg, "xrdmon_sink_delivered_total", opts.Name); got != 10 {
		t.Fatalf("delivered_total = %v, want 10", got)
	}
}

// TestOutage: the broker is unreachable at start (nothing listens), then
// reachable through a proxy that is cut twice mid-stream. Every record
// arrives; duplicates (at least once) are counted.
func TestOutage(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	ex := testExchanges(t, u)
	cons := consume(t, u, ex.Records)
	st := sinktest.OpenStore(t)
	px := sinktest.NewProxy(t, brokerAddr(t, u))

	opts := fastOptions()
	opts.BatchSize = 100
	reg := prometheus.NewRegistry()
	s, err := NewWithOptions(Config{Config: amqpconn.Config{URL: withAddr(t, u, px.Addr())}, Exchanges: Exchanges{Records: ex.Records}, Format: busmsg.Format{RecordsPerMessage: 1}}, opts, st, sinktest.Discard(), reg)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunSink(t, s)
	const n = 20000
	if err := st.Append(context.Background(), testRecords(0, n/4), nil); err != nil {
		t.Fatal(err)
	}
	sinktest.WaitFor(t, "failed connects", 10*time.Second, func() bool { return sinktest.SinkCounter(t, reg, "xrdmon_sink_errors_total", opts.Name) >= 2 })
	if c := sinktest.Cursor(t, st, opts.Name); c != 0 {
		t.Fatalf("cursor %d while the broker is unreachable", c)
	}
	px.Start()
	for k := 1; k < 4; k++ {
		if err := st.Append(context.Background(), testRecords(k*n/4, n/4), nil); err != nil {
			t.Fatal(err)
		}
		if k < 3 {
			target := int64(k * n / 4)
			sinktest.WaitFor(t, "progress", 20*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) >= target })
			px.Cut() // mid-stream: a backlog is still being published
			time.Sleep(100 * time.Millisecond)
			px.Start()
		}
	}
	sinktest.WaitFor(t, "cursor at end", 60*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == n })
	sinktest.WaitFor(t, "all messages", 20*time.Second, func() bool { return distinct(cons, ex.Records) == n })
	total := cons.entries(ex.Records)
	t.Logf("outage: %d records, %d messages received, %d duplicates (at least once), %v failed attempts",
		n, total, total-n, sinktest.SinkCounter(t, reg, "xrdmon_sink_errors_total", opts.Name))
}

func distinct(c *consumer, exchange string) int {
	ids := map[string]bool{}
	for _, m := range c.snapshot() {
		if m.exchange == exchange {
			ids[m.id] = true
		}
	}
	return len(ids)
}

// TestBrokerRestart stops the RabbitMQ application for 30 s while records
// are published. It disturbs every other user of the broker, so it runs only
// with XRDMON_TEST_RESTART_SERVICES=1.
func TestBrokerRestart(t *testing.T) {
	if os.Getenv("XRDMON_TEST_RESTART_SERVICES") != "1" {
		t.Skip("restarts the shared broker: set XRDMON_TEST_RESTART_SERVICES=1")
	}
	u := testURL(t)
	st := sinktest.OpenStore(t)
	base := testenv.Uniq("xrdmon-test-restart")
	// Durable exchange and queue, so they survive the restart.
	c, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := c.Channel()
	if err := ch.ExchangeDeclare(base, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(base, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(base, "#", base, false, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	t.Cleanup(func() {
		_ = exec.Command("rabbitmqctl", "start_app").Run()
		if c, err := amqp.Dial(u); err == nil {
			ch, _ := c.Channel()
			_, _ = ch.QueueDelete(base, false, false, false)
			_ = ch.ExchangeDelete(base, false, false)
			c.Close()
		}
	})

	opts := fastOptions()
	opts.MaxBackoff = 2 * time.Second
	s, err := NewWithOptions(Config{Config: amqpconn.Config{URL: u}, Exchanges: Exchanges{Records: base}, Format: busmsg.Format{RecordsPerMessage: 1}}, opts, st, sinktest.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunSink(t, s)
	const n = 50000
	ctx := context.Background()
	go func() {
		for i := 0; i < n; i += 1000 {
			if err := st.Append(ctx, testRecords(i, 1000), nil); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(40 * time.Millisecond)
		}
	}()
	sinktest.WaitFor(t, "progress", 30*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) > 5000 })
	if out, err := exec.Command("rabbitmqctl", "stop_app").CombinedOutput(); err != nil {
		t.Fatalf("stop_app: %v\n%s", err, out)
	}
	time.Sleep(30 * time.Second)
	if out, err := exec.Command("rabbitmqctl", "start_app").CombinedOutput(); err != nil {
		t.Fatalf("start_app: %v\n%s", err, out)
	}
	sinktest.WaitFor(t, "cursor at end", 120*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == n })
	// Drain the durable queue and count.
	c, err = amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, _ = c.Channel()
	d, err := ch.Consume(base, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	total := 0
	timeout := time.After(60 * time.Second)
	for len(ids) < n {
		select {
		case m := <-d:
			ids[m.MessageId]++
			total++
		case <-timeout:
			t.Fatalf("only %d of %d records arrived", len(ids), n)
		}
	}
	t.Logf("broker restart: %d records, %d messages, %d duplicates", n, total, total-n)
}
