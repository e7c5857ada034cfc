// Package dnscache resolves IP addresses to host names (reverse DNS) in the
// background, so the packet path never waits on DNS.
//
// Lookup answers from memory at once and, on a miss, queues a lookup for a
// bounded pool of workers. Wait gives a caller that can afford a short delay
// (a record about to be written) a bounded wait for the name. Answers are
// kept for a TTL, failures for a shorter negative TTL, and the number of
// addresses kept is bounded, least recently used first out.
package dnscache

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xrdmon/xrdmon/internal/metrics"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/xrdmon/xrdmon/internal/units"

	"github.com/xrdmon/xrdmon/internal/signal"
)

// Resolver does reverse lookups. *net.Resolver implements it.
type Resolver interface {
	LookupAddr(ctx context.Context, addr string) (names []string, err error)
}

// Options configures a Cache. Zero fields take the values of DefaultOptions.
type Options struct {
	TTL         time.Duration // how long a name is kept
	NegativeTTL time.Duration // how long a failure (no name, timeout, error) is kept
	Size        int           // addresses kept; least recently used are evicted
	Workers     int           // concurrent lookups
	QueueSize   int           // lookups waiting for a worker; more are dropped
	Timeout     time.Duration // time limit of one lookup
	// Server is a DNS server "host:port" to ask instead of the system's
	// resolvers (Go's resolver is used; /etc/hosts is still consulted
	// first). Ignored when Resolver is set.
	Server string
	// Resolver replaces the resolver built from Server, mainly for tests.
	Resolver Resolver
}

// DefaultOptions returns the defaults, which match the config package's.
func DefaultOptions() Options { return DefaultConfig().Options() }

// Config configures reverse DNS: the dns section of the configuration.
// Lookups run in the background and never block the packet path.
type Config struct {
	Enabled     bool           `yaml:"enabled" help:"resolve server and client addresses to host names"`
	TTL         units.Duration `yaml:"ttl" help:"how long a resolved name is kept"`
	NegativeTTL units.Duration `yaml:"negative_ttl" help:"how long a failed lookup (no name, timeout) is kept before retrying"`
	CacheSize   int            `yaml:"cache_size" help:"addresses kept in the cache (least recently used are evicted)"`
	Workers     int            `yaml:"workers" help:"concurrent lookups"`
	QueueSize   int            `yaml:"queue_size" help:"lookups waiting for a worker; more are dropped and counted"`
	Timeout     units.Duration `yaml:"timeout" help:"time limit of one lookup"`
	// MaxWait is used by the pipeline: how long a commit waits for names.
	MaxWait units.Duration `yaml:"max_wait" help:"how long a record waits for a name before it is written with the address"`
	Server  string         `yaml:"server" help:"DNS server host:port to query instead of the system's resolvers"`
}

// DefaultConfig returns the defaults: enabled, names kept a day, failures
// an hour, 100,000 addresses, 8 lookups at once, 5 s per lookup, records
// waiting at most 200 ms for a name.
func DefaultConfig() Config {
	return Config{
		Enabled:     true,
		TTL:         units.Duration(24 * time.Hour),
		NegativeTTL: units.Duration(time.Hour),
		CacheSize:   100_000,
		Workers:     8,
		QueueSize:   4096,
		Timeout:     units.Duration(5 * time.Second),
		MaxWait:     units.Duration(200 * time.Millisecond),
	}
}

