// Package udp is the live source: it receives XRootD monitoring datagrams on
// a UDP socket (IPv4 and IPv6) with batched reads and hands them over in
// batches, without decoding them.
package udp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/metrics"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Options configures the UDP source.
type Options struct {
	// Addr is the address to listen on (default ":9930": every address,
	// IPv4 and IPv6). Port 0 picks a free port; see LocalAddr.
	Addr string `yaml:"addr"`
	// Readers is the number of reader goroutines (default GOMAXPROCS, at most 4).
	Readers int `yaml:"readers"`
	// ReusePort gives each reader its own socket bound with SO_REUSEPORT, so
	// the kernel spreads senders over the readers (by address hash), instead
	// of all readers sharing one socket. Default false: on 2 cores the
	// shared socket measured as fast (see the package benchmarks), and it
	// keeps one server's datagrams in one kernel queue.
	ReusePort bool `yaml:"reuse_port"`
	// BatchMessages is the number of datagrams one recvmmsg call can return
	// (default 64); it is also the largest batch handed to the pipeline.
	BatchMessages int `yaml:"batch_messages"`
	// MaxDatagram is the receive buffer per message (default 65536: any UDP
	// datagram). Longer datagrams are truncated and counted.
	MaxDatagram int `yaml:"max_datagram"`
	// ReceiveBuffer is the socket receive buffer (SO_RCVBUF) in bytes
	// (default 256 MiB, per socket). As root SO_RCVBUFFORCE is used; otherwise the kernel
	// caps it at the sysctl net.core.rmem_max and a warning says so.
	ReceiveBuffer int `yaml:"receive_buffer"`
	// Filter is the allow-list and address map.
	Filter source.FilterConfig `yaml:"filter"`
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		Addr:          ":" + DefaultPort,
		Readers:       min(runtime.GOMAXPROCS(0), 4),
		BatchMessages: 64,
		MaxDatagram:   65536,
		ReceiveBuffer: 256 << 20,
	}
}

// Config is the listen section of the configuration: the UDP input, and
// the sender allow-list and address map that every input applies.
type Config struct {
	UDP       string            `yaml:"udp" help:"UDP address to receive XRootD monitoring packets on; \":9930\" is every IPv4 and IPv6 address; empty disables UDP"`
	Summary   string            `yaml:"summary" help:"a second UDP address for summary monitoring (xrd.report), conventionally \":9931\"; summaries sent to the udp address are recognised too; empty: none"`
	Readers   int               `yaml:"readers" help:"reader goroutines, each with its own socket (SO_REUSEPORT) when more than one; 0 means GOMAXPROCS, at most 4"`
	BatchSize int               `yaml:"batch_size" help:"datagrams read per batch by each reader"`
	RcvBuf    units.ByteSize    `yaml:"rcvbuf" help:"socket receive buffer (SO_RCVBUF); the kernel may cap it (net.core.rmem_max)"`
	Allow     []string          `yaml:"allow" help:"sender networks (CIDR or address) accepted; empty accepts every sender"`
	NAT       map[string]string `yaml:"nat" help:"rewrite sender addresses, like the shoveler's map: private address (or \"all\") -> public address; the port is kept"`
}

// DefaultPort is XRootD's conventional port for detailed monitoring
// (xrootd.monitor dest); 9931 is the summary stream's (xrd.report).
const DefaultPort = "9930"

// DefaultConfig returns the defaults: every address on DefaultPort, with
// DefaultOptions' readers, batch and buffer, every sender accepted.
func DefaultConfig() Config {
	o := DefaultOptions()
	return Config{UDP: ":" + DefaultPort, BatchSize: o.BatchMessages, RcvBuf: units.ByteSize(o.ReceiveBuffer)}
}

// Options returns the source's options for c. Several readers get a
// socket each (SO_REUSEPORT): on one shared socket, concurrent recvmmsg
// calls split a server's datagrams and reorder them (xrdmon bench: 0.6%
// false sequence gaps at 25,000 packets/s with 2 readers), while the
// kernel keeps each sender on one of several sockets, hence in order.
func (c Config) Options() Options {
	o := DefaultOptions()
	o.Addr = c.UDP
	if c.Readers > 0 {
		o.Readers = c.Readers
	}
	o.ReusePort = o.Readers > 1
	o.BatchMessages = c.BatchSize
	o.ReceiveBuffer = int(c.RcvBuf)
	o.Filter = c.Filter()
	return o
}

// SummaryOptions returns the options of the summary listener (Summary):
// Options with its address and one reader (a summary a minute per server).
func (c Config) SummaryOptions() Options {
	o := c.Options()
	o.Addr = c.Summary
	o.Readers, o.ReusePort = 1, false
	return o
}

// Filter returns the allow-list and address map, for every input.
func (c Config) Filter() source.FilterConfig {
	fc := source.FilterConfig{Allow: c.Allow}
	for k, v := range c.NAT {
		if k == "all" {
			fc.MapAll = v
			continue
		}
		if fc.Map == nil {
			fc.Map = make(map[string]string)
		}
		fc.Map[k] = v
	}
	return fc
}

