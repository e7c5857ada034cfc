package loadgen

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
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

// Client states.
const (
	stIdle    = iota // between sessions
	stSession        // logged in, no file open
	stFile           // a file open
)

// Event kinds.
const (
	evTick    = iota // server: flush timers, isXfr, ident
	evClient         // a client's next step
	evRestart        // server restart
)

type event struct {
	at   int64 // Unix ms
	seq  uint64
	idx  int32
	gen  uint32
	kind uint8
}

// evHeap is a min-heap of events by (at, seq).
type evHeap []event

func (h evHeap) less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}

func (h *evHeap) push(e event) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *evHeap) pop() event {
	q := *h
	e := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q.less(l, m) {
			m = l
		}
		if l+1 < n && q.less(l+1, m) {
			m = l + 1
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return e
}

type session struct {
	user, host, app, info int32
	dict                  uint32
	num                   uint32
	exp, act              int32
	ipv6, token, ueac     bool
	hasInfo               bool
	rdict                 [maxRedirectors]uint32 // the session's dictid at each redirector
}

type client struct {
	idx       int32
	srv       int32
	gen       uint32
	state     uint8
	forced    bool // this session ends with a forced close
	forceNow  bool // the pending stFile event is the forced disconnect
	filesLeft int32
	acc       int32 // open access, -1 when none
	sess      session
}

// Access states.
const (
	accFree    = iota
	accPending // isOpen still in the server's buffer
	accSent    // isOpen sent
)

type access struct {
	srv      int32
	state    uint8
	rw       bool
	readv    bool
	cache    bool
	tpc      bool
	forced   bool
	closed   bool // isClose built (final bytes known)
	stod     int64
	sess     session
	fileID   uint32
	path     int32
	size     int64 // at open
	tr, tv   int64 // total read, readv bytes planned
	tw       int64
	start    int64 // ms
	end      int64 // ms, planned
	rdSize   int64
	rvSize   int64
	rvSegs   int64
	wrSize   int64
	gr, gv   int64 // cumulative bytes in the last isXfr built
	gw       int64
	xr, xv   int64 // cumulative bytes in the last isXfr sent
	xw       int64
	xAt      int64
	fr, fv   int64 // final bytes (at close)
	fw       int64
	closedAt int64
	hops     int32            // redirects before the open
	rfirst   int64            // ms of the first redirect
	seqRead  bool             // reads go through the file in order
	io       record.IOProfile // the traced I/O, built at the close
}

// f-stream record kinds pending in a buffer, applied to the truth when the
// buffer is sent.
const (
	opOpen = iota
	opXfr
	opClose
)

type fop struct {
	kind    uint8
	acc     int32
	r, v, w int64
	at      int64
}

type gbuf struct {
	data []byte
	ends []int32
	tBeg int32
	tEnd int32
	t0   int64 // ms of the first record
	pseq uint8
}

type server struct {
	idx      int
	rng      *rand.Rand
	addr     netip.AddrPort
	ip       string
	host     bstr
	site     bstr
	sid      uint64
	sidDec   []byte
	pid      int
	stod     int64
	cache    bool
	redir    bool // a redirector: no clients, sends r-stream
	pseqMain uint8
	pseqF    uint8
	nextDict uint32
	nextSess uint32
	ticks    int
	identAt  int64

	fb     packet.FStreamBuilder
	fbuf   []byte
	fOn    bool
	ops    []fop
	g      [2]gbuf // C, P
	held   []byte
	isHeld bool
	heldD  int
}

var (
	protXroot = []byte("xroot")
	instAnon  = []byte("anon")
	pgmXrootd = []byte("xrootd")
	verXrootd = []byte("v5.7.1")
	relClient = []byte("v5.7.1")
	srvUser   = []byte("xrootd")
)

// serverTally is the per-server part of the truth kept while running.
type serverTally struct {
	packets [nDomains]int64
	dropped [nDomains]int64
	events  [3]int64 // C, P, r (redirects)
	stods   []int64
	bytes   Bytes
}

type run struct {
	g       *Generator
	cfg     *Config
	ctx     context.Context
	out     Output
	err     error
	stopped bool

	now     int64 // ms
	startMs int64
	endMs   int64
	seq     uint64
	events  evHeap

	servers []server
	clients []client
	accs    []access
	freeAcc []int32
	imp     *rand.Rand

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

	truth    *Truth
	tally    []serverTally
	users    []Bytes
	reasons  map[record.Reason]int64
	sessions int64
	lastMs   int64

	info  []byte
	line  []byte
	num   [24]byte
	lines [][]byte
}

const arenaSize = 4 << 20

// nBufsets is the number of batches in flight between generator and writer.
const nBufsets = 3
const arenaSpare = 4 * 65536

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

func (r *run) initServers(bound []netip.AddrPort) {
	cfg := r.cfg
	r.servers = make([]server, cfg.Servers+cfg.Redirectors)
	r.clients = make([]client, cfg.Servers*cfg.Clients)
	for i := range r.servers {
		s := &r.servers[i]
		s.idx = i
		s.rng = rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1))
		s.addr = bound[i]
		s.ip = bound[i].Addr().String()
		s.host = mk(fmt.Sprintf("xrd%04d.site%d.loadgen.example", i, i%17))
		if s.redir = i >= cfg.Servers; s.redir {
			s.host = mk(fmt.Sprintf("redirector%d.loadgen.example", i-cfg.Servers))
		}
		s.site = mk(fmt.Sprintf("LOADGEN_SITE_%d", i%17))
		s.sid = s.rng.Uint64()&(1<<48-1) | 1<<40
		s.sidDec = strconv.AppendUint(nil, s.sid, 10)
		s.pid = 1000 + s.rng.IntN(60000)
		s.stod = r.startMs/1000 - 3600 - int64(s.rng.IntN(30*86400))
		s.cache = s.rng.Float64() < cfg.CacheFrac
		s.nextDict = 1
		s.g[0].pseq, s.g[1].pseq = 1, 1
		t := &r.tally[i]
		t.stods = append(t.stods, s.stod)
		r.sendIdent(s)
		r.schedule(r.startMs+int64(s.rng.IntN(int(cfg.FStat.Milliseconds()))), evTick, int32(i), 0)
		if s.redir {
			continue
		}
		for k := range cfg.Clients {
			ci := i*cfg.Clients + k
			c := &r.clients[ci]
			c.idx, c.srv, c.acc = int32(ci), int32(i), -1
			ramp := min(cfg.ThinkTime, 10*time.Second).Milliseconds() + 1
			r.schedule(r.startMs+1+s.rng.Int64N(ramp), evClient, int32(ci), 0)
		}
	}
	if cfg.Restarts > 0 {
		rr := rand.New(rand.NewPCG(cfg.Seed, 0x72657374617274))
		for k := range cfg.Restarts {
			at := r.startMs + cfg.Duration.Milliseconds()*int64(k+1)/int64(cfg.Restarts+1)
			r.schedule(at, evRestart, int32(rr.IntN(cfg.Servers)), 0)
		}
	}
}

