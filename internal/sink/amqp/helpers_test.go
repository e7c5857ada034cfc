package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testURL returns the broker URL, skipping (or failing under CI=true) when
// the broker does not answer.
func testURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("XRDMON_TEST_AMQP_URL")
	if u == "" {
		u = "amqp://guest:guest@127.0.0.1:5672/"
	}
	c, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("RabbitMQ at %s does not answer: %v", u, err)
		}
		tb.Skipf("RabbitMQ at %s does not answer (set XRDMON_TEST_AMQP_URL): %v", u, err)
	}
	c.Close()
	return u
}

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

func uniq(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// testExchanges returns unique exchange names for one test, declared on the
// broker and deleted at cleanup.
func testExchanges(tb testing.TB, u string) config.Exchanges {
	tb.Helper()
	base := uniq("xrdmon-test")
	e := config.Exchanges{
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

func exchangeNames(e config.Exchanges) []string {
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

// waitFor polls cond until it holds or the deadline passes.
func waitFor(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openStore opens a store in a temp dir.
func openStore(tb testing.TB) *store.Store {
	tb.Helper()
	o := store.DefaultOptions()
	o.Path = filepath.Join(tb.TempDir(), "store.db")
	o.Retention, o.MaxBytes = 0, 0
	o.Synchronous = store.SyncNormal
	st, err := store.Open(o, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// testRecord is record i; every third one is a CMS /store read (WLCG).
func testRecord(i int) record.Record {
	r := record.Record{
		RecordID:   fmt.Sprintf("%032x", uint64(i+1)*0x9e3779b97f4a7c15),
		Start:      t0.Add(time.Duration(i)*time.Second - 90*time.Second),
		End:        t0.Add(time.Duration(i) * time.Second),
		Received:   t0.Add(time.Duration(i)*time.Second + 2*time.Second),
		ServerIP:   fmt.Sprintf("192.0.2.%d", i%8),
		ServerHost: fmt.Sprintf("xrootd%d.example.org", i%8),
		ServerID:   uint64(0xabcdef000000 + i%8),
		ServerStod: 1767225600,
		Site:       "T2_US_UCSD",
		Protocol:   "xroot",
		User:       fmt.Sprintf("user%d", i%50),
		ClientHost: "worker-17.example.edu",
		DN:         "/DC=org/DC=example/OU=People/CN=Some User 12345",
		VO:         "osg",
		FileID:     uint32(i),
		Path:       fmt.Sprintf("/ospool/data/file%d.root", i),
		FileSize:   2_000_000_000 + int64(i),
		ReadBytes:  int64(i) * 1000,
		HasOps:     true,
		ReadOps:    42,
		ReadMin:    1024,
		ReadMax:    1 << 20,
	}
	if i%3 == 0 {
		r.VO, r.Path = "cms", fmt.Sprintf("/store/data/file%d.root", i)
	}
	return r
}

func testRecords(from, n int) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		out[i] = testRecord(from + i)
	}
	return out
}

func testEvent(i int, typ record.EventType) record.Event {
	return record.Event{
		EventID:  fmt.Sprintf("e%031x", i+1),
		Type:     typ,
		Provider: "C",
		Time:     t0.Add(time.Duration(i) * time.Second),
		Received: t0.Add(time.Duration(i)*time.Second + time.Second),
		ServerIP: "192.0.2.1",
		Data:     json.RawMessage(fmt.Sprintf(`{"lfn":"/store/f%d","size":1000}`, i)),
		Valid:    true,
	}
}

// fastOptions make retries quick for tests.
func fastOptions() Options {
	o := DefaultOptions()
	o.Name = uniq("amqp")
	o.PollInterval = 10 * time.Millisecond
	o.MinBackoff = 20 * time.Millisecond
	o.MaxBackoff = 200 * time.Millisecond
	o.DialTimeout = 2 * time.Second
	o.ConfirmTimeout = 20 * time.Second
	return o
}

// runSink starts s.Run; the returned stop cancels it and waits.
func runSink(tb testing.TB, s *Sink) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("run: %v", err)
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}

func cursor(tb testing.TB, st *store.Store, name string) int64 {
	c, err := st.Cursor(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func lastSeq(tb testing.TB, st *store.Store) int64 {
	c, err := st.LastSeq(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// freeAddr returns a loopback address where nothing listens (now).
func freeAddr(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// proxy is a loopback TCP proxy to target that can be started, cut
// (listener and every connection closed) and paused (bytes from the target
// are held back, not dropped).
type proxy struct {
	tb     testing.TB
	addr   string
	target string

	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	gate   chan struct{} // closed when not paused
	accept sync.WaitGroup
}

func newProxy(tb testing.TB, addr, target string) *proxy {
	p := &proxy{tb: tb, addr: addr, target: target, gate: make(chan struct{})}
	close(p.gate)
	tb.Cleanup(p.cut)
	return p
}

func (p *proxy) start() {
	p.tb.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		p.tb.Fatalf("proxy listen %s: %v", p.addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.accept.Add(1)
	go func() {
		defer p.accept.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close(); c.Close() }()
			go func() { p.copyGated(c, s); s.Close(); c.Close() }()
		}
	}()
}

// copyGated copies target -> client, holding bytes while paused.
func (p *proxy) copyGated(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			g := p.gate
			p.mu.Unlock()
			<-g
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
}

func (p *proxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// cut closes the listener and every proxied connection.
func (p *proxy) cut() {
	p.resume()
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.accept.Wait()
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// sinkCounter returns the counter metric labelled sink=name gathered from
// reg, or 0 when it is not there yet.
func sinkCounter(tb testing.TB, reg prometheus.Gatherer, metric, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "sink" && lp.GetValue() == name {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
