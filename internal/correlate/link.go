package correlate

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/record"
)

// Linker puts the redirection on transfer records: when a redirector and
// the data server it sends clients to both report to this collector, the
// redirect events of the redirector(s) are linked to the open that follows
// at the data server, and the record of that access gets the number of
// hops and the delay from the first redirect to the open
// (record.RedirectHops, RedirectDelayMS).
//
// The redirector and the data server are different servers, correlated on
// different shards, so the Linker works after them, where the pipeline
// commits: it sees every redirect event and every open (Open, reported by
// the shards as files open) and joins them, then sets the result on the
// access's record when it is emitted, at the close.
//
// # Matching rule
//
// A redirect event of an open operation (openr, openw, openc) whose client
// is known (the redirector's u record for its user dictid) and an open
// match when they have the same client host, client user name and path
// (CGI removed) and the open can have happened in [redirect - 2 s,
// redirect + Window] (an open's time is only known to lie in its f-stream
// packet's span [tBeg, tEnd]). A redirect matches the earliest open after
// it; an open takes every redirect that matches it: their number is the
// hop count, the earliest one the start of the delay, which is then at
// least tBeg - first and at most tEnd - first (never negative). Whichever of the two
// arrives first waits for the other for Window of collector time (the
// r-stream and the f-stream are flushed on their own schedules). Within a
// commit, redirects are joined in order of time, opens in order of time.
//
// # Where it cannot match
//
//   - The times are whole seconds from two servers' clocks: the r-stream
//     gives the second its timing window started (the redirect happened
//     then or up to window_s later) and an open's time is that of its
//     f-stream packet's first record, so one delay is exact only to a few
//     seconds, and a clock offset between the servers adds to it; sums
//     and means over many opens are what is worth reading.
//   - A redirect that reaches the collector after the access's record has
//     been written (an r-stream flushed after a short transfer ended), or
//     more than Window after the open, is not linked: records are written
//     once.
//   - Clients are matched by host and user name as each server wrote them:
//     a client seen by its address at one server and by its name at the
//     other does not match; clients behind one NAT address with the same
//     user name may take each other's redirects.
//   - Redirects without a known client (user dictid 0, or the
//     redirector's login lost) are kept as events but cannot be linked.
//
// A Linker is used by one goroutine (the pipeline's writer). Its memory is
// bounded by MaxBytes: beyond it the oldest waiting entries are forgotten
// (LinkStats.Forgotten).
type Linker struct {
	window   int64 // seconds
	maxBytes int64
	hold     int64 // seconds a link waits for its record

	redirs map[linkKey][]linkRedir // waiting redirects, oldest first
	opens  map[linkKey][]linkOpen  // opens of the last window, oldest first
	order  []fifoRef               // both, in arrival order
	nextID uint64
	linked map[recKey]*linkResult
	lorder []recKey // links, in arrival order
	bytes  int64
	now    int64 // collector clock, Unix s: the latest arrival seen
	stats  LinkStats
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
	StartMax   int64 // ... and at or before it (the packet's tEnd)
	Received   int64 // collector clock, Unix s
}

type linkKey struct{ host, user, path string }

type recKey struct {
	ip     string
	stod   int64
	sid    uint64
	fileID uint32
}

type linkRedir struct {
	id       uint64
	at       int64 // server clock
	received int64 // collector clock
}

type linkOpen struct {
	id         uint64
	rec        recKey
	start, end int64
	received   int64
}

type linkResult struct {
	hops       int32
	first      int64
	start, end int64
	received   int64
}

// linkSlack is how far a redirect's time may be after the open's: both are
// whole seconds from different packets' windows.
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
		linked: make(map[recKey]*linkResult),
	}
}

// Stats returns the counters.
func (l *Linker) Stats() LinkStats { return l.stats }

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
}

// Link joins the redirect events of evs and the opens, then sets the
// redirection of the records of recs that have one. Call it with each
// commit's output, in commit order.
func (l *Linker) Link(recs []record.Record, evs []record.Event, opens []Open) {
	l.LinkChunks([][]record.Record{recs}, evs, opens)
}