func (r *run) schedule(at int64, kind uint8, idx int32, gen uint32) {
	r.seq++
	r.events.push(event{at: at, seq: r.seq, idx: idx, gen: gen, kind: kind})
}

func (r *run) loop() {
	for len(r.events) > 0 && !r.stopped {
		if r.events[0].at >= r.endMs {
			return
		}
		e := r.events.pop()
		r.now = e.at
		switch e.kind {
		case evTick:
			r.tick(&r.servers[e.idx])
		case evClient:
			c := &r.clients[e.idx]
			if c.gen == e.gen {
				r.step(c)
			}
		case evRestart:
			r.restart(&r.servers[e.idx])
		}
	}
}

// finish ends the run: drain or leave files open, flush buffers, settle the
// truth.
func (r *run) finish() {
	if !r.stopped && r.endMs != math.MaxInt64 {
		r.now = r.endMs
		if r.cfg.Drain {
			for i := range r.clients {
				c := &r.clients[i]
				if r.stopped {
					break
				}
				if c.state == stFile {
					r.closeFile(c, false)
				}
				if c.state == stSession {
					r.logout(c)
				}
			}
		}
		for i := range r.servers {
			s := &r.servers[i]
			if !r.flushF(s) || !r.flushG(s, 0) || !r.flushG(s, 1) {
				break
			}
		}
	}
	// Files whose open was sent and whose close was not are end_of_input.
	for i := range r.accs {
		switch r.accs[i].state {
		case accSent:
			r.finalize(int32(i), record.EndOfInput)
		case accPending:
			r.freeAccess(int32(i))
		}
	}
	for i := range r.servers {
		s := &r.servers[i]
		if s.isHeld {
			r.push(s, s.held, true)
			s.isHeld = false
		}
	}
	if r.err == nil {
		r.flushBatch()
	}
	r.settle()
}

