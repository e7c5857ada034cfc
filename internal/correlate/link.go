package correlate

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/minheap"
	"github.com/xrdmon/xrdmon/internal/record"
)

// Linker puts the redirection on transfer records: when a redirector and
// the data server it sends clients to both report to this collector, the
// redirect events of the redirector(s) are linked to the open that follows
// at the data server, and the record of that access gets the number of
// hops and bounds on the delay from the first redirect to the open
// (record.RedirectHops, RedirectDelayMS, RedirectDelayMaxMS).
//
// The redirector and the data server are different servers, correlated on
// different shards, so the Linker works after them, where the pipeline
// commits (Commit): it sees every redirect event and every open (Open,
// reported by the shards as files open) and every record.
//
// # Matching rule
//
// A redirect event of an open operation (openr, openw, openc) whose client
// is known (the redirector's u record for its user dictid) and an open
// match when they have the same client host, client user name and path
// (CGI removed) and the open can have happened after the redirect and at
// most Window after it: the redirect happened in its r-stream timing
// window [time, time + window_s + 1) and the open in its f-stream packet's
// span [tBeg, tEnd + 1) (whole seconds), and 2 s are allowed for the two
// servers' clocks. A redirect goes to the earliest matching open; an open
// takes every redirect that goes to it: their number is the hop count.
// The delay from the first redirect to the open is then at least tBeg
// minus the latest the first redirect can have happened (the smallest
// time + window_s + 1), and at most tEnd + 1 minus the earliest (the
// smallest time): the true delay always lies within the bounds.
//
// # When an open is decided (and a record held)
//
// The r-stream is flushed on its own schedule, often after the f-stream
// that carries the open and even the close of a short transfer. So an
// open is decided (its redirects taken) only once the collector's clock is
// Window past the open's arrival: every redirect that reaches the
// collector by then is considered, none later. Until then the record of
// that access, if it comes, is held by the Linker (Commit returns it
// later); a longer transfer's record finds its open decided and gets the
// result at once. Records are held only once a redirect has reached the
// collector (before the record did): without redirectors reporting here,
// nothing waits. Everything is decided from the collector times of the
// inputs (Received), never from when a commit happens, so the same input
// gives the same records whatever the commit boundaries, shards or
// GOMAXPROCS (with input in time order, as a capture is). At the end of
// input (final) every open is decided and every held record returned.
//
// # Where it cannot match
//
//   - A redirect that reaches the collector more than Window after the open
//     (at the open's own arrival), or whose open it cannot tell from
//     another open of the same client and path in the same seconds.
//   - Clients are matched by host and user name as each server wrote them:
//     a client seen by its address at one server and by its name at the
//     other does not match; clients behind one NAT address with the same
//     user name may take each other's redirects.
//   - Redirects without a known client (user dictid 0, or the
//     redirector's login lost) are kept as events but cannot be linked.
//
// A Linker is used by one goroutine (the pipeline's writer). Its memory is
// bounded by MaxBytes: beyond it the oldest waiting entries are forgotten
// and the oldest held records returned without redirection
// (LinkStats.Forgotten); only then can the result depend on timing.
type Linker struct {
	window   int64 // seconds
	maxBytes int64
	hold     int64 // seconds a link waits for its record

	redirs map[linkKey][]linkRedir // redirects not yet taken, oldest first
	opens  map[linkKey][]linkOpen  // opens not yet decided, oldest first
	// openSlab holds the first open of keys, a chunk at a time (addOpen):
	// one allocation per 256 opens instead of one per open.
	openSlab []linkOpen
	pend     map[recKey]int64 // undecided opens: their deadline
	queue    []dueOpen        // undecided opens by deadline (a minheap; stale entries skipped)
	order    []fifoRef        // redirects and opens, in arrival order
	nextID   uint64
	linked   map[recKey]*linkResult
	lorder   []recKey                   // links, in arrival order
	held     map[recKey][]record.Record // records whose open is undecided
	horder   []recKey                   // their keys, in arrival order (for the memory bound)
	nheld    int
	out      []record.Record // held records whose open is decided, to return
	bytes    int64
	now      int64 // collector clock, Unix s: the latest time seen
	// since is when the first redirect reached the collector (0: none
	// yet): records are held only from then on, so a collector without
	// redirectors reporting to it writes every record at once.
	since int64
	// lazy holds, in arrival order from lazyHead, the opens that came
	// while no redirect ever had (since 0): a redirect may still come and
	// go to one of them, but none has been seen, so they are only kept
	// (a copy each) until their deadline, not indexed. The first redirect
	// indexes them (indexLazy), in their order, before it is added: the
	// state is then what indexing each at its arrival would have made.
	// A collector whose redirectors do not report to it pays no more.
	lazy     []Open
	lazyHead int
	stats    LinkStats
}

