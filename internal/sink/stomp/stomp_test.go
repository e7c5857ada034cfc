package stomp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/stompconn"
	"github.com/xrdmon/xrdmon/internal/testenv"
	"github.com/xrdmon/xrdmon/internal/units"
)

// broker is a STOMP broker under test.
type broker struct {
	name string
	conn stompconn.Config
	// cleanup deletes a queue left on a shared broker (RabbitMQ).
	cleanup func(dest string)
}

// TestSTOMP runs the sink against both brokers: RabbitMQ's STOMP plugin
// (shared: unique destinations) and an ActiveMQ the test starts, which it
// also kills and starts again while records are sent.
func TestSTOMP(t *testing.T) {
	t.Run("rabbitmq", func(t *testing.T) {
		u, user, pf := testenv.RabbitSTOMP(t)
		amqpURL := testenv.AMQPURL(t)
		b := broker{name: "rabbitmq", conn: stompconn.Config{URL: u, User: user, PasswordFile: pf, VHost: "/", Heartbeat: units.Duration(time.Second)},
			cleanup: func(dest string) { deleteRabbitQueue(amqpURL, dest) }}
		t.Run("Send", func(t *testing.T) { testSend(t, b, 1) })
		t.Run("SendPacked", func(t *testing.T) { testSend(t, b, 7) })
		t.Run("GoFlavourWLCGOnly", func(t *testing.T) { testGoFlavourWLCGOnly(t, b) })
		t.Run("Refused", func(t *testing.T) { testRefused(t, b) })
	})
	t.Run("activemq", func(t *testing.T) {
		a := testenv.StartActiveMQ(t, true)
		b := broker{name: "activemq", conn: stompconn.Config{URL: a.URL, Heartbeat: units.Duration(time.Second)}}
		t.Run("Send", func(t *testing.T) { testSend(t, b, 1) })
		t.Run("GoFlavourWLCGOnly", func(t *testing.T) { testGoFlavourWLCGOnly(t, b) })
		t.Run("Refused", func(t *testing.T) { testRefused(t, b) })
		t.Run("TLSClientCertificate", func(t *testing.T) {
			c := a.Certs
			tb := broker{name: "activemq-tls", conn: stompconn.Config{URL: a.TLSURL, Heartbeat: units.Duration(time.Second),
				TLS: amqpconn.TLS{CA: c.CA, Cert: c.ClientCert, Key: c.ClientKey}}}
			testSend(t, tb, 1)
		})
		t.Run("BrokerKilled", func(t *testing.T) { testBrokerKilled(t, a, b) })
	})
}

func deleteRabbitQueue(amqpURL, dest string) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return
	}
	defer conn.Close()
	if ch, err := conn.Channel(); err == nil {
		_, _ = ch.QueueDelete(strings.TrimPrefix(dest, "/queue/"), false, false, false)
	}
}

func uniqueQueue(t *testing.T, b broker, what string) string {
	dest := "/queue/" + testenv.Uniq("xrdmon-test-stomp-"+what)
	if b.cleanup != nil {
		t.Cleanup(func() { b.cleanup(dest) })
	}
	return dest
}

// msg is one message received, split into its entries.
type msg struct {
	dest, typ, id, persistent, contentType string
	entries                                []json.RawMessage
}

// consumer collects what arrives on a set of destinations.
type consumer struct {
	mu   sync.Mutex
	msgs []msg
}

func consume(t *testing.T, b broker, dests ...string) *consumer {
	t.Helper()
	d, err := stompconn.NewDialer(b.conn, stompconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := d.Dial(context.Background())
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	t.Cleanup(func() { _ = conn.Disconnect() })
	c := &consumer{}
	for _, dest := range dests {
		sub, err := conn.Subscribe(dest, stomp.AckAuto)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for m := range sub.C {
				if m.Err != nil {
					return
				}
				var ents []json.RawMessage
				if len(m.Body) > 0 && m.Body[0] == '[' {
					if err := json.Unmarshal(m.Body, &ents); err != nil {
						panic(err)
					}
				} else {
					ents = []json.RawMessage{m.Body}
				}
				c.mu.Lock()
				c.msgs = append(c.msgs, msg{dest, m.Header.Get("xrdmon-type"), m.Header.Get("xrdmon-id"),
					m.Header.Get("persistent"), m.ContentType, ents})
				c.mu.Unlock()
			}
		}()
	}
	return c
}

