package postgres

import (
	"context"
	"crypto/rand"
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

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testURL returns the database URL, skipping (or failing under CI=true)
// when PostgreSQL does not answer.
func testURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("XRDMON_TEST_PG_URL")
	if u == "" {
		u = "postgres://postgres@127.0.0.1:5432/test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("PostgreSQL at %s does not answer: %v", u, err)
		}
		tb.Skipf("PostgreSQL at %s does not answer (set XRDMON_TEST_PG_URL): %v", u, err)
	}
	c.Close(ctx)
	return u
}

// testSchema returns a unique schema name, dropped at cleanup.
func testSchema(tb testing.TB, u string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("xrdmon_test_%x", b)
	tb.Cleanup(func() {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	})
	return name
}

// query runs a one-value query on a fresh connection.
func query[T any](tb testing.TB, u, q string, args ...any) T {
	tb.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close(ctx)
	var v T
	if err := c.QueryRow(ctx, q, args...).Scan(&v); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
	return v
}

// withAddr returns u pointing at addr instead.
func withAddr(tb testing.TB, u, addr string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		tb.Fatal(err)
	}
	h, p, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("postgres://%s@%s:%s/%s?sslmode=disable", cfg.User, h, p, cfg.Database)
}

func dbAddr(tb testing.TB, u string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		tb.Fatal(err)
	}
	return net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
}

// testRecord is record i; its End is t0 + i minutes, so records spread
// over days.
func testRecord(i int) record.Record {
	return record.Record{
		RecordID:   fmt.Sprintf("%032x", uint64(i+1)*0x9e3779b97f4a7c15),
		Start:      t0.Add(time.Duration(i)*time.Minute - 90*time.Second),
		End:        t0.Add(time.Duration(i) * time.Minute),
		Received:   t0.Add(time.Duration(i)*time.Minute + 2*time.Second),
		ServerIP:   fmt.Sprintf("192.0.2.%d", i%8),
		ServerHost: fmt.Sprintf("xrootd%d.example.org", i%8),
		ServerID:   uint64(0xabcdef000000 + i%8),
		ServerStod: 1767225600,
		Site:       "T2_US_UCSD",
		Protocol:   "xroot",
		User:       fmt.Sprintf("user%d", i%50),
		ClientHost: "worker-17.example.edu",
		DN:         "/DC=org/DC=example/OU=People/CN=Some User 12345",
		VO:         "cms",
		AppInfo:    "crab:250301_120000:someuser_task",
		FileID:     uint32(i),
		Path:       fmt.Sprintf("/store/data/file%d.root", i),
		FileSize:   2_000_000_000 + int64(i),
		ReadBytes:  int64(i) * 1000,
		ReadvBytes: 12345,
		HasOps:     true,
		ReadOps:    42,
		ReadvOps:   7,
		ReadvSegs:  120,
		ReadMin:    1024,
		ReadMax:    1 << 20,
	}
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
func fastOptions(schema string) Options {
	o := DefaultOptions()
	o.Name = "pg-" + schema
	o.Schema = schema
	o.PollInterval = 10 * time.Millisecond
	o.MinBackoff = 20 * time.Millisecond
	o.MaxBackoff = 200 * time.Millisecond
	o.ConnectTimeout = 2 * time.Second
	return o
}

func newSink(tb testing.TB, u string, opts Options, st *store.Store) *Sink {
	tb.Helper()
	s, err := NewWithOptions(config.PostgresOutput{Enabled: true, URL: u}, opts, st, discard(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return s
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
