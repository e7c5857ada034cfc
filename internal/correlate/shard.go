package correlate

import (
	"bytes"
	"hash/crc32"
	"hash/maphash"
	"net/netip"
	"slices"
	"time"

	"github.com/xrdmon/xrdmon/internal/hashmix"
	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

const sidMask = 1<<48 - 1

// ShardOf returns the shard, 0 <= shard < n, that handles every packet of
// sender: a hash of the sender's IP (not the port, which a DNS refresh can
// change, §7.1), so one server's packets always go to one shard in order.
//
// The hash is fixed (FNV-1a over the 16-byte address, then a 64-bit
// finaliser so that every bit of the result depends on every input bit),
// not seeded per process: a shard's checkpointed state (Snapshot) is
// restored into the shard of the same index after a restart, so a server
// must be routed to the same shard by every process with the same n.
// TestShardOfStable pins values; changing this function orphans every
// checkpoint.
func ShardOf(sender netip.Addr, n int) int {
	if n <= 1 {
		return 0
	}
	return int(addrHash(sender) % uint64(n))
}

// addrHash is the stable hash of ShardOf.
func addrHash(a netip.Addr) uint64 {
	a = a.Unmap()
	b := a.As16()
	if a.Is4() {
		// An IPv4 address is ::ffff:a.b.c.d: the hash of its first 12
		// bytes is the same for all, so only its own 4 bytes are hashed.
		return hashmix.Fmix64(fnv1a(fnvV4Prefix, b[12:]))
	}
	return hashmix.Fmix64(fnv1a(fnvOffset64, b[:]))
}

// fnv1a continues FNV-1a (64-bit) from state h over b.
func fnv1a(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

// FNV-1a's 64-bit offset basis and prime.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// fnvV4Prefix is FNV-1a's state after the 12 bytes every IPv4-mapped
// address starts with (10 zeros, then 0xff 0xff).
var fnvV4Prefix = fnv1a(fnvOffset64, []byte{10: 0xff, 11: 0xff})

type pendingPath struct {
	path string
	user uint32 // dictid of the session whose userid text the d record carried
	sess int32  // that session's slab index then: a hint for linkSession (not checkpointed)
	at   int64
}

type pendingUser struct {
	token    *tokenInfo
	exp, act int32
	hasUEAC  bool
	at       int64
	cost     int64 // bytes counted in Shard.pendBytes (resizeUser)
}

// closeData is a close that arrived before its open; it waits PendingTTL.
type closeData struct {
	c    packet.FileClose
	tEnd uint32
}

// Shard holds the correlation state of the servers routed to it (see
// ShardOf) and turns their datagrams into records and events.
//
// A Shard is not safe for concurrent use: one goroutine calls Handle, Tick,
// Flush and Drain in turn. It never reads the wall clock: every method is
// given the time, so a replay of the same input with the same times gives
// the same output.
type Shard struct {
	cfg     Config
	win     uint8
	seqRes  seqResult // the last packet's sequence classification (observeT)
	pktHash uint32    // CRC-32C of the datagram being handled (seqTracker)
	now     time.Time
	nowS    int64
	nextInc uint32

	incs       map[incKey]*incarnation
	byID       map[uint32]*incarnation
	byAddrStod map[addrStod]*incarnation
	latest     map[addrSID]*incarnation
	byAddr     map[netip.Addr][]*incarnation // per sender, for MaxServersPerAddr
	incList    []*incarnation                // creation order, for deterministic iteration
	last       *incarnation                  // lookup cache

	files     slab[fileEntry]
	fileIdx   index[int32]
	lru       list // open files, least recently used first
	pendFiles list // files waiting to be emitted, oldest first
	closes    map[int32]*closeData

	traces   slab[traceState] // I/O profiles being built (trace.go)
	traceIdx index[int32]
	traceLRU list // least recently updated first

	sess     slab[session]
	sessIdx  index[int32]
	sessLRU  list
	sessDisc list

	paths   index[pendingPath]
	users   index[*pendingUser]
	pending fifo

	names interner
	// textSeed seeds the keys of the byText indexes (usertext.go).
	textSeed maphash.Seed
	// idxSeed mixes the keys of the indexes (index.go).
	idxSeed uint64
	pathsI  interner
	// logins caches the parsed login payloads (intern.go).
	logins loginCache
	// tokens shares the tokens of equal fields (tokenInfo); tokenBytes
	// is what it holds.
	tokens     map[[5]string]*tokenInfo
	tokenBytes int64
	// loginSlab holds new logins' parsed forms, a chunk at a time: one
	// allocation per 64 logins instead of one per login.
	loginSlab []loginInfo

	// Byte counts of the tables with a budget (budget.go); discBytes is
	// the disconnected sessions' part of sessBytes.
	fileBytes, sessBytes, pendBytes, discBytes int64

	// Records are made into fixed chunks of RecordChunk: out is the one
	// being filled, full the filled ones not yet drained, spare empty ones
	// given back (Recycle). A drain that closes thousands of files at once
	// then never regrows and copies one large slice.
	out    []record.Record
	full   [][]record.Record
	spare  [][]record.Record
	events []record.Event
	opens  []Open          // when cfg.ReportOpens
	prog   []record.Record // when cfg.ReportProgress
	// progLink is, per snapshot in prog, 1 + the index of the same file's
	// previous one (0: none), or -1 once dropped; progGen counts the
	// drains, so that a file's index into prog is valid only in the
	// generation it was taken in.
	progLink []int32
	progGen  uint32
	progDead int
	progShed bool  // ShedProgress
	arena    arena // ids and raw lines of the records and events it emits
	stats    Stats
	snap     *snapScratch // Snapshot's buffers, kept between checkpoints
}

// NewShard returns an empty shard. Check cfg with Validate first: NewShard
// panics on an invalid configuration (a programming error).
func NewShard(cfg Config) *Shard {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	seed := indexSeed()
	return &Shard{
		cfg:        cfg,
		win:        uint8(cfg.ReorderWindow),
		incs:       make(map[incKey]*incarnation),
		byID:       make(map[uint32]*incarnation),
		byAddrStod: make(map[addrStod]*incarnation),
		latest:     make(map[addrSID]*incarnation),
		byAddr:     make(map[netip.Addr][]*incarnation),
		fileIdx:    newIndex[int32](seed, 0),
		lru:        newList(),
		pendFiles:  newList(),
		closes:     make(map[int32]*closeData),
		traceIdx:   newIndex[int32](seed, 0),
		traceLRU:   newList(),
		sessIdx:    newIndex[int32](seed, 0),
		sessLRU:    newList(),
		sessDisc:   newList(),
		paths:      newIndex[pendingPath](seed, 0),
		users:      newIndex[*pendingUser](seed, 0),
		names:      newInterner(cfg.InternMax, cfg.budget(shareIntern)),
		pathsI:     newInterner(cfg.InternMax, cfg.budget(shareIntern)),
		logins:     newLoginCache(cfg.budget(shareIntern)),
		tokens:     make(map[[5]string]*tokenInfo),
		textSeed:   maphash.MakeSeed(),
		idxSeed:    seed,
	}
}

// grow returns s with room for one more element, doubling a full s: the
// shard's tables fill fast at start-up and in bursts (a drain, a g-stream
// flood), and append's 1.25x steps would copy them four times over.
func grow[T any](s []T) []T {
	if len(s) < cap(s) {
		return s
	}
	return slices.Grow(s, max(len(s), 16))
}

// RecordChunk is the number of records in one chunk of a shard's output
// (Output.Records).
const RecordChunk = 1024

// maxSpareChunks bounds the empty chunks a shard keeps for reuse.
const maxSpareChunks = 16

// Recycle gives the shard empty chunks for its next records (taken chunks
// or any slices of records; they are cleared, and kept only up to a bound).
func (s *Shard) Recycle(chunks [][]record.Record) {
	for _, c := range chunks {
		if cap(c) < RecordChunk || len(s.spare) >= maxSpareChunks {
			continue
		}
		clear(c)
		s.spare = append(s.spare, c[:0])
	}
}

// nextChunk files the full output chunk and starts an empty one.
func (s *Shard) nextChunk() {
	if len(s.out) > 0 {
		s.full = append(s.full, s.out)
	}
	if n := len(s.spare); n > 0 {
		s.out = s.spare[n-1]
		s.spare[n-1] = nil
		s.spare = s.spare[:n-1]
		return
	}
	s.out = make([]record.Record, 0, RecordChunk)
}

// Stats returns the shard's counters and current state sizes.
func (s *Shard) Stats() Stats {
	st := s.stats
	st.Servers = len(s.incs)
	st.Sessions = s.sessIdx.len()
	st.OpenFiles = s.fileIdx.len()
	st.PendingFiles = int(s.pendFiles.n)
	st.PendingRefs = s.paths.len() + s.users.len()
	st.FileBytes, st.SessionBytes, st.PendingBytes = s.fileBytes, s.sessBytes, s.pendBytes
	st.InternBytes = s.names.size + s.pathsI.size + s.logins.size + s.tokenBytes
	for _, inc := range s.incs {
		for d := range inc.seq {
			st.Missing += int(inc.seq[d].holes(256))
		}
		for i := range inc.gseq {
			mod := uint16(256)
			if inc.gseq[i].prov&0x80 != 0 {
				mod = 1000
			}
			st.Missing += int(inc.gseq[i].t.holes(mod))
		}
	}
	return st
}

func (s *Shard) setNow(now time.Time) {
	s.now = now
	s.nowS = now.Unix()
}

func (s *Shard) reject(r packet.Reason) {
	s.stats.Rejected[r]++
}

func (s *Shard) accept(k packet.Kind) {
	s.stats.Accounted++
	s.stats.ByKind[k]++
}

// Handle decodes one datagram from sender, received at now (the
// collector's clock, used only for TTLs and Record.Received), and applies
// it to the state of its server. data is not retained.
func (s *Shard) Handle(data []byte, sender netip.AddrPort, now time.Time) {
	s.stats.Packets++
	s.setNow(now)
	s.pktHash = crc32.Checksum(data, crcTable)
	addr := sender.Addr().Unmap()
	kind := packet.Classify(data)
	switch kind {
	case packet.KindMap:
		s.handleMap(data, addr)
	case packet.KindFStream:
		s.handleF(data, addr)
	case packet.KindGStream:
		s.handleG(data, addr)
	case packet.KindTrace:
		s.handleTrace(data, addr)
	case packet.KindRedir:
		s.handleRedir(data, addr)
	case packet.KindTextGStream, packet.KindCGIGStream:
		s.handleTextG(data, addr, kind)
	case packet.KindXMLSummary, packet.KindJSONSummary:
		s.handleSummary(data, addr, kind)
	default:
		s.reject(packet.ReasonUnknownCode)
	}
}

// rejectDecoded counts a rejected binary packet; when its header is sound
// and its server known, its sequence number still counts as received, so
// that it is not also counted lost.
func (s *Shard) rejectDecoded(data []byte, addr netip.Addr, err error, d Domain) {
	r := packet.ReasonOf(err)
	if r == 0 {
		r = packet.ReasonSyntax
	}
	s.reject(r)
	h, herr := packet.ParseHeader(data)
	if herr != nil {
		return
	}
	if inc := s.byAddrStod[addrStod{addr, h.Stod}]; inc != nil && d != DomainG {
		inc.seq[d].observe(uint16(h.Pseq), 256, s.win, s.pktHash)
	}
}

// resolve returns the incarnation of (addr, stod, sid), creating it (and
// noticing a restart) when new. Without a sID (pre-v4.4 isTime, t-stream
// without window mark, unparseable userid) the latest incarnation of
// (addr, stod) is used, or one with sID 0.
func (s *Shard) resolve(addr netip.Addr, stod uint32, sid uint64, hasSID bool) *incarnation {
	if !hasSID {
		if inc := s.byAddrStod[addrStod{addr, stod}]; inc != nil {
			inc.seen = s.nowS
			return inc
		}
		sid = 0
	}
	k := incKey{addr, stod, sid & sidMask}
	if l := s.last; l != nil && l.key == k {
		l.seen = s.nowS
		return l
	}
	inc := s.incs[k]
	if inc == nil {
		inc = s.newIncarnation(k, hasSID)
	}
	inc.seen = s.nowS
	s.last = inc
	return inc
}

// incOf returns the incarnation with id, nil if there is none. The one
// of the packet being handled (s.last) is checked first: it is almost
// always the one asked for, and a comparison costs less than a look-up.
func (s *Shard) incOf(id uint32) *incarnation {
	if l := s.last; l != nil && l.id == id {
		return l
	}
	return s.byID[id]
}

func (s *Shard) newIncarnation(k incKey, hasSID bool) *incarnation {
	if same := s.byAddr[k.addr]; len(same) >= s.cfg.MaxServersPerAddr {
		// The sender's own least recently seen incarnation makes room (a
		// scan of at most MaxServersPerAddr).
		old := same[0]
		for _, c := range same[1:] {
			if c.seen < old.seen {
				old = c
			}
		}
		s.dropIncarnation(old, rEvicted)
	} else if len(s.incs) >= s.cfg.MaxServers {
		var old *incarnation
		for _, c := range s.incList {
			if old == nil || c.seen < old.seen {
				old = c
			}
		}
		s.dropIncarnation(old, rEvicted)
	}
	s.nextInc++
	inc := &incarnation{
		id:       s.nextInc,
		key:      k,
		ip:       k.addr.String(),
		hasSID:   hasSID,
		files:    newList(),
		sessions: newList(),
		byText:   newIndex[int32](s.idxSeed, 0),
	}
	s.incs[k] = inc
	s.byID[inc.id] = inc
	s.byAddrStod[addrStod{k.addr, k.stod}] = inc
	s.incList = append(s.incList, inc)
	s.byAddr[k.addr] = append(s.byAddr[k.addr], inc)
	as := addrSID{k.addr, k.sid}
	prev := s.latest[as]
	switch {
	case prev == nil:
		s.latest[as] = inc
	case int32(k.stod-prev.key.stod) > 0: // a restart
		s.latest[as] = inc
		s.stats.Restarts++
		prev.superseded = true
		for prev.files.head >= 0 {
			s.finishFile(prev.files.head, rRestart, s.files.at(prev.files.head).tLast, nil)
		}
	}
	return inc
}

// dropIncarnation removes an incarnation and all its state; its open files
// are emitted with reason r (or their pending reason).
func (s *Shard) dropIncarnation(inc *incarnation, r uint8) {
	for inc.files.head >= 0 {
		i := inc.files.head
		s.finishFile(i, r, s.files.at(i).tLast, nil)
	}
	for inc.sessions.head >= 0 {
		s.removeSession(inc.sessions.head)
	}
	for d := range inc.seq {
		inc.lost[d] += inc.seq[d].holes(256)
		s.stats.Lost[d] += inc.seq[d].holes(256)
	}
	for i := range inc.gseq {
		mod := uint16(256)
		if inc.gseq[i].prov&0x80 != 0 {
			mod = 1000
		}
		h := inc.gseq[i].t.holes(mod)
		inc.lost[DomainG] += h
		s.stats.Lost[DomainG] += h
	}
	delete(s.incs, inc.key)
	delete(s.byID, inc.id)
	if s.byAddrStod[addrStod{inc.key.addr, inc.key.stod}] == inc {
		delete(s.byAddrStod, addrStod{inc.key.addr, inc.key.stod})
	}
	if s.latest[addrSID{inc.key.addr, inc.key.sid}] == inc {
		delete(s.latest, addrSID{inc.key.addr, inc.key.sid})
	}
	// From the end: the incarnations dropped most often (a flood of
	// forged ones) are the newest.
	for i := len(s.incList) - 1; i >= 0; i-- {
		if s.incList[i] == inc {
			s.incList = append(s.incList[:i], s.incList[i+1:]...)
			break
		}
	}
	same := s.byAddr[inc.key.addr]
	for i, c := range same {
		if c == inc {
			same = append(same[:i], same[i+1:]...)
			break
		}
	}
	if len(same) == 0 {
		delete(s.byAddr, inc.key.addr)
	} else {
		s.byAddr[inc.key.addr] = same
	}
	if s.last == inc {
		s.last = nil
	}
}

// observe applies the sequence check of domain d and reports whether the
// packet should be applied (false for duplicates).
func (s *Shard) observe(inc *incarnation, d Domain, pseq uint16) bool {
	return s.observeT(inc, &inc.seq[d], d, pseq, 256)
}

func (s *Shard) observeT(inc *incarnation, t *seqTracker, d Domain, pseq, mod uint16) bool {
	res, lost := t.observe(pseq, mod, s.win, s.pktHash)
	s.seqRes = res
	if lost > 0 {
		inc.lost[d] += lost
		s.stats.Lost[d] += lost
	}
	switch res {
	case seqDuplicate:
		s.stats.Duplicates++
		return false
	case seqReordered:
		s.stats.Reordered++
	case seqCollision:
		s.stats.SeqCollisions++
	case seqStale:
		s.stats.Stale++
	}
	return true
}

func (s *Shard) gTracker(inc *incarnation, prov byte) *seqTracker {
	for i := range inc.gseq {
		if inc.gseq[i].prov == prov {
			return &inc.gseq[i].t
		}
	}
	inc.gseq = append(inc.gseq, provSeq{prov: prov})
	return &inc.gseq[len(inc.gseq)-1].t
}

// sidFromUserID extracts the decimal sID from a userid: the text between
// the last ':' before the first '@' and that '@'. This covers
// `prot/user.pid:sid@host`, the FRM forms without "prot/" and
// `frm_purged:sid@localhost`.
func sidFromUserID(uid []byte) (uint64, bool) {
	at := bytes.IndexByte(uid, '@')
	if at < 0 {
		return 0, false
	}
	c := bytes.LastIndexByte(uid[:at], ':')
	if c < 0 {
		return 0, false
	}
	v, ok := decimal(uid[c+1:at], 20) // a 20-digit sid wraps, as it always has
	return v & sidMask, ok
}

var providerNames [256]string

func init() {
	for i := range providerNames {
		providerNames[i] = string(rune(i))
	}
}

func (s *Shard) handleG(data []byte, addr netip.Addr) {
	g, err := packet.DecodeGStream(data)
	if err != nil {
		s.rejectDecoded(data, addr, err, DomainG)
		return
	}
	inc := s.resolve(addr, g.Stod, g.SID, true)
	inc.heard[StreamG] = s.nowS
	s.accept(packet.KindGStream)
	if !s.observeT(inc, s.gTracker(inc, g.Provider&0x7F), DomainG, uint16(g.Pseq), 256) {
		return
	}
	it := g.Lines()
	s.emitEvents(inc, g.Provider, g.Pseq, int64(uint32(g.TEnd)), &it)
}

func (s *Shard) handleTextG(data []byte, addr netip.Addr, kind packet.Kind) {
	t, err := packet.DecodeTextGStream(data)
	if err != nil {
		r := packet.ReasonOf(err)
		if r == 0 {
			r = packet.ReasonSyntax
		}
		s.reject(r)
		return
	}
	inc := s.resolve(addr, t.Stod, t.SID, true)
	inc.heard[StreamG] = s.nowS
	s.accept(kind)
	if t.Code != 'g' {
		return // ident and dict records of text streams carry nothing we keep
	}
	if !s.observeT(inc, s.gTracker(inc, t.Provider|0x80), DomainG, t.Pseq, 1000) {
		return
	}
	it := t.Lines()
	s.emitEvents(inc, t.Provider, uint8(t.Pseq), int64(t.TEnd), &it)
}

func (s *Shard) emitEvents(inc *incarnation, prov byte, pseq uint8, tEnd int64, it *packet.LineIter) {
	at := time.Unix(tEnd, 0).UTC()
	for i := 0; it.Next(); i++ {
		line := it.Line()
		e := s.appendEvent(inc, s.eventID(inc, prov, pseq, tEnd, i, line), record.ProviderType(prov), providerNames[prov], at)
		e.Raw = s.arena.clone(line) // typed by the caller of Drain (record.TypeEvent)
	}
}

// appendEvent appends an event of inc with the given id, type, provider
// and server time, and returns it for the caller to fill in its data.
func (s *Shard) appendEvent(inc *incarnation, id string, typ record.EventType, provider string, at time.Time) *record.Event {
	s.events = append(grow(s.events), record.Event{
		EventID:    id,
		Type:       typ,
		Provider:   provider,
		Time:       at,
		Received:   s.now,
		ServerIP:   inc.ip,
		ServerHost: inc.host,
		ServerID:   inc.key.sid,
		ServerStod: int64(inc.key.stod),
		Site:       inc.site,
	})
	s.stats.Events++
	return &s.events[len(s.events)-1]
}