// Options returns the cache's options for c.
func (c Config) Options() Options {
	return Options{
		TTL: c.TTL.D(), NegativeTTL: c.NegativeTTL.D(), Size: c.CacheSize,
		Workers: c.Workers, QueueSize: c.QueueSize, Timeout: c.Timeout.D(), Server: c.Server,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	units.Default(&o.TTL, d.TTL)
	units.Default(&o.NegativeTTL, d.NegativeTTL)
	units.Default(&o.Size, d.Size)
	units.Default(&o.Workers, d.Workers)
	units.Default(&o.QueueSize, d.QueueSize)
	units.Default(&o.Timeout, d.Timeout)
	return o
}

// Lookup results, the values of the result label of
// xrdmon_dns_lookups_total.
const (
	resultOK       = "ok"        // a name was found
	resultNotFound = "not_found" // NXDOMAIN or no PTR record
	resultTimeout  = "timeout"   // the lookup exceeded Options.Timeout
	resultError    = "error"     // any other failure (SERVFAIL, refused, network)
)

// Wait results, the values of the result label of xrdmon_dns_waits_total.
const (
	waitCached   = "cached"   // the answer was in the cache
	waitResolved = "resolved" // the answer arrived within the wait
	waitTimeout  = "timeout"  // no answer in time: the address text was used
)

// Cache is a reverse DNS cache. All methods are safe for concurrent use.
// Lookups are performed only while Run is running.
type Cache struct {
	opts     Options
	log      *slog.Logger
	resolver Resolver
	start    time.Time
	queue    chan *entry
	shards   []shard
	mask     uint64
	entries  atomic.Int64

	hits, misses, dropped prometheus.Counter
	lookups               map[string]prometheus.Counter
	waits                 map[string]prometheus.Counter
	duration              prometheus.Histogram
	resolved              signal.Broadcast // notified when a lookup ends
}

// entry is one address. While pending it has no name; once resolved, name
// and expires never change (a refresh replaces the entry), so a goroutine
// that saw done closed may read them without the lock.
type entry struct {
	addr       netip.Addr
	name       string
	expires    int64 // nanoseconds since Cache.start
	pending    bool
	done       chan struct{} // closed when the lookup ends
	prev, next *entry        // LRU list, guarded by the shard lock
}

type shard struct {
	mu         sync.Mutex
	m          map[netip.Addr]*entry
	head, tail *entry // head is the most recently used
	capacity   int
	_          [64]byte // keep shards on separate cache lines
}

// New returns a cache. Its metrics are registered on reg if reg is not nil;
// log may be nil. Call Run to start the workers.
func New(opts Options, log *slog.Logger, reg prometheus.Registerer) *Cache {
	opts = opts.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cache{
		opts:  opts,
		log:   log,
		start: time.Now(),
		queue: make(chan *entry, opts.QueueSize),
	}
	c.resolver = opts.Resolver
	if c.resolver == nil {
		c.resolver = newResolver(opts.Server)
	}
	n := 1
	if opts.Size >= 4096 {
		n = 16
	}
	c.shards = make([]shard, n)
	c.mask = uint64(n - 1)
	per := (opts.Size + n - 1) / n
	for i := range c.shards {
		c.shards[i].m = make(map[netip.Addr]*entry)
		c.shards[i].capacity = per
	}

	ms := metrics.NewSet(reg)
	c.hits = metrics.Counter(ms, "xrdmon_dns_cache_hits_total", "Reverse DNS lookups answered from the cache (names and cached failures).")
	c.misses = metrics.Counter(ms, "xrdmon_dns_cache_misses_total", "Reverse DNS lookups not answered from the cache.")
	c.dropped = metrics.Counter(ms, "xrdmon_dns_queue_dropped_total", "Reverse DNS lookups not queued because the queue was full.")
	lookups := metrics.CounterVec(ms, "xrdmon_dns_lookups_total", "Reverse DNS lookups performed, by result.", "result")
	c.lookups = map[string]prometheus.Counter{}
	for _, r := range []string{resultOK, resultNotFound, resultTimeout, resultError} {
		c.lookups[r] = lookups.WithLabelValues(r)
	}
	waits := metrics.CounterVec(ms, "xrdmon_dns_waits_total", "Waits for a name, by result: cached, resolved in time, or timeout (the address was used).", "result")
	c.waits = map[string]prometheus.Counter{}
	for _, r := range []string{waitCached, waitResolved, waitTimeout} {
		c.waits[r] = waits.WithLabelValues(r)
	}
	c.duration = metrics.Histogram(ms, "xrdmon_dns_lookup_duration_seconds", "Duration of reverse DNS lookups.", []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10})
	metrics.GaugeFunc(ms, "xrdmon_dns_queue_depth", "Reverse DNS lookups waiting for a worker.", func() float64 { return float64(len(c.queue)) })
	metrics.GaugeFunc(ms, "xrdmon_dns_cache_entries", "Addresses in the reverse DNS cache, including lookups in flight.", func() float64 { return float64(c.entries.Load()) })
	if err := ms.Err(); err != nil {
		log.Warn("Cannot register DNS cache metrics", "err", err)
	}
	return c
}