// settle fills the Truth from the tallies.
func (r *run) settle() {
	t := r.truth
	if r.lastMs > 0 {
		t.End = time.UnixMilli(r.lastMs).UTC()
	}
	t.Sessions = r.sessions
	t.Reasons = make(map[string]int64)
	for k, v := range r.reasons {
		t.Reasons[reasonName(k)] = v
	}
	t.Events = map[string]int64{"C": 0, "P": 0}
	if r.cfg.Redirectors > 0 {
		t.Events["r"] = 0
	}
	for i := range r.servers {
		s, tl := &r.servers[i], &r.tally[i]
		st := ServerTruth{
			Index: i, IP: s.ip, Sender: s.addr.String(), Host: s.host.s, SID: s.sid, Redirector: s.redir,
			Stods: tl.stods, Cache: s.cache, Bytes: tl.bytes,
			Packets: make(map[string]int64), Dropped: make(map[string]int64),
			Events: map[string]int64{"C": tl.events[0], "P": tl.events[1]},
		}
		for d := range nDomains {
			st.Packets[domainNames[d]] = tl.packets[d]
			st.Dropped[domainNames[d]] = tl.dropped[d]
		}
		t.Events["C"] += tl.events[0]
		t.Events["P"] += tl.events[1]
		if s.redir {
			st.Events = map[string]int64{"r": tl.events[2]}
			t.Events["r"] += tl.events[2]
		}
		t.Servers = append(t.Servers, st)
	}
	for i, b := range r.users {
		if b.Records > 0 {
			t.Users = append(t.Users, UserTruth{User: r.g.users[i].name.s, Bytes: b})
		}
	}
	slices.SortFunc(t.Users, func(a, b UserTruth) int {
		switch {
		case a.User < b.User:
			return -1
		case a.User > b.User:
			return 1
		}
		return 0
	})
}

// sec returns the Unix second of ms.
func sec(ms int64) int32 { return int32(ms / 1000) }

// room makes sure the arena can take another packet (and a held and a
// duplicate one); it returns false once the run must stop.
func (r *run) room() bool {
	if r.stopped {
		return false
	}
	if r.cfg.Count > 0 && r.truth.Generated >= r.cfg.Count {
		r.stopped = true
		return false
	}
	if cap(r.arena)-len(r.arena) < arenaSpare || len(r.batch) >= r.batchMax {
		r.flushBatch()
	}
	return !r.stopped
}

// emit passes a generated packet (in the arena) through the impairments to
// the batch.
func (r *run) emit(s *server, dom int, data []byte) {
	t := r.truth
	t.Generated++
	t.Bytes += int64(len(data))
	r.tally[s.idx].packets[dom]++
	r.lastMs = r.now
	cfg := r.cfg
	if cfg.Loss > 0 && r.imp.Float64() < cfg.Loss {
		t.Dropped++
		r.tally[s.idx].dropped[dom]++
		return
	}
	if cfg.Reorder > 0 && !s.isHeld && r.imp.Float64() < cfg.Reorder {
		s.held = append(s.held[:0], data...)
		s.isHeld, s.heldD = true, dom
		t.Reordered++
		return
	}
	r.push(s, data, false)
	if s.isHeld {
		r.push(s, s.held, true)
		s.isHeld = false
	}
	if cfg.Duplicate > 0 && r.imp.Float64() < cfg.Duplicate {
		t.Duplicated++
		r.push(s, data, false)
	}
}

// push appends a packet to the batch; copy copies data into the arena first.
func (r *run) push(s *server, data []byte, copyData bool) {
	if copyData {
		start := len(r.arena)
		r.arena = append(r.arena, data...)
		data = r.arena[start:]
	}
	r.batch = append(r.batch, Packet{Data: data, Server: s.idx, Sender: s.addr, Time: time.UnixMilli(r.now).UTC()})
	r.truth.Emitted++
}

// bufset is one batch and the arena its packets point into. The generator
// fills one while the writer goroutine hands another to the output.
type bufset struct {
	batch []Packet
	arena []byte
	final int // records final once this batch is written
}

// startWriter starts the goroutine that calls out.Write, so that building
// packets and sending them (system calls) overlap.
func (r *run) startWriter() {
	r.full = make(chan *bufset, nBufsets)
	r.free = make(chan *bufset, nBufsets)
	r.wdone = make(chan struct{})
	for range nBufsets - 1 {
		r.free <- &bufset{arena: make([]byte, 0, arenaSize)}
	}
	go func() {
		defer close(r.wdone)
		for bs := range r.full {
			if r.werr == nil {
				if err := r.out.Write(r.ctx, bs.batch); err != nil {
					r.werr = fmt.Errorf("write packets: %w", err)
				} else if sent := r.g.hooks.Sent; sent != nil {
					sent(bs.final, time.Now())
				}
			}
			clear(bs.batch)
			bs.batch, bs.arena = bs.batch[:0], bs.arena[:0]
			r.free <- bs
		}
	}()
}

// stopWriter waits for the writer to deliver everything handed to it.
func (r *run) stopWriter() {
	close(r.full)
	<-r.wdone
	if r.err == nil && r.werr != nil {
		r.err = r.werr
	}
}