// UDP is the UDP source. New binds the sockets; Run reads them.
type UDP struct {
	cfg    Options
	log    *slog.Logger
	filter *source.Filter
	pool   *source.BatchPool
	conns  []*net.UDPConn
	local  netip.AddrPort

	closeOnce sync.Once

	rcvbufGot atomic.Int64 // the receive buffer the kernel reports (SO_RCVBUF), per socket
	busyAt    atomic.Int64 // Unix ns of Busy's last sample
	busy      atomic.Bool

	packets   prometheus.Counter
	bytes     prometheus.Counter
	truncated prometheus.Counter
	batchSize prometheus.Histogram
	rcvbuf    prometheus.Gauge
	drops     *dropsCollector
}

// New binds the listening socket(s) and registers the metrics on reg (nil:
// none). The sockets are closed when Run returns (or by Close).
func New(cfg Options, log *slog.Logger, reg prometheus.Registerer) (*UDP, error) {
	def := DefaultOptions()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Addr == "" {
		cfg.Addr = def.Addr
	}
	units.Default(&cfg.Readers, def.Readers)
	units.Default(&cfg.BatchMessages, def.BatchMessages)
	units.Default(&cfg.MaxDatagram, def.MaxDatagram)
	units.Default(&cfg.ReceiveBuffer, def.ReceiveBuffer)
	filter, err := source.NewFilter(cfg.Filter, "udp", reg)
	if err != nil {
		return nil, fmt.Errorf("udp source: %w", err)
	}
	u := &UDP{
		cfg: cfg, log: log, filter: filter,
		pool: source.NewBatchPool(cfg.BatchMessages, cfg.BatchMessages*1500),
	}
	if err := u.metrics(reg); err != nil {
		return nil, fmt.Errorf("udp source: %w", err)
	}
	if err := u.listen(); err != nil {
		u.Close()
		return nil, fmt.Errorf("udp source: %w", err)
	}
	return u, nil
}

func (u *UDP) metrics(reg prometheus.Registerer) error {
	ms := metrics.NewSet(reg)
	u.packets = metrics.Counter(ms, "xrdmon_udp_packets_received_total", "UDP datagrams received (before the allow-list).")
	u.bytes = metrics.Counter(ms, "xrdmon_udp_bytes_received_total", "UDP payload bytes received.")
	u.truncated = metrics.Counter(ms, "xrdmon_udp_packets_truncated_total", "UDP datagrams longer than the receive buffer, dropped.")
	u.batchSize = metrics.Histogram(ms, "xrdmon_udp_read_batch_size", "Datagrams returned by one batched socket read.", prometheus.ExponentialBuckets(1, 2, 8)) // 1 .. 128
	u.rcvbuf = metrics.Gauge(ms, "xrdmon_udp_receive_buffer_bytes", "Effective socket receive buffer (as the kernel reports it).")
	// The kernel's count of datagrams dropped because our receive queue
	// was full: one collector per registry sums every listener on it (the
	// detailed and the summary port).
	u.drops = metrics.Add(ms, &dropsCollector{desc: prometheus.NewDesc("xrdmon_udp_kernel_drops_total",
		"Datagrams the kernel dropped because the socket receive queue was full, on every UDP listener (from /proc/net/udp*).", nil, nil)})
	u.drops.add(u)
	return ms.Err()
}

// dropsCollector reports the kernel drops of every UDP source registered
// with it, summed, at scrape time.
type dropsCollector struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	sources []*UDP
}

func (d *dropsCollector) add(u *UDP) {
	d.mu.Lock()
	d.sources = append(d.sources, u)
	d.mu.Unlock()
}

func (d *dropsCollector) remove(u *UDP) {
	d.mu.Lock()
	d.sources = slices.DeleteFunc(d.sources, func(x *UDP) bool { return x == u })
	d.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (d *dropsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

// Collect implements prometheus.Collector.
func (d *dropsCollector) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	srcs := slices.Clone(d.sources)
	d.mu.Unlock()
	var total uint64
	for _, u := range srcs {
		if n, err := u.KernelDrops(); err == nil {
			total += n
		}
	}
	ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(total))
}

func (u *UDP) listen() error {
	n := 1
	if u.cfg.ReusePort {
		n = u.cfg.Readers
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		if !u.cfg.ReusePort {
			return nil
		}
		return setReusePort(c)
	}}
	addr := u.cfg.Addr
	if u.cfg.ReusePort {
		// SO_REUSEPORT would let a second collector (same user) bind the
		// port too, and the kernel would then split the datagrams between
		// the two: each would see half of every server's packets. A plain
		// bind first fails if any other socket holds the port.
		if err := probePort(addr); err != nil {
			return err
		}
	}
	for i := range n {
		pc, err := lc.ListenPacket(context.Background(), "udp", addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		conn := pc.(*net.UDPConn)
		u.conns = append(u.conns, conn)
		if i == 0 {
			u.local = conn.LocalAddr().(*net.UDPAddr).AddrPort()
			// Further SO_REUSEPORT sockets bind the port the first one got.
			host, _, _ := net.SplitHostPort(u.cfg.Addr)
			addr = net.JoinHostPort(host, fmt.Sprint(u.local.Port()))
		}
		if err := u.setReceiveBuffer(conn, i == 0); err != nil {
			return err
		}
	}
	u.log.Info("Listening for UDP monitoring packets", "addr", u.local.String(), "sockets", n, "readers", u.cfg.Readers)
	return nil
}