// newResolver returns the system resolver, or a pure-Go resolver that sends
// every query to server.
func newResolver(server string) *net.Resolver {
	if server == "" {
		return &net.Resolver{}
	}
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		},
	}
}

// Run performs queued lookups with Options.Workers goroutines until ctx is
// canceled, then returns nil once they have stopped. Lookups still queued are
// abandoned; their waiters get the address text.
func (c *Cache) Run(ctx context.Context) error {
	c.log.Info("reverse DNS workers started", "workers", c.opts.Workers, "queue", c.opts.QueueSize)
	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case e := <-c.queue:
					c.resolve(ctx, e)
				}
			}
		})
	}
	wg.Wait()
	for {
		select {
		case e := <-c.queue:
			c.abandon(e)
		default:
			c.log.Info("reverse DNS workers stopped")
			return nil
		}
	}
}

func (c *Cache) now() int64 { return int64(time.Since(c.start)) }

func normalize(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Zone() != "" {
		a = a.WithZone("")
	}
	return a
}

func (c *Cache) shard(a netip.Addr) *shard {
	if c.mask == 0 {
		return &c.shards[0]
	}
	b := a.As16()
	h := (binary.LittleEndian.Uint64(b[:8]) ^ binary.LittleEndian.Uint64(b[8:])) * 0x9e3779b97f4a7c15
	return &c.shards[(h>>56)&c.mask]
}

// Lookup returns the cached name of addr without blocking. ok is false when
// the cache holds no fresh answer; a lookup is then queued unless one is
// already in flight (if the queue is full, the lookup is dropped and counted,
// and a later call tries again). An address known to have no name (a cached
// failure) gives "" and true.
//
// IPv4-mapped IPv6 addresses are treated as IPv4 and zones are ignored. A
// hit does not allocate.
func (c *Cache) Lookup(addr netip.Addr) (name string, ok bool) {
	name, ok, _ = c.lookup(addr)
	return name, ok
}

// lookup is Lookup that also returns the pending entry on a miss, or nil if
// no lookup is in flight (the queue was full or addr is invalid).
func (c *Cache) lookup(addr netip.Addr) (string, bool, *entry) {
	addr = normalize(addr)
	if !addr.IsValid() {
		return "", false, nil
	}
	s := c.shard(addr)
	now := c.now()
	s.mu.Lock()
	e := s.m[addr]
	if e != nil && !e.pending && now < e.expires {
		s.moveToFront(e)
		name := e.name
		s.mu.Unlock()
		c.hits.Inc()
		return name, true, nil
	}
	c.misses.Inc()
	if e != nil && e.pending {
		s.mu.Unlock()
		return "", false, e
	}
	if e != nil { // expired
		s.remove(e)
		c.entries.Add(-1)
	}
	e = &entry{addr: addr, pending: true, done: make(chan struct{})}
	if s.insert(e) {
		c.entries.Add(-1) // evicted one
	}
	c.entries.Add(1)
	s.mu.Unlock()

	select {
	case c.queue <- e:
		return "", false, e
	default:
		c.dropped.Inc()
		s.mu.Lock()
		if s.m[addr] == e {
			s.remove(e)
			c.entries.Add(-1)
		}
		s.mu.Unlock()
		close(e.done)
		return "", false, nil
	}
}