// flushBatch hands the batch to the writer, pacing at cfg.Rate, and takes
// an empty one.
func (r *run) flushBatch() {
	if len(r.batch) == 0 || r.err != nil {
		r.batch, r.arena = r.batch[:0], r.arena[:0]
		return
	}
	if err := r.ctx.Err(); err != nil {
		r.err, r.stopped = err, true
		return
	}
	if r.cfg.Rate > 0 {
		due := r.paceStart.Add(time.Duration(float64(r.delivered) / r.cfg.Rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.ctx.Done():
				t.Stop()
				r.err, r.stopped = r.ctx.Err(), true
				return
			}
		}
	}
	r.delivered += int64(len(r.batch))
	r.full <- &bufset{batch: r.batch, arena: r.arena, final: r.final}
	bs := <-r.free // after the writer finished a Write: werr is visible
	if r.werr != nil {
		r.err, r.stopped = r.werr, true
	}
	r.batch, r.arena = bs.batch, bs.arena
}

// appendUserID appends `xroot/user.sess:sid@host` for a client session.
func (r *run) appendUserID(dst []byte, s *server, ss *session) []byte {
	hosts := r.g.v4Hosts
	if ss.ipv6 {
		hosts = r.g.v6Hosts
	}
	return packet.AppendUserID(dst, packet.UserID{
		Prot: protXroot,
		User: r.g.users[ss.user].name.b,
		PID:  strconv.AppendUint(r.num[:0], uint64(ss.num), 10),
		SID:  s.sidDec,
		Host: hosts[ss.host].name.b,
	})
}

func (r *run) hostOf(ss *session) *hostInfo {
	if ss.ipv6 {
		return &r.g.v6Hosts[ss.host]
	}
	return &r.g.v4Hosts[ss.host]
}

// sendMap sends a map record with the text in r.info.
func (r *run) sendMap(s *server, code byte, dict uint32) bool {
	if !r.room() {
		return false
	}
	start := len(r.arena)
	r.arena = packet.AppendMap(r.arena, packet.Header{Code: code, Pseq: s.pseqMain, Stod: uint32(s.stod)}, dict, r.info)
	s.pseqMain++
	r.emit(s, domMain, r.arena[start:])
	return true
}

func (r *run) sendIdent(s *server) bool {
	b := append(r.info[:0], "=/"...)
	b = append(b, srvUser...)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(s.pid), 10)
	b = append(b, ':')
	b = append(b, s.sidDec...)
	b = append(b, '@')
	b = append(b, s.host.b...)
	b = append(b, '\n')
	b = packet.AppendServerIdent(b, packet.ServerIdent{Site: s.site.b, Port: 1094, Inst: instAnon, Program: pgmXrootd, Version: verXrootd})
	r.info = b
	s.identAt = r.now
	return r.sendMap(s, packet.CodeIdent, 0)
}

// fRoom starts the server's f-stream buffer or flushes it when a record of
// size bytes would not fit.
func (r *run) fRoom(s *server, size int) bool {
	if s.fOn && s.fb.Len()+size > r.cfg.FBSZ {
		if !r.flushF(s) {
			return false
		}
	}
	if !s.fOn {
		s.fb.Reset(s.fbuf[:0], packet.Header{Pseq: s.pseqF, Stod: uint32(s.stod)}, sec(r.now), sec(r.now), s.sid, true)
		s.fOn = true
	}
	return !r.stopped
}

// flushF sends the server's f-stream buffer and applies its records to the
// truth.
func (r *run) flushF(s *server) bool {
	if !s.fOn {
		return true
	}
	if !r.room() {
		return false
	}
	pkt := s.fb.Finish(sec(r.now))
	s.fbuf = pkt[:0]
	start := len(r.arena)
	r.arena = append(r.arena, pkt...)
	s.fOn = false
	s.pseqF++
	r.emit(s, domF, r.arena[start:])
	for i := range s.ops {
		op := &s.ops[i]
		a := &r.accs[op.acc]
		switch op.kind {
		case opOpen:
			a.state = accSent
		case opXfr:
			a.xr, a.xv, a.xw, a.xAt = op.r, op.v, op.w, op.at
		case opClose:
			r.finalize(op.acc, record.Complete)
		}
	}
	s.ops = s.ops[:0]
	return true
}

// gRoom makes room for a line of n bytes in the server's g buffer p.
func (r *run) addG(s *server, p int, line []byte) bool {
	gb := &s.g[p]
	if len(gb.ends) > 0 && packet.GStreamHeaderSize+len(gb.data)+len(line)+1 > r.cfg.GBuff {
		if !r.flushG(s, p) {
			return false
		}
	}
	if len(gb.ends) == 0 {
		gb.tBeg, gb.t0 = sec(r.now), r.now
	}
	gb.tEnd = sec(r.now)
	gb.data = append(gb.data, line...)
	gb.ends = append(gb.ends, int32(len(gb.data)))
	return true
}

var providers = [2]byte{packet.ProviderCache, packet.ProviderTPC}

