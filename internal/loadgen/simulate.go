package loadgen

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"time"

	"github.com/xrdmon/xrdmon/internal/minheap"
	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// The simulation: servers, their client slots and the sessions and file
// accesses those run, on a virtual clock driven by an event heap. What a
// server sends about it is in emit.go, how packets reach the output in
// batch.go, and what the collector must find in truth.go.

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

// Less orders the event queue (a minheap): by time, then sequence.
func (e *event) Less(o *event) bool {
	return e.at < o.at || e.at == o.at && e.seq < o.seq
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
	// the summary counters (Config.SummaryInterval), of this process
	sumAt, sumIn, sumOut, sumOpens int64
	sumErr                         int64    // forced closes: the server's xrootd.err
	sumPrev                        [4]int64 // in, out, opens, errors at the last summary; -1: none yet
	sumOpen                        int64    // files open

	fb     packet.FStreamBuilder
	fbuf   []byte
	fOn    bool
	ops    []fop
	g      [2]gbuf // C, P
	held   []byte
	isHeld bool
	heldD  int
	// a redirector's r-stream buffer (Config.RedirectWindow)
	redirs  []pendRedir
	rtext   []byte
	rStart  int64 // ms: when the buffer's first redirect was added
	rMarkMs int64 // ms: its timing mark (no redirect of it is earlier)
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
	r.events = minheap.Push(r.events, event{at: at, seq: r.seq, idx: idx, gen: gen, kind: kind})
}

func (r *run) loop() {
	for len(r.events) > 0 && !r.stopped {
		if r.events[0].at >= r.endMs {
			return
		}
		var e event
		r.events, e = minheap.Pop(r.events)
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

func (r *run) hostOf(ss *session) *hostInfo {
	if ss.ipv6 {
		return &r.g.v6Hosts[ss.host]
	}
	return &r.g.v4Hosts[ss.host]
}

// drain closes every open file and ends every session, at the end of the
// run.
func (r *run) drain() {
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

// login starts a session on the client's slot: it is announced with its
// map records, at the server and at every redirector, and its first file
// is opened shortly after.
func (r *run) login(c *client) {
	s := &r.servers[c.srv]
	r.newSession(c, s)
	if !r.sendLogin(s, &c.sess) || !r.redirLogins(c, &r.g.users[c.sess.user]) {
		return
	}
	r.sessions++
	c.state = stSession
	r.schedule(r.now+100+s.rng.Int64N(900), evClient, c.idx, c.gen)
}

// newSession draws the client's next session: who logs in from where with
// what, how many files it opens and whether it ends with a forced
// disconnect.
func (r *run) newSession(c *client, s *server) {
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
}

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

// open opens a file for the client: the access is planned, its redirects,
// path and isOpen are sent, and the client's next step is the close (for
// the last file of a forced session, the disconnect half-way through).
func (r *run) open(c *client) {
	s := &r.servers[c.srv]
	ai, lfn := r.planAccess(c, s)
	a := &r.accs[ai]
	if !r.redirects(c, a, lfn) {
		return
	}
	a.seqRead = s.rng.Float64() < 0.7
	if !r.sendOpen(s, &c.sess, ai, lfn) {
		return
	}
	c.state, c.acc = stFile, ai
	c.filesLeft--
	at := a.end
	c.forceNow = false
	if c.forced && c.filesLeft == 0 {
		c.forceNow = true
		at = r.now + (a.end-a.start)/2
	}
	r.schedule(at, evClient, c.idx, c.gen)
}

// planAccess draws a new access of the client: the file (a new one to
// write or one to read, in full or in part, with vector reads or not), its
// calls' sizes and how long it lasts. It returns the access and its path.
func (r *run) planAccess(c *client, s *server) (int32, []byte) {
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
	return ai, lfn
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
	s.sumOut, s.sumIn, s.sumOpen = s.sumOut+rd+rv, s.sumIn+wr, s.sumOpen-1
	if forced {
		s.sumErr++
	}
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

// chunkLen returns the length of chunk i of the n that chunks makes:
// size, and last for the last one.
func chunkLen(i, n, size, last int64) int64 {
	if i == n-1 {
		return last
	}
	return size
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
	if !r.flushServer(s) {
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
	// A new process counts from zero; its first summary's values are
	// increases since the start.
	s.sumIn, s.sumOut, s.sumOpens, s.sumOpen, s.sumErr = 0, 0, 0, 0, 0
	if s.sumPrev[0] >= 0 {
		s.sumPrev = [4]int64{}
	}
	s.pseqMain, s.pseqF = 0, 0
	s.g[0].pseq, s.g[1].pseq = 1, 1
	s.nextDict, s.nextSess = 1, 0
	r.tally[s.idx].stods = append(r.tally[s.idx].stods, s.stod)
	r.sendIdent(s)
}