// fifoRef names a waiting redirect (open false) or open by key and id.
type fifoRef struct {
	key      linkKey
	id       uint64
	received int64
	open     bool
}

// LinkStats counts what the Linker did.
type LinkStats struct {
	Redirects uint64 // redirects of an open with a known client
	Linked    uint64 // records that got their redirection
	Hops      uint64 // redirects on those records
	Forgotten uint64 // redirects and links dropped before they could be used (out of the window, or over MaxBytes)
	Held      uint64 // records held until their open was decided
	Holding   int    // records held now
}

// Open is an open file as a shard reports it to the Linker: the identity
// of its future record and the client, path and time to match redirects
// with.
type Open struct {
	ServerIP   string
	ServerStod int64
	ServerID   uint64
	FileID     uint32
	ClientHost string
	User       string
	Path       string
	Start      int64 // server clock, Unix s: the open happened at or after it (its f-stream packet's tBeg)
	StartMax   int64 // ... and before StartMax + 1 (the packet's tEnd)
	Received   int64 // collector clock, Unix s
}

type linkKey struct{ host, user, path string }

type recKey struct {
	ip     string
	stod   int64
	sid    uint64
	fileID uint32
}

func recKeyOf(r *record.Record) recKey { return recKey{r.ServerIP, r.ServerStod, r.ServerID, r.FileID} }

func (a recKey) compare(b recKey) int {
	return cmp.Or(strings.Compare(a.ip, b.ip), cmp.Compare(a.stod, b.stod), cmp.Compare(a.sid, b.sid), cmp.Compare(a.fileID, b.fileID))
}

type linkRedir struct {
	id       uint64
	at       int64  // server clock: the start of its timing window
	win      int64  // the window's length, s
	received int64  // collector clock
	src      string // the redirector (server ip and id)
	eid      string // the event id: a fixed order among equal redirects
}

// compare orders redirects by time, arrival, redirector and event id.
func (r *linkRedir) compare(o *linkRedir) int {
	return cmp.Or(cmp.Compare(r.at, o.at), cmp.Compare(r.received, o.received), strings.Compare(r.src, o.src), strings.Compare(r.eid, o.eid))
}

type linkOpen struct {
	id         uint64
	rec        recKey
	start, end int64
	received   int64
}

// deadline is when o is decided: twice Window after it reached the
// collector (a redirector's r-stream is sent once per monitor window, and
// the redirect up to Window before the open).
func (l *Linker) deadline(o *linkOpen) int64 { return o.received + 2*l.window + linkSlack }

type linkResult struct {
	hops       int32
	first      int64 // the earliest the first redirect can have happened
	firstMax   int64 // the latest
	start, end int64
	received   int64
}

// dueOpen is an open in the decision queue.
type dueOpen struct {
	d   int64
	k   linkKey
	id  uint64
	rec recKey
}

// Less orders the decision queue (a minheap): by deadline, then identity.
func (x *dueOpen) Less(o *dueOpen) bool {
	return x.d < o.d || (x.d == o.d && x.rec.compare(o.rec) < 0)
}

// linkSlack is how far apart, in seconds, the two servers' clocks may be.
const linkSlack = 2

// DefaultLinkWindow is the default window of NewLinker.
const DefaultLinkWindow = time.Minute

// NewLinker returns an empty Linker that joins redirects and opens at most
// window apart, holds a link for its record at most hold (the open-file
// TTL) and keeps at most maxBytes.
func NewLinker(window, hold time.Duration, maxBytes int64) *Linker {
	return &Linker{
		window: max(int64(window/time.Second), 1), hold: max(int64(hold/time.Second), 1),
		maxBytes: maxBytes,
		redirs:   make(map[linkKey][]linkRedir), opens: make(map[linkKey][]linkOpen),
		pend: make(map[recKey]int64), linked: make(map[recKey]*linkResult), held: make(map[recKey][]record.Record),
	}
}

