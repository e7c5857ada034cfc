package dnscache

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testDNS is a DNS server on loopback answering PTR queries from a table.
type testDNS struct {
	addr    string
	names   map[string]string // reverse name -> PTR target; "" means NXDOMAIN
	slow    map[string]bool   // reverse names answered only when release is closed
	gate    chan struct{}     // queries for gated names wait for this
	gated   map[string]bool
	release chan struct{}
	mu      sync.Mutex
	queries map[string]int
	total   atomic.Int64
}

func newTestDNS(t *testing.T) *testDNS {
	t.Helper()
	s := &testDNS{
		names:   map[string]string{},
		slow:    map[string]bool{},
		gated:   map[string]bool{},
		gate:    make(chan struct{}),
		release: make(chan struct{}),
		queries: map[string]int{},
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s.addr = pc.LocalAddr().String()
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(s.serve), NotifyStartedFunc: func() { close(started) }}
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() {
		close(s.release)
		_ = srv.Shutdown()
	})
	return s
}

// set configures the answer for ip: a name, or "" for NXDOMAIN.
func (s *testDNS) set(t *testing.T, ip, name string) string {
	t.Helper()
	rev, err := dns.ReverseAddr(ip)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.names[rev] = name
	s.mu.Unlock()
	return rev
}

func (s *testDNS) count(rev string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[rev]
}

func (s *testDNS) serve(w dns.ResponseWriter, r *dns.Msg) {
	s.total.Add(1)
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	if len(r.Question) != 1 || r.Question[0].Qtype != dns.TypePTR {
		m.SetRcode(r, dns.RcodeRefused)
		_ = w.WriteMsg(m)
		return
	}
	q := strings.ToLower(r.Question[0].Name)
	s.mu.Lock()
	s.queries[q]++
	name, known := s.names[q]
	slow, gated := s.slow[q], s.gated[q]
	s.mu.Unlock()
	if slow {
		<-s.release
		return // never answer: the client times out
	}
	if gated {
		<-s.gate
	}
	if !known || name == "" {
		m.SetRcode(r, dns.RcodeNameError)
		m.Authoritative = true
		_ = w.WriteMsg(m)
		return
	}
	m.Answer = append(m.Answer, &dns.PTR{
		Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 3600},
		Ptr: name,
	})
	_ = w.WriteMsg(m)
}