func (c *consumer) entries(dest string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.msgs {
		if m.dest == dest {
			n += len(m.entries)
		}
	}
	return n
}

// distinct returns the number of distinct entry ids received on dest
// (delivery is at least once: a batch sent again after a failed COMMIT
// comes twice).
func (c *consumer) distinct(dest string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := map[string]bool{}
	for _, m := range c.msgs {
		if m.dest == dest {
			for _, e := range m.entries {
				ids[string(e)] = true
			}
		}
	}
	return len(ids)
}

func (c *consumer) snapshot() []msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]msg(nil), c.msgs...)
}

// testRecord is record i; every third one is a CMS /store read (WLCG),
// the others OSG reads.
func testRecord(i int) record.Record {
	r := sinktest.Record(i, time.Second)
	if i%3 != 0 {
		r.VO, r.Path = "osg", fmt.Sprintf("/ospool/data/file%d.root", i)
	}
	return r
}

func testRecords(from, n int) []record.Record { return sinktest.Records(from, n, testRecord) }

func fastOptions() Options {
	o := DefaultOptions()
	o.Name = testenv.Uniq("stomp")
	o.PollInterval = 10 * time.Millisecond
	o.MinBackoff = 20 * time.Millisecond
	o.MaxBackoff = 500 * time.Millisecond
	o.DialTimeout = 2 * time.Second
	o.AckTimeout = 20 * time.Second
	return o
}

// testSend: every record reaches the records destination in the GRACC
// format, the WLCG ones the WLCG destination in the WLCG format, the events
// the events destination, as persistent messages with their ids; the
// cursor ends at the end of the log.
func testSend(t *testing.T, b broker, perMsg int) {
	d := Destinations{WLCG: uniqueQueue(t, b, "wlcg"), Records: uniqueQueue(t, b, "records"), Events: uniqueQueue(t, b, "events")}
	cons := consume(t, b, d.WLCG, d.Records, d.Events)
	st := sinktest.OpenStore(t)
	const n = 2500
	recs := testRecords(0, n)
	evs := []record.Event{sinktest.Event(1, record.EventCacheFileClose), sinktest.Event(2, record.EventTPC), sinktest.Event(3, record.EventThrottle)}
	ctx := context.Background()
	if err := st.Append(ctx, recs[:1000], evs); err != nil {
		t.Fatal(err)
	}
	opts := fastOptions()
	opts.BatchSize = 300
	cfg := DefaultConfig()
	cfg.Config, cfg.Destinations, cfg.RecordsPerMessage = b.conn, d, perMsg
	s, err := NewWithOptions(cfg, opts, st, sinktest.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sinktest.RunSink(t, s)
	if err := st.Append(ctx, recs[1000:], nil); err != nil {
		t.Fatal(err)
	}
	nWLCG := (n + 2) / 3
	deadline := time.Now().Add(60 * time.Second)
	for cons.distinct(d.Records) != n || cons.distinct(d.WLCG) != nWLCG || cons.distinct(d.Events) != len(evs) {
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: %d of %d GRACC, %d of %d WLCG, %d of %d events received; cursor %d of %d",
				cons.distinct(d.Records), n, cons.distinct(d.WLCG), nWLCG, cons.distinct(d.Events), len(evs),
				sinktest.Cursor(t, st, opts.Name), sinktest.LastSeq(t, st))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%s: %d records (%d messages of %d) in %v; %d duplicates", b.name, n, n+nWLCG, perMsg, time.Since(start),
		cons.entries(d.Records)+cons.entries(d.WLCG)-n-nWLCG)
	sinktest.WaitFor(t, "cursor at end", 10*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == sinktest.LastSeq(t, st) })

	wantGRACC, wantWLCG := map[string]string{}, map[string]string{}
	for i := range recs {
		wantGRACC[string(record.AppendGRACC(nil, &recs[i]))] = recs[i].RecordID
		if i%3 == 0 {
			wantWLCG[string(record.AppendWLCG(nil, &recs[i]))] = recs[i].RecordID
		}
	}
	seen := map[string]bool{}
	for _, m := range cons.snapshot() {
		if m.persistent != "true" && b.name != "rabbitmq" { // RabbitMQ keeps it as the delivery mode, not a header
			t.Fatalf("message on %s: persistent %q", m.dest, m.persistent)
		}
		if m.contentType != "application/json" {
			t.Fatalf("message on %s: content type %q", m.dest, m.contentType)
		}
		if len(m.entries) > perMsg {
			t.Fatalf("message on %s has %d entries, per message %d", m.dest, len(m.entries), perMsg)
		}
		switch m.dest {
		case d.Records, d.WLCG:
			want, typ := wantGRACC, "gracc"
			if m.dest == d.WLCG {
				want, typ = wantWLCG, "wlcg"
			}
			if m.typ != typ {
				t.Errorf("xrdmon-type %q on %s", m.typ, m.dest)
			}
			for j, e := range m.entries {
				id, ok := want[string(e)]
				if !ok {
					t.Fatalf("unexpected body on %s: %s", m.dest, e)
				}
				if j == 0 && m.id != id {
					t.Errorf("xrdmon-id %q, want %q", m.id, id)
				}
				seen[m.dest+id] = true
			}
		case d.Events:
			var ev record.Event
			if err := json.Unmarshal(m.entries[0], &ev); err != nil {
				t.Fatal(err)
			}
			if m.typ != string(ev.Type) || m.id != ev.EventID {
				t.Errorf("event %s: type %q id %q", ev.Type, m.typ, m.id)
			}
		}
	}
	if len(seen) != n+nWLCG {
		t.Fatalf("%d distinct records, want %d", len(seen), n+nWLCG)
	}
}