// Stats returns the counters.
func (l *Linker) Stats() LinkStats {
	st := l.stats
	st.Holding = l.nheld
	return st
}

func keyOf(host, user, path string) linkKey {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return linkKey{host, user, path}
}

// redirectData is the part of a redirect event's data the Linker reads.
type redirectData struct {
	Op         string `json:"op"`
	Path       string `json:"path"`
	User       string `json:"user"`
	ClientHost string `json:"client_host"`
	WindowS    int64  `json:"window_s"`
}

// Link is Commit of one chunk of records, for tests and tools that hold
// their records in one slice: it returns the records to write now (those
// of recs not held, then held ones now decided).
func (l *Linker) Link(recs []record.Record, evs []record.Event, opens []Open, now time.Time, final bool) []record.Record {
	var out []record.Record
	for _, c := range l.Commit([][]record.Record{recs}, evs, opens, now, final) {
		out = append(out, c...)
	}
	return out
}

// Commit joins one commit's redirect events and opens, decides the opens
// whose time has come (now, the commit's collector time, and the inputs'
// Received times), and sets the redirection of the records that have one.
// It returns the chunks to write: those of chunks, without the records it
// holds (compacted in place), and a chunk of the held records decided now,
// in a fixed order. With final (the end of input) every open is decided
// and nothing is held. Call it with each commit's output, in commit order.
func (l *Linker) Commit(chunks [][]record.Record, evs []record.Event, opens []Open, now time.Time, final bool) [][]record.Record {
	l.now = max(l.now, now.Unix())
	l.addRedirects(evs)
	for i := range opens {
		l.addOpen(&opens[i])
	}
	l.decide(final)
	for ci, c := range chunks {
		j := 0
		for i := range c {
			r := &c[i]
			k := recKeyOf(r)
			if _, ok := l.pend[k]; ok && l.since != 0 && l.since <= r.Received.Unix() {
				l.holdRecord(k, r)
				continue
			}
			l.apply(r, k)
			c[j] = c[i]
			j++
		}
		clear(c[j:])
		chunks[ci] = c[:j]
	}
	l.expire()
	if final {
		for _, k := range l.horder {
			l.unhold(k)
		}
		l.horder = l.horder[:0]
	}
	released := l.release()
	if len(released) > 0 {
		chunks = append(chunks, released)
	}
	return chunks
}

// addRedirects keeps the redirects of open operations with a known client.
func (l *Linker) addRedirects(evs []record.Event) {
	for i := range evs {
		e := &evs[i]
		if e.Type != record.EventRedirect || !e.Valid {
			continue
		}
		var d redirectData
		if e.Redirect != nil { // made in this process: what Data says
			r := e.Redirect
			d = redirectData{Op: r.Op, Path: r.Path, User: r.User, ClientHost: r.ClientHost, WindowS: r.WindowS}
		} else if json.Unmarshal(e.Data, &d) != nil {
			continue
		}
		if d.ClientHost == "" || d.Path == "" {
			continue
		}
		switch d.Op {
		case "openr", "openw", "openc":
		default:
			continue
		}
		if l.since == 0 {
			l.indexLazy()
		}
		l.stats.Redirects++
		k := keyOf(d.ClientHost, d.User, d.Path)
		r := linkRedir{id: l.id(), at: e.Time.Unix(), win: max(d.WindowS, 0), received: e.Received.Unix(),
			src: e.ServerIP + "#" + strconv.FormatUint(e.ServerID, 10), eid: e.EventID}
		l.redirs[k] = append(l.redirs[k], r)
		l.order = append(l.order, fifoRef{key: k, id: r.id, received: r.received})
		l.bytes += redirCost(k)
		l.now = max(l.now, r.received)
		if l.since == 0 || r.received < l.since {
			l.since = max(r.received, 1)
		}
	}
}

// addOpen keeps an open until it is decided.
func (l *Linker) addOpen(o *Open) {
	l.now = max(l.now, o.Received)
	if o.ClientHost == "" || o.Path == "" {
		return
	}
	if l.since == 0 {
		if cap(l.lazy) == 0 {
			// Room at once for all the opens the lazy share of the bound
			// can hold (each costs at least its copy): grown by doubling,
			// the slice would be copied and its pages faulted in twice.
			l.lazy = make([]Open, 0, l.maxBytes/lazyShare/int64(unsafe.Sizeof(Open{})))
		}
		l.lazy = append(l.lazy, *o)
		l.bytes += lazyCost(o)
		return
	}
	l.index(o)
}

