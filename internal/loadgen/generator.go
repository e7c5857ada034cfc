package loadgen

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

// Generator produces the packets and truth of a Config. Each Run starts the
// simulation afresh, so two runs of one Generator give the same packets.
// A Generator is not safe for concurrent use.
type Generator struct {
	cfg   Config
	epoch time.Time

	users      []userInfo
	v4Hosts    []hostInfo
	v6Hosts    []hostInfo
	readPaths  []pathInfo
	writePaths []pathInfo
	apps       []bstr
	infos      []bstr

	hooks Hooks
}

// Hooks observe a run while it happens, for benchmarks that time each
// record from the packet that completes it to the collector's output.
// Expected records are numbered 0, 1, 2... in the order they become final,
// which is the order of Truth.Records. Hooks must return quickly.
type Hooks struct {
	// Record is called from the generating goroutine for every expected
	// record when it becomes final: the packet carrying its close (or its
	// last packet) has been handed to the current batch. rec is valid only
	// during the call. Records are passed even when Config.KeepRecords is
	// off, so a caller can keep a compact form of a very long run's truth.
	Record func(i int, rec *record.Record)
	// Sent is called from the writing goroutine after each batch has been
	// written to the output, with the number n of expected records whose
	// packets have now all been written (records 0..n-1) and the time the
	// write returned.
	Sent func(n int, at time.Time)
}

// SetHooks installs hooks for the following runs (zero Hooks: none).
func (g *Generator) SetHooks(h Hooks) { g.hooks = h }

// bstr is a string kept with its bytes, for the encoder's []byte fields and
// the records' string fields without a conversion per use.
type bstr struct {
	s string
	b []byte
}

func mk(s string) bstr { return bstr{s: s, b: []byte(s)} }

type userInfo struct {
	name, dn, vo, role, groups, subject, tokenOrg, tokenUser bstr
}

type hostInfo struct{ name bstr }

type pathInfo struct{ p bstr }

var vos = []string{"cms", "atlas", "osg", "ligo", "dteam", "icecube"}

// New checks cfg and builds the generator's pools (user names, hosts,
// paths), which depend only on cfg.Seed.
func New(cfg Config) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("loadgen config: %w", err)
	}
	g := &Generator{cfg: cfg, epoch: cfg.epoch()}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6c6f616467656e)) // "loadgen"
	for i := range cfg.Users {
		vo := vos[i%len(vos)]
		name := fmt.Sprintf("%s%04d", vo, i)
		role := ""
		if i%5 == 0 {
			role = "production"
		}
		g.users = append(g.users, userInfo{
			name:      mk(name),
			dn:        mk("/DC=org/DC=loadgen/OU=People/CN=" + name),
			vo:        mk(vo),
			role:      mk(role),
			groups:    mk("/" + vo),
			subject:   mk(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", rng.Uint32(), rng.Uint32()&0xffff, rng.Uint32()&0xfff, rng.Uint32()&0xfff, rng.Uint64()&0xffffffffffff)),
			tokenOrg:  mk("https://" + vo + ".loadgen.example"),
			tokenUser: mk(vo + "user"),
		})
	}
	for i := range 1024 {
		g.v4Hosts = append(g.v4Hosts, hostInfo{mk(fmt.Sprintf("wn%04d.farm%d.loadgen.example", i, i%7))})
		g.v6Hosts = append(g.v6Hosts, hostInfo{mk(fmt.Sprintf("[2001:db8:%x::%x]", i%13, 0x100+i))})
	}
	eras := "ABCDEFG"
	datasets := []string{"JetMET", "Muon", "EGamma", "ZeroBias", "Tau", "BTagMu", "Commissioning"}
	tiers := []string{"AOD", "MINIAOD", "NANOAOD", "RAW"}
	for i := range cfg.Paths {
		g.readPaths = append(g.readPaths, pathInfo{mk(fmt.Sprintf("/store/data/Run2026%c/%s/%s/%06d/%016x.root",
			eras[i%len(eras)], datasets[rng.IntN(len(datasets))], tiers[rng.IntN(len(tiers))], rng.IntN(1000000), rng.Uint64()))})
	}
	for i := range max(cfg.Paths/4, 1) {
		g.writePaths = append(g.writePaths, pathInfo{mk(fmt.Sprintf("/store/user/loadgen/job%06d/output_%d.root", i, rng.IntN(100)))})
	}
	for _, a := range []string{"xrdcp", "python3", "cmsRun", "root.exe", "gfal-copy"} {
		g.apps = append(g.apps, mk(a))
	}
	for _, a := range []string{"xrdcl-pelican/1.2.1", "cmsRun/CMSSW_14_0_7", "rucio/35.1.0", "gfal2/2.23.0"} {
		g.infos = append(g.infos, mk(a))
	}
	return g, nil
}