// Wait returns the name of addr, waiting at most maxWait (or until ctx is
// done) for a lookup to finish. When no name is known in time, or addr has
// none, it returns the address text, so the result is always usable.
func (c *Cache) Wait(ctx context.Context, addr netip.Addr, maxWait time.Duration) string {
	name, ok, e := c.lookup(addr)
	if ok {
		c.waits[waitCached].Inc()
		if name != "" {
			return name
		}
		return normalize(addr).String()
	}
	if e != nil && maxWait > 0 {
		t := time.NewTimer(maxWait)
		defer t.Stop()
		select {
		case <-e.done:
			if !e.pending && e.name != "" {
				c.waits[waitResolved].Inc()
				return e.name
			}
			if !e.pending {
				c.waits[waitResolved].Inc()
				return normalize(addr).String()
			}
		case <-t.C:
		case <-ctx.Done():
		}
	}
	c.waits[waitTimeout].Inc()
	return normalize(addr).String()
}

// Resolved returns a channel closed when the next lookup ends: a caller
// waiting for several names takes it, looks them up, and waits on it.
func (c *Cache) Resolved() <-chan struct{} { return c.resolved.C() }

// resolve performs one queued lookup and stores its result.
func (c *Cache) resolve(ctx context.Context, e *entry) {
	lctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	t0 := time.Now()
	names, err := c.resolver.LookupAddr(lctx, e.addr.String())
	cancel()
	c.duration.Observe(time.Since(t0).Seconds())
	if err != nil && ctx.Err() != nil {
		c.abandon(e) // shutting down: don't cache a failure we caused
		return
	}
	name, ttl, result := "", c.opts.NegativeTTL, classify(err)
	if err == nil {
		if len(names) > 0 {
			name = strings.ToLower(strings.TrimSuffix(names[0], "."))
		}
		if name != "" {
			ttl = c.opts.TTL
		} else {
			result = resultNotFound
		}
	}
	c.lookups[result].Inc()
	s := c.shard(e.addr)
	s.mu.Lock()
	e.name = name
	e.expires = c.now() + int64(ttl)
	e.pending = false
	s.mu.Unlock()
	close(e.done)
	c.resolved.Notify()
}

// abandon forgets a pending entry without a result.
func (c *Cache) abandon(e *entry) {
	s := c.shard(e.addr)
	s.mu.Lock()
	if s.m[e.addr] == e {
		s.remove(e)
		c.entries.Add(-1)
	}
	s.mu.Unlock()
	close(e.done)
	c.resolved.Notify()
}

func classify(err error) string {
	if err == nil {
		return resultOK
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return resultTimeout
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		switch {
		case de.IsNotFound:
			return resultNotFound
		case de.IsTimeout:
			return resultTimeout
		}
	}
	return resultError
}

// Len returns the number of addresses in the cache, including lookups in
// flight.
func (c *Cache) Len() int { return int(c.entries.Load()) }

// insert adds e at the front, evicting the least recently used entry if the
// shard is full. It reports whether an entry was evicted. Lock held.
func (s *shard) insert(e *entry) bool {
	evicted := false
	if len(s.m) >= s.capacity && s.tail != nil {
		s.remove(s.tail)
		evicted = true
	}
	s.m[e.addr] = e
	e.prev, e.next = nil, s.head
	if s.head != nil {
		s.head.prev = e
	}
	s.head = e
	if s.tail == nil {
		s.tail = e
	}
	return evicted
}

// remove unlinks e. Lock held.
func (s *shard) remove(e *entry) {
	delete(s.m, e.addr)
	s.unlink(e)
}

func (s *shard) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// moveToFront marks e as most recently used. Lock held.
func (s *shard) moveToFront(e *entry) {
	if s.head == e {
		return
	}
	s.unlink(e)
	e.next = s.head
	if s.head != nil {
		s.head.prev = e
	}
	s.head = e
	if s.tail == nil {
		s.tail = e
	}
}