// index keeps open o, indexed by its key and deadline, until it is
// decided.
func (l *Linker) index(o *Open) {
	k := keyOf(o.ClientHost, o.User, o.Path)
	lo := linkOpen{id: l.id(), rec: recKey{o.ServerIP, o.ServerStod, o.ServerID, o.FileID}, start: o.Start, end: max(o.StartMax, o.Start), received: o.Received}
	if _, dup := l.pend[lo.rec]; dup {
		return
	}
	cur := l.opens[k]
	if cur == nil { // almost every key has one open: room for it from a slab
		if len(l.openSlab) == cap(l.openSlab) {
			l.openSlab = make([]linkOpen, 0, 256)
		}
		n := len(l.openSlab)
		l.openSlab = l.openSlab[:n+1]
		cur = l.openSlab[n : n : n+1]
	}
	l.opens[k] = append(cur, lo)
	l.pend[lo.rec] = l.deadline(&lo)
	l.queue = minheap.Push(l.queue, dueOpen{d: l.deadline(&lo), k: k, id: lo.id, rec: lo.rec})
	l.order = append(l.order, fifoRef{key: k, id: lo.id, received: lo.received, open: true})
	l.bytes += openCost(k)
}

// indexLazy indexes the opens kept lazily, in their arrival order.
func (l *Linker) indexLazy() {
	for i := l.lazyHead; i < len(l.lazy); i++ {
		l.bytes -= lazyCost(&l.lazy[i])
		l.index(&l.lazy[i])
	}
	l.lazy, l.lazyHead = nil, 0
}

// dropLazy forgets the opens kept lazily that are due (all of them when
// final): decided without a redirect, as they would have been indexed.
// Past a sixteenth of the byte bound (4 MiB by default, the opens of the
// last second or so at 150,000 packets/s) it forgets the oldest ones too:
// they matter only if a first redirect comes, and a busy collector whose
// redirectors do not report to it (a data server's) would otherwise keep
// the whole bound (at 150,000 packets/s, 60,000 opens a second for two
// minutes) for nothing.
func (l *Linker) dropLazy(final bool) {
	for l.lazyHead < len(l.lazy) {
		o := &l.lazy[l.lazyHead]
		due := final || o.Received+2*l.window+linkSlack < l.now
		if !due && l.bytes <= l.maxBytes/lazyShare {
			break
		}
		if !due {
			l.stats.Forgotten++
		}
		l.bytes -= lazyCost(o)
		*o = Open{}
		l.lazyHead++
	}
	switch {
	case l.lazyHead == len(l.lazy):
		l.lazy, l.lazyHead = l.lazy[:0], 0
	case l.lazyHead >= 4096 && 2*l.lazyHead >= len(l.lazy):
		n := copy(l.lazy, l.lazy[l.lazyHead:])
		clear(l.lazy[n:])
		l.lazy, l.lazyHead = l.lazy[:n], 0
	}
}

// holdRecord keeps record r (key k) until its open is decided.
func (l *Linker) holdRecord(k recKey, r *record.Record) {
	if len(l.held[k]) == 0 {
		l.horder = append(l.horder, k)
	}
	l.held[k] = append(l.held[k], *r)
	l.nheld++
	l.bytes += heldCost
	l.stats.Held++
}

// unhold moves the records held for k to the records to return.
func (l *Linker) unhold(k recKey) {
	rs, ok := l.held[k]
	if !ok {
		return
	}
	delete(l.held, k)
	l.nheld -= len(rs)
	l.bytes -= heldCost * int64(len(rs))
	l.out = append(l.out, rs...)
}

func (l *Linker) id() uint64 { l.nextID++; return l.nextID }

// matches reports whether open o can have happened after redirect r and
// within window of it (see the matching rule).
func (r *linkRedir) matches(o *linkOpen, window int64) bool {
	return o.end+1+linkSlack >= r.at && o.start <= r.at+r.win+1+window
}