// Config returns the generator's configuration.
func (g *Generator) Config() Config { return g.cfg }

// DefaultSender returns the sender address simulated server i has in
// captures: 127.0.0.2 onwards (127.0.0.0/8 is all loopback on Linux), port
// 20000 + i mod 40000.
func DefaultSender(i int) netip.AddrPort {
	n := uint32(i + 2)
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, byte(n >> 16), byte(n >> 8), byte(n)}), uint16(20000+i%40000))
}

// run is one Run of a Generator: the simulation's state (simulate.go),
// the packets on their way out (emit.go, batch.go) and the truth kept
// while running (truth.go).
type run struct {
	g       *Generator
	cfg     *Config
	ctx     context.Context
	out     Output
	err     error
	stopped bool

	// The simulation: virtual clock, events, servers, clients, accesses.
	now     int64 // ms
	startMs int64
	endMs   int64
	seq     uint64
	events  []event // a minheap

	servers []server
	clients []client
	accs    []access
	freeAcc []int32

	// Delivery: impairments, the batch being filled and the writer.
	imp      *rand.Rand
	batch    []Packet
	batchMax int
	arena    []byte
	full     chan *bufset
	free     chan *bufset
	wdone    chan struct{}
	werr     error // set by the writer goroutine

	paceStart time.Time
	delivered int64
	final     int           // expected records finalized so far
	hookRec   record.Record // the record passed to Hooks.Record

	// The truth.
	truth    *Truth
	tally    []serverTally
	users    []Bytes
	reasons  map[record.Reason]int64
	sessions int64
	lastMs   int64

	// Encoding scratch space.
	info  []byte
	line  []byte
	num   [24]byte
	lines [][]byte
}

// Run simulates the configured servers and clients and delivers their
// packets to out (Bind, then Write; the caller closes out). It returns the
// ground truth. On an output error or when ctx is done it stops and returns
// the truth of what was generated so far with the error.
func (g *Generator) Run(ctx context.Context, out Output) (*Truth, error) {
	cfg := &g.cfg
	r := &run{
		g: g, cfg: cfg, ctx: ctx, out: out,
		startMs:  g.epoch.UnixMilli(),
		imp:      rand.New(rand.NewPCG(cfg.Seed, 0x696d7061697221)),
		arena:    make([]byte, 0, arenaSize),
		batchMax: 1024,
		reasons:  make(map[record.Reason]int64),
		users:    make([]Bytes, cfg.Users),
		tally:    make([]serverTally, cfg.Servers+cfg.Redirectors),
		truth:    &Truth{Config: *cfg, Start: g.epoch, Lossless: cfg.Lossless()},
	}
	if cfg.Rate > 0 {
		r.batchMax = int(min(max(cfg.Rate/200, 1), 1024))
	}
	r.endMs = math.MaxInt64
	if cfg.Duration > 0 {
		r.endMs = r.startMs + cfg.Duration.Milliseconds()
	}
	r.now = r.startMs

	senders := make([]netip.AddrPort, cfg.Servers+cfg.Redirectors)
	for i := range senders {
		senders[i] = DefaultSender(i)
	}
	bound, err := out.Bind(senders)
	if err != nil {
		return r.truth, fmt.Errorf("bind output: %w", err)
	}
	if len(bound) != len(senders) {
		return r.truth, fmt.Errorf("bind output: %d addresses for %d servers", len(bound), len(senders))
	}
	r.startWriter()
	r.initServers(bound)
	r.paceStart = time.Now()
	r.loop()
	r.finish()
	r.stopWriter()
	return r.truth, r.err
}

// finish ends the run: at the end of Duration it drains (Config.Drain) or
// leaves the files open and flushes the servers' buffers; then the files
// still open become end_of_input, the held packets go out, and the truth
// is settled.
func (r *run) finish() {
	if !r.stopped && r.endMs != math.MaxInt64 {
		r.now = r.endMs
		if r.cfg.Drain {
			r.drain()
		}
		for i := range r.servers {
			if !r.flushServer(&r.servers[i]) {
				break
			}
		}
	}
	r.finalizeOpen()
	r.releaseHeld()
	if r.err == nil {
		r.flushBatch()
	}
	r.settle()
}