func (r *run) flushG(s *server, p int) bool {
	gb := &s.g[p]
	if len(gb.ends) == 0 {
		return true
	}
	if !r.room() {
		return false
	}
	r.lines = r.lines[:0]
	prev := int32(0)
	for _, e := range gb.ends {
		r.lines = append(r.lines, gb.data[prev:e])
		prev = e
	}
	start := len(r.arena)
	r.arena = packet.AppendGStream(r.arena, packet.Header{Pseq: gb.pseq, Stod: uint32(s.stod)}, gb.tBeg, gb.tEnd, providers[p], s.sid, r.lines)
	clear(r.lines)
	gb.pseq++
	r.tally[s.idx].events[p] += int64(len(gb.ends))
	gb.data, gb.ends = gb.data[:0], gb.ends[:0]
	r.emit(s, domGC+p, r.arena[start:])
	return true
}

// tick runs a server's fstat timer: isXfr for open files, the f-stream
// flush, g-stream flush timers and the periodic ident.
func (r *run) tick(s *server) {
	cfg := r.cfg
	s.ticks++
	if s.redir {
		if r.now-s.identAt < cfg.IdentInterval.Milliseconds() || r.sendIdent(s) {
			r.schedule(r.now+cfg.FStat.Milliseconds(), evTick, int32(s.idx), 0)
		}
		return
	}
	if s.ticks%cfg.XfrEvery == 0 {
		base := s.idx * cfg.Clients
		for k := range cfg.Clients {
			c := &r.clients[base+k]
			if c.state != stFile {
				continue
			}
			a := &r.accs[c.acc]
			rd, rv, wr := a.progress(r.now)
			if rd == a.gr && rv == a.gv && wr == a.gw {
				continue // no I/O since the last report
			}
			if !r.fRoom(s, packet.XfrSize) {
				return
			}
			s.fb.Xfr(packet.FileXfr{FileID: a.fileID, Read: rd, Readv: rv, Write: wr})
			a.gr, a.gv, a.gw = rd, rv, wr
			s.ops = append(s.ops, fop{kind: opXfr, acc: c.acc, r: rd, v: rv, w: wr, at: r.now})
		}
	}
	if !r.flushF(s) {
		return
	}
	for p := range s.g {
		if len(s.g[p].ends) > 0 && r.now-s.g[p].t0 >= cfg.GFlush.Milliseconds() {
			if !r.flushG(s, p) {
				return
			}
		}
	}
	if r.now-s.identAt >= cfg.IdentInterval.Milliseconds() {
		if !r.sendIdent(s) {
			return
		}
	}
	r.schedule(r.now+cfg.FStat.Milliseconds(), evTick, int32(s.idx), 0)
}

// step advances a client's state machine.
func (r *run) step(c *client) {
	switch c.state {
	case stIdle:
		r.login(c)
	case stSession:
		if c.filesLeft <= 0 {
			r.logout(c)
		} else {
			r.open(c)
		}
	case stFile:
		if c.forceNow {
			r.closeFile(c, true)
			if c.state == stSession {
				r.logout(c)
			}
			return
		}
		r.closeFile(c, false)
		if c.state == stSession {
			gap := r.cfg.ThinkTime.Milliseconds()/10 + 1
			r.schedule(r.now+1+r.servers[c.srv].rng.Int64N(gap), evClient, c.idx, c.gen)
		}
	}
}

func (r *run) login(c *client) {
	s := &r.servers[c.srv]
	cfg, rng := r.cfg, s.rng
	ss := session{
		user:    int32(rng.IntN(len(r.g.users))),
		host:    int32(rng.IntN(len(r.g.v4Hosts))),
		app:     int32(rng.IntN(len(r.g.apps))),
		info:    int32(rng.IntN(len(r.g.infos))),
		ipv6:    rng.Float64() < cfg.IPv6Frac,
		token:   rng.Float64() < cfg.TokenFrac,
		hasInfo: rng.Float64() < cfg.InfoFrac,
		ueac:    rng.Float64() < cfg.UEACFrac,
		exp:     int32(2 + rng.IntN(9)),
		act:     int32(1 + rng.IntN(5)),
		num:     s.nextSess,
		dict:    s.nextDict,
	}
	s.nextSess++
	s.nextDict++
	c.sess = ss
	c.filesLeft = int32(1 + rng.IntN(cfg.FilesPerSession))
	c.forced = rng.Float64() < cfg.ForcedFrac
	u := &r.g.users[ss.user]
	h := r.hostOf(&ss)

	ipv := byte(4)
	if ss.ipv6 {
		ipv = 6
	}
	l := packet.Login{
		HasAuth: true, AuthProt: authGSI, Name: u.dn.b, Host: h.name.b, Org: u.vo.b,
		Role: u.role.b, Groups: u.groups.b, MonInfo: u.dn.b,
		Release: relClient, App: r.g.apps[ss.app].b, IPv: ipv,
	}
	if ss.token {
		l.AuthProt, l.MonInfo = authZTN, nil
	}
	b := r.appendUserID(r.info[:0], s, &ss)
	b = append(b, '\n')
	r.info = packet.AppendLogin(b, l)
	if !r.sendMap(s, packet.CodeUser, ss.dict) {
		return
	}
	if ss.token {
		b := r.appendUserID(r.info[:0], s, &ss)
		b = append(b, '\n')
		r.info = packet.AppendToken(b, packet.Token{UserDictID: ss.dict, Subject: u.subject.b, Name: u.tokenUser.b, Org: u.tokenOrg.b, Role: u.role.b, Groups: u.groups.b})
		if !r.sendMap(s, packet.CodeToken, s.nextDict) {
			return
		}
		s.nextDict++
	}
	if ss.hasInfo {
		b := r.appendUserID(r.info[:0], s, &ss)
		b = append(b, '\n')
		r.info = append(b, r.g.infos[ss.info].b...)
		if !r.sendMap(s, packet.CodeInfo, s.nextDict) {
			return
		}
		s.nextDict++
	}
	if ss.ueac {
		b := r.appendUserID(r.info[:0], s, &ss)
		b = append(b, '\n')
		r.info = packet.AppendUEAC(b, packet.UEAC{UserDictID: ss.dict, Experiment: ss.exp, Activity: ss.act})
		if !r.sendMap(s, packet.CodeUEAC, s.nextDict) {
			return
		}
		s.nextDict++
	}
	if !r.redirLogins(c, u) {
		return
	}
	r.sessions++
	c.state = stSession
	r.schedule(r.now+100+rng.Int64N(900), evClient, c.idx, c.gen)
}