// decide decides, in the order of their deadlines (then identities), the
// opens whose deadline has passed (every open, when final).
func (l *Linker) decide(final bool) {
	l.dropLazy(final)
	for len(l.queue) > 0 && (final || l.queue[0].d < l.now) {
		var x dueOpen
		l.queue, x = minheap.Pop(l.queue)
		if d, ok := l.pend[x.rec]; !ok || d != x.d {
			continue // decided, or forgotten over the memory bound
		}
		os := l.opens[x.k]
		i := slices.IndexFunc(os, func(o linkOpen) bool { return o.id == x.id })
		if i < 0 {
			continue
		}
		o := os[i]
		l.decideOpen(x.k, &o, x.d)
	}
}

// decideOpen takes for open o (key k, deadline d) the redirects that go to
// it. The candidates are the redirects that reached the collector by d,
// not earlier than a redirect's life before d (older ones may already be
// forgotten), and the undecided opens that reached it by d. In order of
// time (then arrival, redirector and event id), each redirect goes to the
// earliest matching open (by start, then identity) that has none yet from
// the same redirector: one redirector sends a client once per open, so the
// redirects of several transfers of one client and path in one timing
// window are told apart. Then o is forgotten and its result kept for its
// record.
func (l *Linker) decideOpen(k linkKey, o *linkOpen, d int64) {
	rs := l.redirs[k]
	os := l.opens[k]
	var cand []int
	for i := range rs {
		if r := &rs[i]; r.received <= d && r.received >= d-l.redirectLife() {
			cand = append(cand, i)
		}
	}
	var mine map[int]bool // indices in rs of the redirects that go to o
	if len(cand) > 0 {    // else (the usual case: no redirect of this client and path) nothing to share out
		mine = l.shareOut(rs, os, cand, o, d)
	}
	l.finishOpen(k, o, rs, os, mine)
}

// shareOut gives each candidate redirect (indexes in rs) to the earliest
// matching open of os decided by d that has none from its redirector
// yet, and returns those that go to o.
func (l *Linker) shareOut(rs []linkRedir, os []linkOpen, cand []int, o *linkOpen, d int64) map[int]bool {
	slices.SortFunc(cand, func(a, b int) int { return rs[a].compare(&rs[b]) })
	var opens []int
	for i := range os {
		if os[i].received <= d {
			opens = append(opens, i)
		}
	}
	slices.SortFunc(opens, func(a, b int) int {
		return cmp.Or(cmp.Compare(os[a].start, os[b].start), os[a].rec.compare(os[b].rec))
	})
	type took struct {
		open int
		src  string
	}
	taken := map[took]bool{}
	mine := map[int]bool{}
	for _, ri := range cand {
		r := &rs[ri]
		for _, oi := range opens {
			x := &os[oi]
			if !r.matches(x, l.window) || taken[took{oi, r.src}] {
				continue
			}
			taken[took{oi, r.src}] = true
			if x.id == o.id {
				mine[ri] = true
			}
			break
		}
	}
	return mine
}

// finishOpen keeps the redirects of rs that do not go to open o (mine),
// forgets o and keeps its result for its record.
func (l *Linker) finishOpen(k linkKey, o *linkOpen, rs []linkRedir, os []linkOpen, mine map[int]bool) {
	var res *linkResult
	kept := rs[:0]
	for i, r := range rs {
		if !mine[i] {
			kept = append(kept, r)
			continue
		}
		if res == nil {
			res = &linkResult{first: r.at, firstMax: r.at + r.win + 1, start: o.start, end: o.end, received: o.received}
		}
		res.hops++
		res.first = min(res.first, r.at)
		res.firstMax = min(res.firstMax, r.at+r.win+1)
		l.bytes -= redirCost(k)
	}
	clear(rs[len(kept):])
	if len(kept) == 0 {
		delete(l.redirs, k)
	} else {
		l.redirs[k] = kept
	}
	if i := slices.IndexFunc(os, func(x linkOpen) bool { return x.id == o.id }); i >= 0 {
		os = slices.Delete(os, i, i+1)
		l.bytes -= openCost(k)
	}
	if len(os) == 0 {
		delete(l.opens, k)
	} else {
		l.opens[k] = os
	}
	delete(l.pend, o.rec)
	if res != nil {
		if _, dup := l.linked[o.rec]; !dup {
			l.lorder = append(l.lorder, o.rec)
			l.bytes += linkedCost
		}
		l.linked[o.rec] = res
	}
	l.unhold(o.rec)
}

