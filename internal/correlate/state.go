package correlate

import (
	"net/netip"
)

// link is one node's place in an intrusive doubly linked list of slab
// indices; -1 ends a list.
type link struct{ prev, next int32 }

// list is the head of an intrusive list.
type list struct {
	head, tail int32
	n          int32
}

func newList() list { return list{head: -1, tail: -1} }

type node[T any] interface {
	*T
	lk(k int) *link
}

func lpush[T any, P node[T]](slab *slab[T], l *list, k int, i int32) {
	n := P(slab.at(i)).lk(k)
	n.prev, n.next = l.tail, -1
	if l.tail >= 0 {
		P(slab.at(l.tail)).lk(k).next = i
	} else {
		l.head = i
	}
	l.tail = i
	l.n++
}

func lremove[T any, P node[T]](slab *slab[T], l *list, k int, i int32) {
	n := P(slab.at(i)).lk(k)
	if n.prev >= 0 {
		P(slab.at(n.prev)).lk(k).next = n.next
	} else {
		l.head = n.next
	}
	if n.next >= 0 {
		P(slab.at(n.next)).lk(k).prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next = -1, -1
	l.n--
}

// ltouch moves i to the tail of l (most recently used).
func ltouch[T any, P node[T]](slab *slab[T], l *list, k int, i int32) {
	if l.tail == i {
		return
	}
	lremove[T, P](slab, l, k, i)
	lpush[T, P](slab, l, k, i)
}

// Lists a file belongs to.
const (
	fileLRU  = 0 // Shard.lru (open) or Shard.pendFiles (waiting)
	fileInc  = 1 // incarnation.files, in LRU order
	fileSess = 2 // session.files, when sess >= 0
)

// File flags.
const (
	fOpen    uint8 = 1 << iota // the isOpen was seen
	fRW                        // opened read/write
	fPending                   // waiting in pendFiles with reason pend
	fClosed                    // close seen before its open (waits for it)
	fXfr                       // an isXfr was seen
)

// fileEntry is one open file access. Its size is what the bound on open
// files costs per file (see TestMemoryPerOpenFile): times are uint32 Unix
// seconds, references are ids and slab indices, lists are intrusive.
type fileEntry struct {
	path             string // interned, valid UTF-8
	size             int64
	read, readv, wrt int64  // cumulative bytes from the last isXfr (or isClose)
	inc              uint32 // incarnation id
	fileID           uint32
	user             uint32 // user dictid from the open (0: unknown)
	sess             int32  // session slab index, -1 when not linked
	tOpen            uint32 // server clock: tBeg of the packet with the open (first record)
	tLast            uint32 // server clock: tEnd of the last packet about the file
	seen             uint32 // collector clock: last news, for the TTLs
	queued           uint32 // collector clock: when put at the tail of its LRU lists
	flags            uint8
	pend             uint8 // reason index while fPending
	// prog is 1 + the index in Shard.prog of the file's newest progress
	// snapshot not yet taken, valid while progGen is Shard.progGen.
	prog    int32
	progGen uint32
	ln      [3]link
}

func (f *fileEntry) lk(k int) *link { return &f.ln[k] }

// Lists a session belongs to.
const (
	sessLRU = 0 // Shard.sessLRU (active) or Shard.sessDisc (disconnected)
	sessInc = 1 // incarnation.sessions
)

// loginInfo is the parsed payload of a u record, shared by every session
// with the same payload text.
type loginInfo struct {
	authProt, dn, host, vo, role, groups, monInfo, release, app, info string
	ipv6                                                              bool
	snap                                                              snapRef
}

// tokenInfo is the payload of a T record.
type tokenInfo struct {
	subject, name, org, role, groups string
	snap                             snapRef
}

// snapRef is where a login or token shared by sessions was written in
// the snapshot being taken: its number there, valid while epoch is the
// snapshot's (snapScratch.epoch), so that a snapshot needs no map of
// every login it wrote.
type snapRef struct{ epoch, id uint32 }

// session is one user login (u record), keyed by (incarnation, dictid).
type session struct {
	prot, user string
	host       string
	textRaw    string // the userid text when its parts do not spell it (usertext.go)
	textKey    uint64 // the text's key in the incarnation's byText index
	pid, sid   uint64 // the text's pid and sid
	login      *loginInfo
	token      *tokenInfo
	appInfo    string
	inc        uint32
	dictID     uint32
	exp, act   int32
	hasUEAC    bool
	disc       bool
	seen       int64 // collector clock
	cost       int64 // bytes counted in Shard.sessBytes (resizeSession)
	files      list
	ln         [2]link
}

func (s *session) lk(k int) *link { return &s.ln[k] }

// incKey identifies a server incarnation (§7.1): sender IP, stod and sID.
type incKey struct {
	addr netip.Addr
	stod uint32
	sid  uint64
}

type addrSID struct {
	addr netip.Addr
	sid  uint64
}

type addrStod struct {
	addr netip.Addr
	stod uint32
}

type provSeq struct {
	prov byte // provider; +0x80 for text-header streams (mod 1000)
	t    seqTracker
}

// incarnation is one server process lifetime: all state of one
// (sender, stod, sID). Its id is never reused, so keys built from it stay
// unique after it is gone.
type incarnation struct {
	id                   uint32
	key                  incKey
	ip                   string
	hasSID               bool
	frm                  bool // an FRM daemon (from its '=' or p/x records)
	traced               bool // its t-stream traces I/O (trace.go)
	superseded           bool // a newer stod from the same sender and sID exists
	site, inst, pgm, ver string
	host                 string            // host from the '=' userid
	seen                 int64             // collector clock
	heard                [NumStreams]int64 // collector clock, Unix s: last datagram of each stream (Output.Activity)
	files                list
	sessions             list
	byText               index[int32] // userid text (textKey) -> latest session
	seq                  [NumDomains]seqTracker
	gseq                 []provSeq
	lost                 [NumDomains]uint64
	// fileBytes and sessBytes are this server's part of the shard's byte
	// counts: over a budget, the heaviest server gives up entries first.
	fileBytes, sessBytes int64
}

// fifo is a queue of pending references in arrival order; entries whose
// map value was replaced or resolved are skipped when popped.
type fifoEntry struct {
	key  uint64
	at   int64
	kind uint8 // pendPath or pendUser
}

const (
	pendPath uint8 = iota
	pendUser
)

type fifo struct {
	q    []fifoEntry
	head int
	// compactAt is the length at which the queue is next rid of its stale
	// entries (see Shard.pushPending); 0 until the first compaction.
	compactAt int
}

func (f *fifo) push(e fifoEntry) {
	if f.head > 1024 && f.head*2 > len(f.q) {
		n := copy(f.q, f.q[f.head:])
		f.q = f.q[:n]
		f.head = 0
	}
	f.q = append(f.q, e)
}

func (f *fifo) len() int { return len(f.q) - f.head }

// minCompact is the least length at which the queue is compacted.
const minCompact = 1024

func (f *fifo) front() *fifoEntry { return &f.q[f.head] }

func (f *fifo) pop() {
	f.head++
	if f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0
	}
}

func dictKey(inc, dictID uint32) uint64 { return uint64(inc)<<32 | uint64(dictID) }