var (
	authGSI = []byte("gsi")
	authZTN = []byte("ztn")
)

func (r *run) logout(c *client) {
	s := &r.servers[c.srv]
	if !r.fRoom(s, packet.DiscSize) {
		return
	}
	s.fb.Disc(c.sess.dict)
	c.state = stIdle
	think := r.cfg.ThinkTime.Milliseconds()
	wait := int64(1)
	if think > 0 {
		wait += int64(s.rng.ExpFloat64() * float64(think))
	}
	r.schedule(r.now+wait, evClient, c.idx, c.gen)
}

var readSizes = []int64{64 << 10, 128 << 10, 256 << 10, 1 << 20, 4 << 20}

func (r *run) open(c *client) {
	s := &r.servers[c.srv]
	cfg, rng := r.cfg, s.rng
	ai := r.allocAccess()
	a := &r.accs[ai]
	*a = access{srv: c.srv, state: accPending, stod: s.stod, sess: c.sess, start: r.now}
	a.fileID = s.nextDict
	s.nextDict++
	a.rw = rng.Float64() < cfg.WriteFrac
	lo, hi := math.Log(float64(cfg.FileSizeMin)), math.Log(float64(cfg.FileSizeMax))
	size := int64(math.Exp(lo + rng.Float64()*(hi-lo)))
	size = min(max(size, cfg.FileSizeMin), cfg.FileSizeMax)
	var lfn []byte
	if a.rw {
		a.path = int32(rng.IntN(len(r.g.writePaths)))
		lfn = r.g.writePaths[a.path].p.b
		a.tw = size
		a.wrSize = []int64{1 << 20, 4 << 20, 8 << 20}[rng.IntN(3)]
	} else {
		a.path = int32(rng.IntN(len(r.g.readPaths)))
		lfn = r.g.readPaths[a.path].p.b
		a.size = size
		total := size
		if rng.IntN(2) == 0 {
			total = int64(float64(size) * (0.05 + 0.95*rng.Float64()))
		}
		a.rdSize = readSizes[rng.IntN(len(readSizes))]
		if rng.Float64() < cfg.ReadvFrac {
			a.readv = true
			a.tv = int64(float64(total) * (0.3 + 0.6*rng.Float64()))
			a.rvSize = 256<<10 + rng.Int64N(2<<20)
			a.rvSegs = 8 + rng.Int64N(57)
		}
		a.tr = total - a.tv
		a.cache = s.cache
	}
	a.tpc = rng.Float64() < cfg.TPCFrac
	dur := cfg.TransferMin.Milliseconds()
	if span := cfg.TransferMax.Milliseconds() - dur; span > 0 {
		dur += rng.Int64N(span + 1)
	}
	if cfg.LongFrac > 0 && rng.Float64() < cfg.LongFrac {
		dur = cfg.LongTransfer.Milliseconds()
	}
	a.end = r.now + dur

	if !r.redirects(c, a, lfn) {
		return
	}
	a.seqRead = rng.Float64() < 0.7
	b := r.appendUserID(r.info[:0], s, &c.sess)
	b = append(b, '\n')
	r.info = append(b, lfn...)
	if !r.sendMap(s, packet.CodePath, a.fileID) {
		return
	}
	if !r.fRoom(s, packet.OpenRecordSize(len(lfn))) {
		return
	}
	s.fb.Open(packet.FileOpen{FileID: a.fileID, FileSize: a.size, RW: a.rw, HasLFN: true, User: c.sess.dict, LFN: lfn})
	s.ops = append(s.ops, fop{kind: opOpen, acc: ai})
	c.state, c.acc = stFile, ai
	c.filesLeft--
	at := a.end
	c.forceNow = false
	if c.forced && c.filesLeft == 0 {
		c.forceNow = true
		at = r.now + dur/2
	}
	r.schedule(at, evClient, c.idx, c.gen)
}