// redirectLife is how long, in collector seconds, a redirect waits for its
// open: the open can reach the collector up to about two windows after
// the redirect (the redirect's timing window, then the open within Window
// of it), and is decided two windows after that.
func (l *Linker) redirectLife() int64 { return 4*l.window + 2*linkSlack }

// apply sets the result of the open of record r, if any, and forgets it.
func (l *Linker) apply(r *record.Record, k recKey) {
	res, ok := l.linked[k]
	if !ok {
		return
	}
	r.RedirectHops = res.hops
	r.RedirectDelayMS = max(res.start-res.firstMax, 0) * 1000
	r.RedirectDelayMaxMS = max(res.end+1-res.first, 0) * 1000
	delete(l.linked, k)
	l.bytes -= linkedCost
	l.stats.Linked++
	l.stats.Hops += uint64(res.hops)
}

// release returns the held records whose open has been decided, with
// their redirection, in the order of their arrival times and identities.
func (l *Linker) release() []record.Record {
	out := l.out
	l.out = nil
	for i := range out {
		l.apply(&out[i], recKeyOf(&out[i]))
	}
	slices.SortStableFunc(out, func(a, b record.Record) int {
		return cmp.Or(cmp.Compare(a.Received.Unix(), b.Received.Unix()), recKeyOf(&a).compare(recKeyOf(&b)), strings.Compare(a.RecordID, b.RecordID))
	})
	return out
}

// expire forgets the redirects that can no longer go to an open, the
// links whose record has not come within the hold time, and the oldest
// of everything beyond MaxBytes (held records are then returned at the
// next Commit, without redirection).
func (l *Linker) expire() {
	horizon := l.now - l.redirectLife()
	n := 0
	for ; n < len(l.order); n++ {
		f := l.order[n]
		if f.received >= horizon && l.bytes <= l.maxBytes {
			break
		}
		if f.open {
			os := l.opens[f.key]
			i := slices.IndexFunc(os, func(o linkOpen) bool { return o.id == f.id })
			if i < 0 {
				continue // decided
			}
			if l.bytes <= l.maxBytes {
				// Still undecided (its deadline has not passed): keep it.
				break
			}
			delete(l.pend, os[i].rec)
			l.unhold(os[i].rec)
			l.stats.Forgotten++
			os = slices.Delete(os, i, i+1)
			l.bytes -= openCost(f.key)
			if len(os) == 0 {
				delete(l.opens, f.key)
			} else {
				l.opens[f.key] = os
			}
			continue
		}
		rs := l.redirs[f.key]
		if i := slices.IndexFunc(rs, func(r linkRedir) bool { return r.id == f.id }); i >= 0 {
			rs = slices.Delete(rs, i, i+1)
			l.bytes -= redirCost(f.key)
			l.stats.Forgotten++
		}
		if len(rs) == 0 {
			delete(l.redirs, f.key)
		} else {
			l.redirs[f.key] = rs
		}
	}
	l.order = l.order[n:]
	n = 0
	for ; n < len(l.lorder); n++ {
		k := l.lorder[n]
		res, ok := l.linked[k]
		if ok && res.received >= l.now-l.hold && l.bytes <= l.maxBytes {
			break
		}
		if ok {
			delete(l.linked, k)
			l.bytes -= linkedCost
			l.stats.Forgotten++
		}
	}
	l.lorder = l.lorder[n:]
	// Over the bound with records held: the oldest ones' opens are
	// forgotten, and the records returned without redirection.
	n = 0
	for ; n < len(l.horder) && l.bytes > l.maxBytes; n++ {
		k := l.horder[n]
		if _, ok := l.held[k]; !ok {
			continue
		}
		if _, ok := l.pend[k]; ok {
			delete(l.pend, k)
			l.stats.Forgotten++
		}
		l.unhold(k)
	}
	// Keys whose records were returned (decided) go too.
	for n < len(l.horder) {
		if _, ok := l.held[l.horder[n]]; ok {
			break
		}
		n++
	}
	l.horder = l.horder[n:]
	l.compactQueue()
}

// compactQueue drops from the queue by deadline the entries of opens no
// longer pending (forgotten over the byte bound: they would stay until
// their deadline) once they are most of it. Sorted, the queue is a heap.
func (l *Linker) compactQueue() {
	if len(l.queue) < 1024 || len(l.queue) < 2*len(l.pend) {
		return
	}
	l.queue = slices.DeleteFunc(l.queue, func(d dueOpen) bool {
		dl, ok := l.pend[d.rec]
		return !ok || dl != d.d
	})
	q := l.queue
	slices.SortFunc(q, func(a, b dueOpen) int { return cmp.Or(cmp.Compare(a.d, b.d), a.rec.compare(b.rec)) })
}