// testGoFlavourWLCGOnly: with gracc_flavour go the records destination
// gets the shoveler collector's document (record.AppendGRACCGo), and with
// wlcg_only a record matching the WLCG rules goes to the WLCG destination
// only, as the OSG collectors route it: each record arrives exactly once,
// on one destination, in its format.
func testGoFlavourWLCGOnly(t *testing.T, b broker) {
	d := Destinations{WLCG: uniqueQueue(t, b, "wlcg"), Records: uniqueQueue(t, b, "records")}
	cons := consume(t, b, d.WLCG, d.Records)
	st := sinktest.OpenStore(t)
	const n = 300
	recs := testRecords(0, n)
	if err := st.Append(context.Background(), recs, nil); err != nil {
		t.Fatal(err)
	}
	opts := fastOptions()
	cfg := DefaultConfig()
	cfg.Config, cfg.Destinations, cfg.GRACCFlavour, cfg.WLCGOnly = b.conn, d, record.GRACCGo, true
	s, err := NewWithOptions(cfg, opts, st, sinktest.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunSink(t, s)
	nWLCG := (n + 2) / 3
	sinktest.WaitFor(t, "every record on one destination", 60*time.Second, func() bool {
		return cons.distinct(d.WLCG) == nWLCG && cons.distinct(d.Records) == n-nWLCG
	})
	sinktest.WaitFor(t, "cursor at end", 10*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == sinktest.LastSeq(t, st) })
	want := map[string]string{} // body -> destination
	for i := range recs {
		if i%3 == 0 {
			want[string(record.AppendWLCG(nil, &recs[i]))] = d.WLCG
		} else {
			want[string(record.AppendGRACCGo(nil, &recs[i]))] = d.Records
		}
	}
	for _, m := range cons.snapshot() {
		for _, e := range m.entries {
			if dest, ok := want[string(e)]; !ok || dest != m.dest {
				t.Fatalf("on %s, expected on %q: %.300s", m.dest, dest, e)
			}
		}
	}
	if cons.entries(d.Records) > n-nWLCG+opts.BatchSize {
		t.Errorf("%d GRACC entries for %d records", cons.entries(d.Records), n-nWLCG)
	}
}