// progress returns the cumulative bytes of the access at ms now.
func (a *access) progress(now int64) (rd, rv, wr int64) {
	el, dur := now-a.start, a.end-a.start
	return scale(a.tr, el, dur), scale(a.tv, el, dur), scale(a.tw, el, dur)
}

// scale returns total*el/dur, clamped to [0, total].
func scale(total, el, dur int64) int64 {
	if el >= dur || total == 0 {
		if el <= 0 && dur > 0 {
			return 0
		}
		return total
	}
	if el <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(total), uint64(el))
	q, _ := bits.Div64(hi, lo, uint64(dur))
	return int64(q)
}

func (r *run) closeFile(c *client, forced bool) {
	s := &r.servers[c.srv]
	ai := c.acc
	a := &r.accs[ai]
	rd, rv, wr := a.progress(r.now)
	if !r.fRoom(s, packet.CloseSSQSize) {
		return
	}
	ops, ssq := a.stats(rd, rv, wr)
	if r.cfg.Trace != "" && !r.trace(s, a, rd, rv, wr) {
		return
	}
	s.fb.Close(packet.FileClose{FileID: a.fileID, Forced: forced, Read: rd, Readv: rv, Write: wr, HasOps: true, Ops: ops, HasSSQ: true, SSQ: ssq})
	a.fr, a.fv, a.fw, a.closedAt, a.forced, a.closed = rd, rv, wr, r.now, forced, true
	s.ops = append(s.ops, fop{kind: opClose, acc: ai})
	c.state, c.acc = stSession, -1
	if a.cache && rd+rv > 0 {
		r.cacheEvent(s, a)
	}
	if a.tpc {
		r.tpcEvent(s, a)
	}
}

// chunks splits total bytes into calls of size bytes: the count, the
// smallest and largest call and the sum of squares.
func chunks(total, size int64) (n, lo, hi int64, sq float64) {
	if total <= 0 || size <= 0 {
		return 0, 0, 0, 0
	}
	n = (total + size - 1) / size
	last := total - (n-1)*size
	hi = size
	if n == 1 {
		hi = total
	}
	return n, last, hi, float64(n-1)*float64(size)*float64(size) + float64(last)*float64(last)
}

// stats returns the OPS and SSQ blocks of a close with the given bytes.
func (a *access) stats(rd, rv, wr int64) (packet.Ops, packet.SSQ) {
	var o packet.Ops
	var q packet.SSQ
	n, lo, hi, sq := chunks(rd, a.rdSize)
	o.Read, o.RdMin, o.RdMax, q.Read = int32(n), int32(lo), int32(hi), sq
	n, lo, hi, sq = chunks(rv, a.rvSize)
	o.Readv, o.RvMin, o.RvMax, q.Readv = int32(n), int32(lo), int32(hi), sq
	if n > 0 {
		o.RsMin, o.RsMax, o.Rsegs = int16(a.rvSegs), int16(a.rvSegs), n*a.rvSegs
		q.ReadvSegs = float64(n) * float64(a.rvSegs) * float64(a.rvSegs)
	}
	n, lo, hi, sq = chunks(wr, a.wrSize)
	o.Write, o.WrMin, o.WrMax, q.Write = int32(n), int32(lo), int32(hi), sq
	return o, q
}

func (r *run) allocAccess() int32 {
	if n := len(r.freeAcc); n > 0 {
		ai := r.freeAcc[n-1]
		r.freeAcc = r.freeAcc[:n-1]
		return ai
	}
	r.accs = append(r.accs, access{})
	return int32(len(r.accs) - 1)
}

func (r *run) freeAccess(ai int32) {
	r.accs[ai].state = accFree
	r.freeAcc = append(r.freeAcc, ai)
}

// restart ends the server process abruptly after a last flush: the files
// still open become server_restart partials, and a new process (new stod,
// dictids and sequence numbers from the start) announces itself.
func (r *run) restart(s *server) {
	if !r.flushF(s) || !r.flushG(s, 0) || !r.flushG(s, 1) {
		return
	}
	base := s.idx * r.cfg.Clients
	for k := range r.cfg.Clients {
		c := &r.clients[base+k]
		if c.state == stFile {
			r.finalize(c.acc, record.ServerRestart)
		}
		c.state, c.acc = stIdle, -1
		c.gen++
		r.schedule(r.now+1+s.rng.Int64N(r.cfg.ThinkTime.Milliseconds()+1), evClient, int32(base+k), c.gen)
	}
	s.stod = max(r.now/1000, s.stod+1)
	s.pid++
	s.pseqMain, s.pseqF = 0, 0
	s.g[0].pseq, s.g[1].pseq = 1, 1
	s.nextDict, s.nextSess = 1, 0
	r.tally[s.idx].stods = append(r.tally[s.idx].stods, s.stod)
	r.sendIdent(s)
}