func startCache(t *testing.T, opts Options) (*Cache, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := New(opts, nil, reg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c, reg
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// Addresses from documentation ranges, so /etc/hosts never answers for them.
func TestPTRAgainstDNSServer(t *testing.T) {
	srv := newTestDNS(t)
	rev1 := srv.set(t, "192.0.2.1", "Host-One.Example.org.")
	rev6 := srv.set(t, "2001:db8::1", "v6.example.org.")
	revNX := srv.set(t, "192.0.2.2", "")
	c, _ := startCache(t, Options{Server: srv.addr, Timeout: 10 * time.Second})
	ctx := context.Background()

	if name, ok := c.Lookup(ip("192.0.2.1")); ok || name != "" {
		t.Fatalf("first Lookup = %q, %v; want a miss", name, ok)
	}
	if got := c.Wait(ctx, ip("192.0.2.1"), time.Minute); got != "host-one.example.org" {
		t.Errorf("Wait = %q, want host-one.example.org (lower case, no dot)", got)
	}
	// The lookup the first Lookup queued may end before Wait looks: then
	// Wait is answered from the cache. Count the hits from here on.
	hits0 := testutil.ToFloat64(c.hits)
	if hits0 > 1 {
		t.Errorf("hits after the first Wait = %v, want 0 or 1", hits0)
	}
	if name, ok := c.Lookup(ip("192.0.2.1")); !ok || name != "host-one.example.org" {
		t.Errorf("Lookup after resolve = %q, %v", name, ok)
	}
	// An IPv4-mapped IPv6 address is the same entry.
	if name, ok := c.Lookup(ip("::ffff:192.0.2.1")); !ok || name != "host-one.example.org" {
		t.Errorf("Lookup(::ffff:192.0.2.1) = %q, %v", name, ok)
	}
	if got := c.Wait(ctx, ip("2001:db8::1"), time.Minute); got != "v6.example.org" {
		t.Errorf("Wait(2001:db8::1) = %q", got)
	}
	// NXDOMAIN: Wait gives the address text, Lookup a cached failure.
	if got := c.Wait(ctx, ip("192.0.2.2"), time.Minute); got != "192.0.2.2" {
		t.Errorf("Wait(NXDOMAIN) = %q, want the address", got)
	}
	if name, ok := c.Lookup(ip("192.0.2.2")); !ok || name != "" {
		t.Errorf("Lookup(NXDOMAIN) = %q, %v; want \"\", true", name, ok)
	}
	if got := c.Wait(ctx, ip("192.0.2.2"), time.Minute); got != "192.0.2.2" {
		t.Errorf("second Wait(NXDOMAIN) = %q", got)
	}
	for _, rev := range []string{rev1, rev6, revNX} {
		if n := srv.count(rev); n != 1 {
			t.Errorf("%s queried %d times, want 1 (cached)", rev, n)
		}
	}
	if v := testutil.ToFloat64(c.lookups[resultOK]); v != 2 {
		t.Errorf("lookups{ok} = %v, want 2", v)
	}
	if v := testutil.ToFloat64(c.lookups[resultNotFound]); v != 1 {
		t.Errorf("lookups{not_found} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(c.hits) - hits0; v != 4 {
		t.Errorf("hits after the first Wait = %v, want 4", v)
	}
	if c.Len() != 3 {
		t.Errorf("Len = %d, want 3", c.Len())
	}
}

func TestTimeoutAgainstSlowServer(t *testing.T) {
	srv := newTestDNS(t)
	rev := srv.set(t, "192.0.2.9", "slow.example.org.")
	srv.mu.Lock()
	srv.slow[rev] = true
	srv.mu.Unlock()
	c, _ := startCache(t, Options{Server: srv.addr, Timeout: 100 * time.Millisecond, NegativeTTL: time.Hour})
	// The lookup times out, so Wait gives the address, however long it may wait.
	if got := c.Wait(context.Background(), ip("192.0.2.9"), time.Minute); got != "192.0.2.9" {
		t.Errorf("Wait = %q, want the address", got)
	}
	if v := testutil.ToFloat64(c.lookups[resultTimeout]); v != 1 {
		t.Errorf("lookups{timeout} = %v, want 1", v)
	}
	if name, ok := c.Lookup(ip("192.0.2.9")); !ok || name != "" {
		t.Errorf("Lookup after timeout = %q, %v; want a cached failure", name, ok)
	}
}

func TestSingleFlight(t *testing.T) {
	srv := newTestDNS(t)
	rev := srv.set(t, "198.51.100.7", "once.example.org.")
	srv.mu.Lock()
	srv.gated[rev] = true
	srv.mu.Unlock()
	c, _ := startCache(t, Options{Server: srv.addr, Timeout: 30 * time.Second})

	var wg sync.WaitGroup
	results := make([]string, 20)
	for i := range results {
		wg.Go(func() {
			c.Lookup(ip("198.51.100.7"))
			results[i] = c.Wait(context.Background(), ip("198.51.100.7"), time.Minute)
		})
	}
	// Let every goroutine reach Wait before the answer is released: the
	// waits counter only moves when a Wait returns, so poll the misses.
	for testutil.ToFloat64(c.misses) < 40 {
		time.Sleep(time.Millisecond)
	}
	close(srv.gate)
	wg.Wait()
	for i, r := range results {
		if r != "once.example.org" {
			t.Errorf("waiter %d got %q", i, r)
		}
	}
	if n := srv.count(rev); n != 1 {
		t.Errorf("server saw %d queries, want 1", n)
	}
	if v := testutil.ToFloat64(c.waits[waitResolved]); v != 20 {
		t.Errorf("waits{resolved} = %v, want 20", v)
	}
}

// fakeResolver answers from a table and counts calls; if block is not nil,
// each call first reports on started and waits for block.
type fakeResolver struct {
	mu      sync.Mutex
	names   map[string]string // "" means not found
	calls   map[string]int
	started chan string
	block   chan struct{}
}

func newFake() *fakeResolver {
	return &fakeResolver{names: map[string]string{}, calls: map[string]int{}}
}

func (f *fakeResolver) LookupAddr(ctx context.Context, addr string) ([]string, error) {
	f.mu.Lock()
	f.calls[addr]++
	name := f.names[addr]
	f.mu.Unlock()
	if f.started != nil {
		f.started <- addr
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if name == "" {
		return nil, &net.DNSError{Err: "no such host", Name: addr, IsNotFound: true}
	}
	return []string{name + "."}, nil
}

func (f *fakeResolver) count(addr string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[addr]
}

func TestQueueFullDrops(t *testing.T) {
	f := newFake()
	f.started = make(chan string, 10)
	f.block = make(chan struct{})
	c, _ := startCache(t, Options{Resolver: f, Workers: 1, QueueSize: 1})
	c.Lookup(ip("192.0.2.1")) // taken by the only worker
	<-f.started
	c.Lookup(ip("192.0.2.2")) // fills the queue
	c.Lookup(ip("192.0.2.3")) // dropped
	if v := testutil.ToFloat64(c.dropped); v != 1 {
		t.Errorf("dropped = %v, want 1", v)
	}
	if got := c.Wait(context.Background(), ip("192.0.2.4"), time.Hour); got != "192.0.2.4" {
		t.Errorf("Wait on a full queue = %q, want the address at once", got)
	}
	if v := testutil.ToFloat64(c.dropped); v != 2 {
		t.Errorf("dropped = %v, want 2", v)
	}
	close(f.block)
	<-f.started // 192.0.2.2 from the queue
	// A dropped address is retried by a later Lookup.
	if got := c.Wait(context.Background(), ip("192.0.2.3"), time.Minute); got != "192.0.2.3" {
		t.Errorf("Wait = %q", got)
	}
	if n := f.count("192.0.2.3"); n != 1 {
		t.Errorf("192.0.2.3 resolved %d times after the drop, want 1", n)
	}
}

func TestLRUEviction(t *testing.T) {
	f := newFake()
	for _, a := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		f.names[a] = "h" + a[len(a)-1:] + ".example.org"
	}
	c, _ := startCache(t, Options{Resolver: f, Size: 2})
	ctx := context.Background()
	c.Wait(ctx, ip("192.0.2.1"), time.Minute)
	c.Wait(ctx, ip("192.0.2.2"), time.Minute)
	c.Lookup(ip("192.0.2.1"))                 // 192.0.2.1 is now most recently used
	c.Wait(ctx, ip("192.0.2.3"), time.Minute) // evicts 192.0.2.2
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2", c.Len())
	}
	if _, ok := c.Lookup(ip("192.0.2.1")); !ok {
		t.Error("192.0.2.1 was evicted, want 192.0.2.2 evicted")
	}
	if _, ok := c.Lookup(ip("192.0.2.2")); ok {
		t.Error("192.0.2.2 still cached")
	}
}

func TestTTLExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.names["192.0.2.1"] = "a.example.org"
		c := New(Options{Resolver: f, TTL: time.Hour, NegativeTTL: time.Minute}, nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(ctx) }()

		c.Lookup(ip("192.0.2.1"))
		c.Lookup(ip("192.0.2.2")) // not found
		synctest.Wait()
		if name, ok := c.Lookup(ip("192.0.2.1")); !ok || name != "a.example.org" {
			t.Fatalf("Lookup = %q, %v", name, ok)
		}
		if name, ok := c.Lookup(ip("192.0.2.2")); !ok || name != "" {
			t.Fatalf("negative Lookup = %q, %v", name, ok)
		}

		time.Sleep(time.Minute + time.Second) // negative TTL passed, TTL not
		if _, ok := c.Lookup(ip("192.0.2.1")); !ok {
			t.Error("name expired before its TTL")
		}
		if _, ok := c.Lookup(ip("192.0.2.2")); ok {
			t.Error("failure still cached after the negative TTL")
		}
		synctest.Wait()
		if n := f.count("192.0.2.2"); n != 2 {
			t.Errorf("192.0.2.2 resolved %d times, want 2", n)
		}

		time.Sleep(time.Hour) // TTL passed
		if _, ok := c.Lookup(ip("192.0.2.1")); ok {
			t.Error("name still cached after its TTL")
		}
		if got := c.Wait(ctx, ip("192.0.2.1"), time.Second); got != "a.example.org" {
			t.Errorf("Wait after refresh = %q", got)
		}
		if n := f.count("192.0.2.1"); n != 2 {
			t.Errorf("192.0.2.1 resolved %d times, want 2", n)
		}
		cancel()
		<-done
	})
}

func TestWaitAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.names["192.0.2.1"] = "a.example.org"
		c := New(Options{Resolver: f}, nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := c.Run(ctx); err != nil {
			t.Fatal(err)
		}
		// No workers: Wait gives up after maxWait with the address.
		if got := c.Wait(t.Context(), ip("192.0.2.1"), time.Second); got != "192.0.2.1" {
			t.Errorf("Wait = %q", got)
		}
		if got := c.Wait(t.Context(), netip.Addr{}, time.Second); got != "invalid IP" {
			t.Errorf("Wait(invalid) = %q", got)
		}
	})
}

func TestMetricsRegistered(t *testing.T) {
	_, reg := startCache(t, Options{Resolver: newFake()})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, n := range []string{
		"xrdmon_dns_cache_hits_total", "xrdmon_dns_cache_misses_total", "xrdmon_dns_lookups_total",
		"xrdmon_dns_queue_depth", "xrdmon_dns_queue_dropped_total", "xrdmon_dns_cache_entries",
		"xrdmon_dns_waits_total", "xrdmon_dns_lookup_duration_seconds",
	} {
		if !have[n] {
			t.Errorf("metric %s not registered", n)
		}
	}
}

func warmCache(tb testing.TB, n int) (*Cache, []netip.Addr) {
	f := newFake()
	addrs := make([]netip.Addr, n)
	for i := range addrs {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		addrs[i] = a
		f.names[a.String()] = "h.example.org"
	}
	c := New(Options{Resolver: f, Size: 2 * n, QueueSize: n}, nil, prometheus.NewRegistry())
	for _, a := range addrs {
		c.Lookup(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	for _, a := range addrs {
		c.Wait(ctx, a, time.Minute)
	}
	cancel()
	<-done
	for _, a := range addrs {
		if _, ok := c.Lookup(a); !ok {
			tb.Fatalf("%v not cached", a)
		}
	}
	return c, addrs
}

func TestLookupHitDoesNotAllocate(t *testing.T) {
	c, addrs := warmCache(t, 100)
	if n := testing.AllocsPerRun(1000, func() { c.Lookup(addrs[7]) }); n != 0 {
		t.Errorf("Lookup hit allocates %v times", n)
	}
}