// LinkChunks is Link for records in chunks (correlate.TakeRecordChunks).
func (l *Linker) LinkChunks(chunks [][]record.Record, evs []record.Event, opens []Open) {
	type fresh struct {
		key linkKey
		r   linkRedir
	}
	var news []fresh
	for i := range evs {
		e := &evs[i]
		if e.Type != record.EventRedirect || !e.Valid {
			continue
		}
		var d redirectData
		if json.Unmarshal(e.Data, &d) != nil || d.ClientHost == "" || d.Path == "" {
			continue
		}
		switch d.Op {
		case "openr", "openw", "openc":
		default:
			continue
		}
		l.stats.Redirects++
		news = append(news, fresh{keyOf(d.ClientHost, d.User, d.Path), linkRedir{at: e.Time.Unix(), received: e.Received.Unix()}})
		l.now = max(l.now, e.Received.Unix())
	}
	for i := range opens {
		l.now = max(l.now, opens[i].Received)
	}
	// Late redirects first: each joins the earliest waiting open after it.
	slices.SortStableFunc(news, func(a, b fresh) int { return cmp.Compare(a.r.at, b.r.at) })
	for i := range news {
		if !l.joinOpen(news[i].key, &news[i].r) {
			r := news[i].r
			r.id = l.id()
			l.redirs[news[i].key] = append(l.redirs[news[i].key], r)
			l.order = append(l.order, fifoRef{key: news[i].key, id: r.id, received: r.received})
			l.bytes += redirCost(news[i].key)
		}
	}
	if len(opens) > 0 && (l.stats.Redirects > 0 || len(l.redirs) > 0 || len(l.opens) > 0) {
		idx := make([]int, len(opens))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(opens[a].Start, opens[b].Start) })
		for _, i := range idx {
			l.addOpen(&opens[i])
		}
	}
	for _, recs := range chunks {
		if len(l.linked) == 0 {
			break
		}
		for i := range recs {
			r := &recs[i]
			k := recKey{r.ServerIP, r.ServerStod, r.ServerID, r.FileID}
			if res, ok := l.linked[k]; ok {
				r.RedirectHops = res.hops
				r.RedirectDelayMS = max(res.start-res.first, 0) * 1000
				r.RedirectDelayMaxMS = max(res.end-res.first, 0) * 1000
				delete(l.linked, k)
				l.bytes -= linkedCost
				l.stats.Linked++
				l.stats.Hops += uint64(res.hops)
			}
		}
	}
	l.expire()
}

func (l *Linker) id() uint64 { l.nextID++; return l.nextID }

// link adds a redirect at time at to the link of open o.
func (l *Linker) link(o *linkOpen, at int64) {
	res := l.linked[o.rec]
	if res == nil {
		res = &linkResult{first: at, start: o.start, end: o.end, received: o.received}
		l.linked[o.rec] = res
		l.lorder = append(l.lorder, o.rec)
		l.bytes += linkedCost
	}
	res.hops++
	res.first = min(res.first, at)
}

// joinOpen joins a redirect that arrived after its open, if that open is
// still waiting; it reports whether it did.
func (l *Linker) joinOpen(k linkKey, r *linkRedir) bool {
	os := l.opens[k]
	best := -1
	for i := range os {
		if o := &os[i]; o.overlaps(r.at, l.window) && (best < 0 || o.start < os[best].start) {
			best = i
		}
	}
	if best < 0 {
		return false
	}
	l.link(&os[best], r.at)
	return true
}

// overlaps reports whether the open can have happened in the window of
// a redirect at time at: at most linkSlack before it, at most window after.
func (o *linkOpen) overlaps(at, window int64) bool {
	return o.end >= at-linkSlack && o.start <= at+window
}

// addOpen takes the waiting redirects of an open and keeps the open for
// redirects that come later.
func (l *Linker) addOpen(o *Open) {
	k := keyOf(o.ClientHost, o.User, o.Path)
	lo := linkOpen{id: l.id(), rec: recKey{o.ServerIP, o.ServerStod, o.ServerID, o.FileID}, start: o.Start, end: max(o.StartMax, o.Start), received: o.Received}
	if rs := l.redirs[k]; len(rs) > 0 {
		kept := rs[:0]
		for _, r := range rs {
			if lo.overlaps(r.at, l.window) {
				l.link(&lo, r.at)
				l.bytes -= redirCost(k)
				continue
			}
			kept = append(kept, r)
		}
		if len(kept) == 0 {
			delete(l.redirs, k)
		} else {
			l.redirs[k] = kept
		}
	}
	l.opens[k] = append(l.opens[k], lo)
	l.order = append(l.order, fifoRef{key: k, id: lo.id, received: lo.received, open: true})
	l.bytes += openCost(k)
}