// finalize records the expected record of an access and frees it.
func (r *run) finalize(ai int32, reason record.Reason) {
	a := &r.accs[ai]
	s := &r.servers[a.srv]
	rec := record.Record{Reason: reason}
	end := a.closedAt
	if reason == record.Complete {
		rec.ReadBytes, rec.ReadvBytes, rec.WriteBytes = a.fr, a.fv, a.fw
		rec.Forced = a.forced
		ops, ssq := a.stats(a.fr, a.fv, a.fw)
		rec.HasOps, rec.HasSSQ = true, true
		rec.ReadOps, rec.ReadvOps, rec.WriteOps = ops.Read, ops.Readv, ops.Write
		rec.ReadvSegs, rec.ReadvSegsMin, rec.ReadvSegsMax = ops.Rsegs, ops.RsMin, ops.RsMax
		rec.ReadMin, rec.ReadMax, rec.ReadvMin, rec.ReadvMax = ops.RdMin, ops.RdMax, ops.RvMin, ops.RvMax
		rec.WriteMin, rec.WriteMax = ops.WrMin, ops.WrMax
		rec.ReadSqSum, rec.ReadvSqSum, rec.ReadvSegSqSum, rec.WriteSqSum = ssq.Read, ssq.Readv, ssq.ReadvSegs, ssq.Write
		if r.cfg.Trace != "" {
			rec.HasIO, rec.IO = true, a.io
		}
		if a.hops > 0 {
			// The open happened at a.start; what a collector can know of
			// it is bounded by the f-stream packet's span, so the truth
			// is the exact delay in both fields (see Truth).
			rec.RedirectHops = a.hops
			rec.RedirectDelayMS, rec.RedirectDelayMaxMS = a.start-a.rfirst, a.start-a.rfirst
		}
	} else {
		rec.ReadBytes, rec.ReadvBytes, rec.WriteBytes = a.xr, a.xv, a.xw
		end = max(a.xAt, a.start)
	}
	r.reasons[reason]++
	r.tally[a.srv].bytes.add(&rec)
	r.users[a.sess.user].add(&rec)
	if hook := r.g.hooks.Record; r.cfg.KeepRecords || hook != nil {
		r.fillRecord(&rec, s, a, end)
		if hook != nil {
			// Through a copy owned by the run: passing &rec itself would
			// make every record escape to the heap, hook or not.
			r.hookRec = rec
			hook(r.final, &r.hookRec)
		}
		if r.cfg.KeepRecords {
			r.truth.Records = append(r.truth.Records, rec)
		}
	}
	r.final++
	r.freeAccess(ai)
}

func (r *run) fillRecord(rec *record.Record, s *server, a *access, end int64) {
	u := &r.g.users[a.sess.user]
	ss := &a.sess
	rec.Start = time.UnixMilli(a.start).UTC()
	rec.End = time.UnixMilli(end).UTC()
	rec.ServerIP, rec.ServerHost, rec.ServerID, rec.ServerStod = s.ip, s.host.s, s.sid, a.stod
	rec.Site, rec.Instance, rec.Program, rec.Version = s.site.s, "anon", "xrootd", "v5.7.1"
	rec.Protocol, rec.User, rec.UserDictID = "xroot", u.name.s, ss.dict
	rec.ClientHost, rec.IPv6 = r.hostOf(ss).name.s, ss.ipv6
	rec.AuthProtocol, rec.DN, rec.MonInfo = "gsi", u.dn.s, u.dn.s
	if ss.token {
		rec.AuthProtocol, rec.MonInfo = "ztn", ""
		rec.TokenSubject, rec.TokenUser, rec.TokenOrg, rec.TokenRole, rec.TokenGroups = u.subject.s, u.tokenUser.s, u.tokenOrg.s, u.role.s, u.groups.s
	}
	rec.VO, rec.Role, rec.Groups = u.vo.s, u.role.s, u.groups.s
	rec.ClientRelease, rec.AppName = "v5.7.1", r.g.apps[ss.app].s
	if ss.hasInfo {
		rec.AppInfo = r.g.infos[ss.info].s
	}
	if ss.ueac {
		rec.Experiment, rec.Activity = ss.exp, ss.act
	}
	rec.FileID, rec.FileSize, rec.ReadWrite = a.fileID, a.size, a.rw
	if a.rw {
		rec.Path = r.g.writePaths[a.path].p.s
	} else {
		rec.Path = r.g.readPaths[a.path].p.s
	}
}