// testRefused: a record whose message is over max_message_bytes is set
// aside as a dead letter; the others are sent and the cursor moves on.
func testRefused(t *testing.T, b broker) {
	dest := uniqueQueue(t, b, "refused")
	cons := consume(t, b, dest)
	st := sinktest.OpenStore(t)
	recs := testRecords(0, 200)
	recs[77].Path = "/store/" + strings.Repeat("x", 8000)
	if err := st.Append(context.Background(), recs, nil); err != nil {
		t.Fatal(err)
	}
	opts := fastOptions()
	opts.BatchSize = 64
	cfg := DefaultConfig()
	cfg.Config, cfg.Destinations.Records, cfg.MaxMessageBytes = b.conn, dest, 4096
	reg := prometheus.NewRegistry()
	s, err := NewWithOptions(cfg, opts, st, sinktest.Discard(), reg)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunSink(t, s)
	sinktest.WaitFor(t, "cursor at end", 30*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == sinktest.LastSeq(t, st) })
	sinktest.WaitFor(t, "the others", 30*time.Second, func() bool { return cons.distinct(dest) == 199 })
	dl, err := st.DeadLetters(context.Background(), opts.Name, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != 1 || dl[0].EntryID != recs[77].RecordID || !strings.Contains(dl[0].Error, "max_message_bytes") {
		t.Fatalf("dead letters %+v, want record 77", dl)
	}
	for _, m := range cons.snapshot() {
		if m.id == recs[77].RecordID {
			t.Fatal("the refused record was sent")
		}
	}
}

// TestRefusedMessage: an ERROR frame about a message's size is a refusal;
// other errors are outages.
func TestRefusedMessage(t *testing.T) {
	for msg, want := range map[string]bool{
		"Frame size of 120 MB larger than max allowed 100 MB": true,
		"message size exceeds max_frame_size":                 true,
		"User name [x] or password is invalid.":               false,
		"connection closed unexpectedly":                      false,
	} {
		if got := refusedMessage(msg); got != want {
			t.Errorf("%q: refused %v, want %v", msg, got, want)
		}
	}
	_ = deliver.ErrRefused
}

// testBrokerKilled: ActiveMQ is killed (SIGKILL) twice while records are
// sent, and started again; every record reaches the queue, none is lost:
// the cursor moved only past transactions whose COMMIT had a receipt,
// which ActiveMQ gives after storing them.
func testBrokerKilled(t *testing.T, a *testenv.ActiveMQ, b broker) {
	dest := uniqueQueue(t, b, "killed")
	st := sinktest.OpenStore(t)
	opts := fastOptions()
	opts.BatchSize = 200
	cfg := DefaultConfig()
	cfg.Config, cfg.Destinations.Records = b.conn, dest
	s, err := NewWithOptions(cfg, opts, st, sinktest.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunSink(t, s)
	const n = 20000
	ctx := context.Background()
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		for i := 0; i < n; i += 500 {
			if err := st.Append(ctx, testRecords(i, 500), nil); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for k := 1; k <= 2; k++ {
		target := int64(k * n / 4)
		sinktest.WaitFor(t, "progress", 60*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) >= target })
		a.Kill()
		time.Sleep(time.Second)
		a.Start()
	}
	<-appended
	sinktest.WaitFor(t, "cursor at end", 120*time.Second, func() bool { return sinktest.Cursor(t, st, opts.Name) == n })
	cons := consume(t, b, dest)
	ids := map[string]int{}
	sinktest.WaitFor(t, "every record on the queue", 60*time.Second, func() bool {
		clear(ids)
		for _, m := range cons.snapshot() {
			ids[m.id]++
		}
		return len(ids) == n
	})
	total := 0
	for _, c := range ids {
		total += c
	}
	t.Logf("broker killed twice: %d records, %d messages, %d duplicates", n, total, total-n)
}