// probePort binds addr without SO_REUSEPORT and releases it, so that a
// port already held by another socket (another collector) is an error at
// start rather than a silent split of the traffic. Port 0 needs no probe.
func probePort(addr string) error {
	if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		return nil
	}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w (is another collector running on this port?)", addr, err)
	}
	return pc.Close()
}

func (u *UDP) setReceiveBuffer(conn *net.UDPConn, report bool) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("raw socket: %w", err)
	}
	got, forced, err := setRcvbuf(rc, u.cfg.ReceiveBuffer)
	if err != nil {
		return fmt.Errorf("set receive buffer: %w", err)
	}
	u.rcvbufGot.Store(int64(got))
	if !report {
		return nil
	}
	u.rcvbuf.Set(float64(got))
	// Linux reports twice the size asked for (it counts its bookkeeping).
	if got > 0 && got/2 < u.cfg.ReceiveBuffer {
		u.log.Warn("UDP receive buffer smaller than configured; raise the sysctl net.core.rmem_max (or run as root)",
			"configured_bytes", u.cfg.ReceiveBuffer, "effective_bytes", got, "forced", forced)
	}
	return nil
}

// LocalAddr returns the address the source listens on (with the real port
// when Addr asked for port 0).
func (u *UDP) LocalAddr() netip.AddrPort { return u.local }

// Close closes the sockets. Run calls it when it returns; calling it again is harmless.
func (u *UDP) Close() error {
	var errs []error
	u.closeOnce.Do(func() {
		if u.drops != nil {
			u.drops.remove(u)
		}
		for _, c := range u.conns {
			if err := c.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	})
	return errors.Join(errs...)
}

// KernelDrops returns the number of datagrams the kernel dropped for our
// sockets because their receive queues were full (Linux; 0 elsewhere).
func (u *UDP) KernelDrops() (uint64, error) {
	st, err := kernelStats(u.conns, u.local.Port())
	return st.drops, err
}

// Busy reports whether the readers are behind: the datagrams waiting in
// the kernel's receive queues fill a sixteenth of the receive buffer or
// more (and, once so, until they are down to a sixty-fourth: no flapping
// at the threshold). Past the buffer the kernel drops datagrams, so work
// that can wait (the rollups, which catch up from the store's log) yields
// the CPU while Busy holds. The queue is sampled from /proc/net/udp at
// most every busyEvery; Busy is safe to call often and from any goroutine.
// It is always false where the kernel does not say (not Linux).
func (u *UDP) Busy() bool {
	now := time.Now().UnixNano()
	last := u.busyAt.Load()
	if now-last < int64(busyEvery) || !u.busyAt.CompareAndSwap(last, now) {
		return u.busy.Load()
	}
	st, err := kernelStats(u.conns, u.local.Port())
	if err != nil {
		u.busy.Store(false)
		return false
	}
	buf := max(uint64(u.rcvbufGot.Load())*uint64(len(u.conns)), 1)
	busy := st.queued >= buf/16 || u.busy.Load() && st.queued >= buf/64
	u.busy.Store(busy)
	return busy
}

// busyEvery is how often Busy samples the receive queues.
const busyEvery = 100 * time.Millisecond

// Run reads datagrams until ctx is cancelled, then closes the sockets and
// returns nil. A batch holds the datagrams of one batched read (1 to
// BatchMessages) with the time of that read as Received. When out is full,
// the readers wait: the kernel queue (ReceiveBuffer) absorbs the burst and
// what overflows it is counted in xrdmon_udp_kernel_drops_total.
func (u *UDP) Run(ctx context.Context, out chan<- *source.Batch) error {
	var wg sync.WaitGroup
	errc := make(chan error, u.cfg.Readers)
	for i := range u.cfg.Readers {
		conn := u.conns[i%len(u.conns)]
		r, err := newReader(u, conn)
		if err != nil {
			u.Close()
			wg.Wait()
			return fmt.Errorf("udp source: %w", err)
		}
		wg.Go(func() {
			if err := r.loop(ctx, out); err != nil {
				errc <- err
			}
		})
	}
	stop := context.AfterFunc(ctx, func() { u.Close() })
	defer stop()
	wg.Wait()
	u.Close()
	select {
	case err := <-errc:
		if ctx.Err() == nil {
			return fmt.Errorf("udp source: %w", err)
		}
	default:
	}
	return nil
}

// send hands b to the pipeline, or frees it when ctx is done.
func send(ctx context.Context, out chan<- *source.Batch, b *source.PooledBatch) bool {
	select {
	case out <- &b.Batch:
		return true
	case <-ctx.Done():
		b.Free()
		return false
	}
}