// Costs in bytes, about, of what the Linker keeps.
const (
	linkedCost = 96
	heldCost   = 1024 // a record, its strings and its I/O profile
)

func redirCost(k linkKey) int64 { return int64(len(k.host)+len(k.user)+len(k.path)) + 160 }

// openCost is what an undecided open holds: its entry, its key's map
// slot, its pending deadline, its place in the queue by deadline and in
// the arrival order (about 480 bytes besides the strings).
func openCost(k linkKey) int64 { return redirCost(k) + 320 }

// lazyShare: the opens kept lazily hold at most 1/lazyShare of the byte
// bound.
const lazyShare = 16

// lazyCost is what an open kept lazily holds: its copy and its strings
// (shared with the shard's, but counted).
func lazyCost(o *Open) int64 {
	return int64(unsafe.Sizeof(Open{})) + int64(len(o.ClientHost)+len(o.User)+len(o.Path))
}

// Checkpoint magics: the first form (no window lengths, no held records)
// is still read.
const (
	linkMagicV1 = "XRDMLNK1"
	linkMagic   = "XRDMLNK2"
)

// MarshalBinary returns the Linker's state for a checkpoint (its counters
// are not part of it): the magic, the collector time, the arrival of the
// first redirect (v, 0 for none), the waiting
// redirects and undecided opens in arrival order (count; per entry a kind
// byte, 0 redirect or 1 open, the key as host, user, path (uvarint length
// and bytes), then for a redirect v time, v window, v arrival, its
// redirector and event id (strings), for an
// open the record identity (ip, v stod, uvarint sid and file id), v start,
// v end, v arrival), then the links waiting for their record (count;
// identity; v hops, first, first max, start, end, arrival), then the held
// records (count; each as uvarint length and record.AppendBinary).
func (l *Linker) MarshalBinary() ([]byte, error) {
	b := []byte(linkMagic)
	str := func(s string) { b = codec.AppendString(b, s) }
	rec := func(k recKey) {
		str(k.ip)
		b = binary.AppendVarint(b, k.stod)
		b = binary.AppendUvarint(b, k.sid)
		b = binary.AppendUvarint(b, uint64(k.fileID))
	}
	b = binary.AppendVarint(b, l.now)
	b = binary.AppendVarint(b, l.since)
	type entry struct {
		f fifoRef
		r *linkRedir
		o *linkOpen
	}
	var live []entry
	for i := l.lazyHead; i < len(l.lazy); i++ { // since 0: nothing else waits
		o := &l.lazy[i]
		live = append(live, entry{f: fifoRef{key: keyOf(o.ClientHost, o.User, o.Path), received: o.Received, open: true},
			o: &linkOpen{rec: recKey{o.ServerIP, o.ServerStod, o.ServerID, o.FileID}, start: o.Start, end: max(o.StartMax, o.Start), received: o.Received}})
	}
	for _, f := range l.order {
		if f.open {
			os := l.opens[f.key]
			if i := slices.IndexFunc(os, func(o linkOpen) bool { return o.id == f.id }); i >= 0 {
				live = append(live, entry{f: f, o: &os[i]})
			}
		} else {
			rs := l.redirs[f.key]
			if i := slices.IndexFunc(rs, func(r linkRedir) bool { return r.id == f.id }); i >= 0 {
				live = append(live, entry{f: f, r: &rs[i]})
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(len(live)))
	for _, e := range live {
		if e.o != nil {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		str(e.f.key.host)
		str(e.f.key.user)
		str(e.f.key.path)
		if e.o != nil {
			rec(e.o.rec)
			b = binary.AppendVarint(b, e.o.start)
			b = binary.AppendVarint(b, e.o.end)
			b = binary.AppendVarint(b, e.o.received)
		} else {
			b = binary.AppendVarint(b, e.r.at)
			b = binary.AppendVarint(b, e.r.win)
			b = binary.AppendVarint(b, e.r.received)
			str(e.r.src)
			str(e.r.eid)
		}
	}
	n := 0
	for _, k := range l.lorder {
		if _, ok := l.linked[k]; ok {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, k := range l.lorder {
		if res, ok := l.linked[k]; ok {
			rec(k)
			for _, v := range [...]int64{int64(res.hops), res.first, res.firstMax, res.start, res.end, res.received} {
				b = binary.AppendVarint(b, v)
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(l.nheld+len(l.out)))
	var rb []byte
	put := func(r *record.Record) {
		rb = record.AppendBinary(rb[:0], r)
		b = codec.AppendBytes(b, rb)
	}
	for _, k := range l.horder {
		for i := range l.held[k] {
			put(&l.held[k][i])
		}
	}
	for i := range l.out {
		put(&l.out[i])
	}
	return b, nil
}

// UnmarshalBinary restores what MarshalBinary wrote (or its first form),
// replacing the state.
func (l *Linker) UnmarshalBinary(b []byte) error {
	v1 := bytes.HasPrefix(b, []byte(linkMagicV1))
	if !v1 && !bytes.HasPrefix(b, []byte(linkMagic)) {
		return errors.New("redirect linker checkpoint: bad magic")
	}
	d := codec.NewDec(b[len(linkMagic):])
	uv, v := d.Uvarint, d.Varint
	str := func() string { return string(d.UvarintBytes()) }
	rec := func() recKey { return recKey{str(), v(), uv(), uint32(uv())} }
	fresh := NewLinker(0, 0, l.maxBytes)
	fresh.window, fresh.hold, fresh.stats = l.window, l.hold, l.stats
	*l = *fresh
	l.now = v()
	if !v1 {
		l.since = v()
	}
	for n, i := d.Count(1), 0; i < n && d.Err() == nil; i++ {
		kind := uv()
		k := linkKey{str(), str(), str()}
		switch kind {
		case 0:
			r := linkRedir{id: l.id(), at: v()}
			if !v1 {
				r.win = v()
			}
			r.received = v()
			if !v1 {
				r.src, r.eid = str(), str()
			}
			l.redirs[k] = append(l.redirs[k], r)
			l.order = append(l.order, fifoRef{key: k, id: r.id, received: r.received})
			l.bytes += redirCost(k)
		case 1:
			o := linkOpen{id: l.id(), rec: rec(), start: v(), end: v(), received: v()}
			if l.since == 0 {
				l.lazy = append(l.lazy, Open{ServerIP: o.rec.ip, ServerStod: o.rec.stod, ServerID: o.rec.sid, FileID: o.rec.fileID,
					ClientHost: k.host, User: k.user, Path: k.path, Start: o.start, StartMax: o.end, Received: o.received})
				l.bytes += lazyCost(&l.lazy[len(l.lazy)-1])
				break
			}
			if _, dup := l.pend[o.rec]; dup {
				d.Fail("open of file %d twice", o.rec.fileID)
				break
			}
			l.opens[k] = append(l.opens[k], o)
			l.pend[o.rec] = l.deadline(&o)
			l.queue = minheap.Push(l.queue, dueOpen{d: l.deadline(&o), k: k, id: o.id, rec: o.rec})
			l.order = append(l.order, fifoRef{key: k, id: o.id, received: o.received, open: true})
			l.bytes += openCost(k)
		default:
			d.Fail("entry kind %d", kind)
		}
	}
	for n, i := d.Count(1), 0; i < n && d.Err() == nil; i++ {
		k := rec()
		res := &linkResult{hops: int32(v()), first: v()}
		res.firstMax = res.first + 1
		if !v1 {
			res.firstMax = v()
		}
		res.start, res.end, res.received = v(), v(), v()
		if _, dup := l.linked[k]; !dup {
			l.lorder = append(l.lorder, k)
			l.bytes += linkedCost
		}
		l.linked[k] = res
	}
	if !v1 {
		for n, i := d.Count(1), 0; i < n && d.Err() == nil; i++ {
			var r record.Record
			if err := record.DecodeBinary(d.UvarintBytes(), &r); err != nil {
				d.Fail("held record: %v", err)
				break
			}
			k := recKeyOf(&r)
			if _, ok := l.pend[k]; ok {
				l.holdRecord(k, &r)
			} else {
				l.out = append(l.out, r)
			}
		}
	}
	if d.Done(); d.Err() != nil {
		*l = *fresh
		return fmt.Errorf("redirect linker checkpoint: %w", d.Err())
	}
	return nil
}