// expire forgets what waited longer than the window, oldest first, and the
// oldest entries beyond MaxBytes; links whose record has not come within
// the hold time are forgotten too.
func (l *Linker) expire() {
	horizon := l.now - l.window - linkSlack
	n := 0
	for ; n < len(l.order); n++ {
		f := l.order[n]
		if f.received >= horizon && l.bytes <= l.maxBytes {
			break
		}
		if f.open {
			os := l.opens[f.key]
			if i := slices.IndexFunc(os, func(o linkOpen) bool { return o.id == f.id }); i >= 0 {
				os = slices.Delete(os, i, i+1)
				l.bytes -= openCost(f.key)
			}
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
}

// Costs in bytes, about, of what the Linker keeps.
const linkedCost = 96

func redirCost(k linkKey) int64 { return int64(len(k.host)+len(k.user)+len(k.path)) + 96 }
func openCost(k linkKey) int64  { return redirCost(k) + 48 }

// linkMagic starts a Linker checkpoint.
const linkMagic = "XRDMLNK1"

// MarshalBinary returns the Linker's state for a checkpoint (its counters
// are not part of it): the magic, the collector time, the waiting
// redirects and opens in arrival order (count; per entry a kind byte, 0
// redirect or 1 open, the key as host, user, path (uvarint length and
// bytes), then for a redirect v time and v arrival, for an open the record
// identity (ip, v stod, uvarint sid and file id), v start, v end, v
// arrival), then the links waiting for their record (count; identity; v
// hops, first, start, end, arrival).
func (l *Linker) MarshalBinary() ([]byte, error) {
	b := []byte(linkMagic)
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	rec := func(k recKey) {
		str(k.ip)
		b = binary.AppendVarint(b, k.stod)
		b = binary.AppendUvarint(b, k.sid)
		b = binary.AppendUvarint(b, uint64(k.fileID))
	}
	b = binary.AppendVarint(b, l.now)
	type entry struct {
		f fifoRef
		r *linkRedir
		o *linkOpen
	}
	var live []entry
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
			b = binary.AppendVarint(b, e.r.received)
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
			for _, v := range [...]int64{int64(res.hops), res.first, res.start, res.end, res.received} {
				b = binary.AppendVarint(b, v)
			}
		}
	}
	return b, nil
}

// UnmarshalBinary restores what MarshalBinary wrote, replacing the state.
func (l *Linker) UnmarshalBinary(b []byte) error {
	if !bytes.HasPrefix(b, []byte(linkMagic)) {
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
	for n, i := d.Count(1), 0; i < n && d.Err() == nil; i++ {
		kind := uv()
		k := linkKey{str(), str(), str()}
		switch kind {
		case 0:
			r := linkRedir{id: l.id(), at: v(), received: v()}
			l.redirs[k] = append(l.redirs[k], r)
			l.order = append(l.order, fifoRef{key: k, id: r.id, received: r.received})
			l.bytes += redirCost(k)
		case 1:
			o := linkOpen{id: l.id(), rec: rec(), start: v(), end: v(), received: v()}
			l.opens[k] = append(l.opens[k], o)
			l.order = append(l.order, fifoRef{key: k, id: o.id, received: o.received, open: true})
			l.bytes += openCost(k)
		default:
			d.Fail("entry kind %d", kind)
		}
	}
	for n, i := d.Count(1), 0; i < n && d.Err() == nil; i++ {
		k := rec()
		res := &linkResult{hops: int32(v()), first: v(), start: v(), end: v(), received: v()}
		if _, dup := l.linked[k]; !dup {
			l.lorder = append(l.lorder, k)
			l.bytes += linkedCost
		}
		l.linked[k] = res
	}
	if d.Done(); d.Err() != nil {
		*l = *fresh
		return fmt.Errorf("redirect linker checkpoint: %w", d.Err())
	}
	return nil
}
