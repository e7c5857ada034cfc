package correlate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net/netip"
	"slices"
	"time"
	"unsafe"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// The checkpoint format (Snapshot, RestoreShard) is described in
// docs/checkpoint.md, section by section in the order of the functions
// below: header (and stats), incarnations, sessions, files, lists,
// pending, traces, then a CRC-32C.
const (
	snapMagic   = "XRDMCSNP"
	snapVersion = 6
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// snapScratch holds the buffers of Snapshot, kept between checkpoints so
// that a periodic snapshot does not allocate in proportion to the state.
// The output goes to the writer in chunks of about snapChunk bytes.
type snapScratch struct {
	w    io.Writer
	crc  uint32
	err  error
	buf  []byte
	strs map[string]uint32
	// epoch numbers the snapshots (from 1); logins and tokens count
	// those written in this one (each remembers its number: snapRef).
	epoch          uint32
	logins, tokens uint32
	filePos        []int32 // slab index -> position in the snapshot
	sessPos        []int32
	indexed        []bool // slab index -> the session is its userid text's in byText
	textBuf        []byte // a session's userid text (text)
	keys           []uint64
	nStrings       uint32
	// seen caches, by where a string's bytes are, the index strs gave
	// it: the shard's strings are interned, so the same host, user or
	// protocol is one string in memory, and most of str's lookups are
	// answered here without hashing and comparing its bytes in a map of
	// every string written (a snapshot's largest cost). An entry with the
	// same pointer and length is the same string: the output is what the
	// map alone gives, byte for byte.
	seen [1 << strCacheBits]strSlot
}

// strSlot is an entry of snapScratch.seen.
type strSlot struct {
	p  *byte
	n  int
	id uint32
}

const strCacheBits = 12

// Snapshot writes the shard's complete correlation state to w in a
// compact versioned binary format: server incarnations, sessions, open
// and waiting files (with their LRU order), pending references, sequence
// trackers and the counters (Stats), so that RestoreShard gives a shard
// that behaves as this one would. Take records and events first: those
// not yet taken are not included. Snapshot does not change the state (it
// marks the logins and tokens it writes, for its own use: snapRef); its
// buffers are kept for the next call.
func (s *Shard) Snapshot(w io.Writer) error {
	if s.snap == nil {
		s.snap = &snapScratch{strs: make(map[string]uint32)}
	}
	e := s.snap
	e.epoch++
	e.logins, e.tokens = 0, 0
	defer e.reset()
	e.w, e.crc, e.err = w, 0, nil
	e.buf = append(e.buf[:0], snapMagic...)
	e.header(s)
	e.incarnations(s)
	if err := e.sessions(s); err != nil {
		return err
	}
	if err := e.files(s); err != nil {
		return err
	}
	e.lists(s)
	e.pending(s)
	e.traces(s)

	e.crc = crc32.Update(e.crc, crcTable, e.buf)
	e.buf = binary.LittleEndian.AppendUint32(e.buf, e.crc)
	e.write()
	if e.err != nil {
		return fmt.Errorf("write snapshot: %w", e.err)
	}
	return nil
}

// header writes the version, the shard's clock and incarnation counter, and the counters (Stats).
func (e *snapScratch) header(s *Shard) {
	e.uv(snapVersion)
	e.v(s.nowS)
	e.uv(uint64(s.nextInc))

	st := s.stats
	for _, p := range statScalars(&st) {
		e.uv(*p)
	}
	for _, a := range statArrays(&st) {
		e.uv(uint64(len(a)))
		for _, v := range a {
			e.uv(v)
		}
	}
}

// incarnations writes the server incarnations: address, identity, sequence trackers, loss.
func (e *snapScratch) incarnations(s *Shard) {
	// incarnations
	e.uv(uint64(len(s.incList)))
	for _, inc := range s.incList {
		e.uv(uint64(inc.id))
		a := inc.key.addr
		if a.Is4() {
			b := a.As4()
			e.buf = append(e.buf, 4)
			e.buf = append(e.buf, b[:]...)
		} else {
			b := a.As16()
			e.buf = append(e.buf, 16)
			e.buf = append(e.buf, b[:]...)
		}
		e.str(a.Zone())
		e.uv(uint64(inc.key.stod))
		e.uv(inc.key.sid)
		e.buf = append(e.buf, b2u(inc.hasSID)|b2u(inc.frm)<<1|b2u(inc.superseded)<<2|b2u(inc.traced)<<3)
		e.str(inc.site)
		e.str(inc.inst)
		e.str(inc.pgm)
		e.str(inc.ver)
		e.str(inc.host)
		e.v(inc.seen)
		for d := range inc.seq {
			e.tracker(&inc.seq[d])
		}
		e.uv(uint64(len(inc.gseq)))
		for i := range inc.gseq {
			e.buf = append(e.buf, inc.gseq[i].prov)
			e.tracker(&inc.gseq[i].t)
		}
		for _, l := range inc.lost {
			e.uv(l)
		}
	}
	n := 0
	for _, inc := range s.incList {
		if s.byAddrStod[addrStod{inc.key.addr, inc.key.stod}] == inc {
			n++
		}
	}
	e.uv(uint64(n))
	for _, inc := range s.incList {
		if s.byAddrStod[addrStod{inc.key.addr, inc.key.stod}] == inc {
			e.uv(uint64(inc.id))
		}
	}
	n = 0
	for _, inc := range s.incList {
		if s.latest[addrSID{inc.key.addr, inc.key.sid}] == inc {
			n++
		}
	}
	e.uv(uint64(n))
	for _, inc := range s.incList {
		if s.latest[addrSID{inc.key.addr, inc.key.sid}] == inc {
			e.uv(uint64(inc.id))
		}
	}
}

// sessions writes the sessions, numbered in snapshot order (e.sessPos).
func (e *snapScratch) sessions(s *Shard) error {
	// sessions, numbered in snapshot order
	e.sessPos = slices.Grow(e.sessPos[:0], s.sess.len())[:s.sess.len()]
	// The byText index is a flag of its sessions (the latest one of each
	// userid text): RestoreShard rebuilds it from their texts.
	e.indexed = slices.Grow(e.indexed[:0], s.sess.len())[:s.sess.len()]
	clear(e.indexed)
	for _, inc := range s.incList {
		for i := range inc.byText.values() {
			e.indexed[i] = true
		}
	}
	e.uv(uint64(s.sessIdx.len()))
	pos := int32(0)
	for _, l := range [2]*list{&s.sessLRU, &s.sessDisc} {
		for i := l.head; i >= 0; i = s.sess.at(i).ln[sessLRU].next {
			e.sessPos[i] = pos
			pos++
			ss := s.sess.at(i)
			e.uv(uint64(ss.inc))
			e.uv(uint64(ss.dictID))
			e.text(ss) // one a session: no index of its own
			e.str(ss.prot)
			e.str(ss.user)
			e.str(ss.host)
			e.login(ss.login)
			e.token(ss.token)
			e.str(ss.appInfo)
			e.v(int64(ss.exp))
			e.v(int64(ss.act))
			e.buf = append(e.buf, b2u(ss.hasUEAC)|b2u(ss.disc)<<1|b2u(e.indexed[i])<<2)
			e.v(ss.seen)
		}
	}
	if int(pos) != s.sessIdx.len() {
		return fmt.Errorf("snapshot: %d sessions listed, %d indexed", pos, s.sessIdx.len())
	}
	return nil
}

// files writes the open and waiting files, numbered in snapshot order (e.filePos).
func (e *snapScratch) files(s *Shard) error {
	// files, numbered in snapshot order
	e.filePos = slices.Grow(e.filePos[:0], s.files.len())[:s.files.len()]
	e.uv(uint64(s.fileIdx.len()))
	pos := int32(0)
	for _, l := range [2]*list{&s.lru, &s.pendFiles} {
		for i := l.head; i >= 0; i = s.files.at(i).ln[fileLRU].next {
			e.filePos[i] = pos
			pos++
			f := s.files.at(i)
			e.uv(uint64(f.inc))
			e.uv(uint64(f.fileID))
			e.uv(uint64(f.user))
			e.str(f.path)
			e.v(f.size)
			e.v(f.read)
			e.v(f.readv)
			e.v(f.wrt)
			e.uv(uint64(f.tOpen))
			e.uv(uint64(f.tLast))
			e.uv(uint64(f.seen))
			e.uv(uint64(f.queued))
			e.buf = append(e.buf, f.flags, f.pend)
			if f.flags&fClosed != 0 {
				cd := s.closes[i]
				if cd == nil {
					return fmt.Errorf("snapshot: file %d closed without close data", f.fileID)
				}
				e.close(cd)
			}
		}
	}
	if int(pos) != s.fileIdx.len() {
		return fmt.Errorf("snapshot: %d files listed, %d indexed", pos, s.fileIdx.len())
	}
	return nil
}

// lists writes each server's files, sessions and user index, and each session's files, by snapshot number.
func (e *snapScratch) lists(s *Shard) {
	// lists
	for _, inc := range s.incList {
		e.uv(uint64(inc.files.n))
		for i := inc.files.head; i >= 0; i = s.files.at(i).ln[fileInc].next {
			e.uv(uint64(e.filePos[i]))
		}
		e.uv(uint64(inc.sessions.n))
		for i := inc.sessions.head; i >= 0; i = s.sess.at(i).ln[sessInc].next {
			e.uv(uint64(e.sessPos[i]))
		}
	}
	for _, l := range [2]*list{&s.sessLRU, &s.sessDisc} {
		for i := l.head; i >= 0; i = s.sess.at(i).ln[sessLRU].next {
			ss := s.sess.at(i)
			e.uv(uint64(ss.files.n))
			for fi := ss.files.head; fi >= 0; fi = s.files.at(fi).ln[fileSess].next {
				e.uv(uint64(e.filePos[fi]))
			}
		}
	}
}

// pending writes the references waiting for their map record (paths, users) and their expiry queue.
func (e *snapScratch) pending(s *Shard) {
	// pending references
	writeIndex(e, s.paths, func(p pendingPath) {
		e.str(p.path)
		e.uv(uint64(p.user))
		e.v(p.at)
	})
	writeIndex(e, s.users, func(p *pendingUser) {
		e.token(p.token)
		e.v(int64(p.exp))
		e.v(int64(p.act))
		e.buf = append(e.buf, b2u(p.hasUEAC))
		e.v(p.at)
	})
	q := s.pending.q[s.pending.head:]
	e.uv(uint64(len(q)))
	for i := range q {
		e.uv(q[i].key)
		e.v(q[i].at)
		e.buf = append(e.buf, q[i].kind)
	}
}

// writeIndex writes the entries of x in key order, so that the same
// state makes the same snapshot: their number, then each key and what
// entry writes of its value.
func writeIndex[V any](e *snapScratch, x index[V], entry func(V)) {
	e.keys = e.keys[:0]
	for k := range x.all() {
		e.keys = append(e.keys, k)
	}
	slices.Sort(e.keys)
	e.uv(uint64(len(e.keys)))
	for _, k := range e.keys {
		v, _ := x.get(k)
		e.uv(k)
		entry(v)
	}
}

const snapChunk = 64 << 10

// write hands the buffer to the writer (the CRC must be updated first).
func (e *snapScratch) write() {
	if e.err == nil {
		_, e.err = e.w.Write(e.buf)
	}
	e.buf = e.buf[:0]
}

// flush writes a full chunk out.
func (e *snapScratch) flush() {
	e.crc = crc32.Update(e.crc, crcTable, e.buf)
	e.write()
}

// reset forgets the references of the last snapshot (keeping capacity),
// so the scratch does not keep dead strings alive.
func (e *snapScratch) reset() {
	clear(e.strs)
	clear(e.seen[:])
	e.nStrings = 0
	e.w = nil
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func (e *snapScratch) uv(x uint64) {
	if len(e.buf) >= snapChunk { // every entry writes a uvarint: a good place
		e.flush()
	}
	e.buf = binary.AppendUvarint(e.buf, x)
}
func (e *snapScratch) v(x int64) { e.buf = binary.AppendVarint(e.buf, x) }

func (e *snapScratch) str(s string) {
	if s == "" {
		e.buf = append(e.buf, 0)
		return
	}
	p := unsafe.StringData(s)
	c := &e.seen[(uint64(uintptr(unsafe.Pointer(p)))^uint64(len(s)))*0x9E3779B97F4A7C15>>(64-strCacheBits)]
	if c.p == p && c.n == len(s) {
		e.uv(uint64(c.id) + 2)
		return
	}
	if i, ok := e.strs[s]; ok {
		*c = strSlot{p, len(s), i}
		e.uv(uint64(i) + 2)
		return
	}
	*c = strSlot{p, len(s), e.nStrings}
	e.strs[s] = e.nStrings
	e.nStrings++
	e.buf = append(e.buf, 1)
	e.uv(uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// raw writes s as a uvarint length and its bytes, outside the string
// index (a string that is seldom written twice).
// text writes ss's userid text as raw writes a string.
func (e *snapScratch) text(ss *session) {
	if len(e.buf) >= snapChunk {
		e.flush()
	}
	e.textBuf = appendText(e.textBuf[:0], ss)
	e.buf = codec.AppendBytes(e.buf, e.textBuf)
}

// shared is what sessions share, written once per snapshot and then
// referred to by its number there (snapRef): a login or a token.
type shared interface {
	comparable
	ref() *snapRef
}

func (l *loginInfo) ref() *snapRef { return &l.snap }
func (t *tokenInfo) ref() *snapRef { return &t.snap }

// writeShared writes v as a reference: 0 for none, its number + 2 when
// this snapshot wrote it already; else 1, then what full writes of it
// (its number is the next of *count). readShared reads it back.
func writeShared[T shared](e *snapScratch, v T, count *uint32, full func(T)) {
	var none T
	if v == none {
		e.buf = append(e.buf, 0)
		return
	}
	r := v.ref()
	if r.epoch == e.epoch {
		e.uv(uint64(r.id) + 2)
		return
	}
	*r = snapRef{e.epoch, *count}
	*count++
	e.buf = append(e.buf, 1)
	full(v)
}

func (e *snapScratch) login(l *loginInfo) {
	writeShared(e, l, &e.logins, func(l *loginInfo) {
		for _, s := range [...]string{l.authProt, l.dn, l.host, l.vo, l.role, l.groups, l.monInfo, l.release, l.app, l.info} {
			e.str(s)
		}
		e.buf = append(e.buf, b2u(l.ipv6))
	})
}

func (e *snapScratch) token(t *tokenInfo) {
	writeShared(e, t, &e.tokens, func(t *tokenInfo) {
		for _, s := range [...]string{t.subject, t.name, t.org, t.role, t.groups} {
			e.str(s)
		}
	})
}

func (e *snapScratch) tracker(t *seqTracker) {
	e.uv(t.seen)
	e.uv(uint64(t.next))
	e.buf = append(e.buf, b2u(t.init))
	e.uv(t.known)
	// Version 5: a fingerprint per number of the counter (none, or the
	// modulus), 4 bytes each.
	e.uv(uint64(len(t.hashes)))
	for _, h := range t.hashes {
		e.buf = binary.LittleEndian.AppendUint32(e.buf, h)
	}
}

func (e *snapScratch) close(cd *closeData) {
	c := &cd.c
	e.uv(uint64(c.FileID))
	e.buf = append(e.buf, b2u(c.Forced)|b2u(c.HasOps)<<1|b2u(c.HasSSQ)<<2)
	e.v(c.Read)
	e.v(c.Readv)
	e.v(c.Write)
	o := &c.Ops
	for _, x := range [...]int64{int64(o.Read), int64(o.Readv), int64(o.Write), int64(o.RsMin), int64(o.RsMax),
		o.Rsegs, int64(o.RdMin), int64(o.RdMax), int64(o.RvMin), int64(o.RvMax), int64(o.WrMin), int64(o.WrMax)} {
		e.v(x)
	}
	for _, f := range [...]float64{c.SSQ.Read, c.SSQ.Readv, c.SSQ.ReadvSegs, c.SSQ.Write} {
		e.buf = binary.LittleEndian.AppendUint64(e.buf, math.Float64bits(f))
	}
	e.uv(uint64(cd.tEnd))
}

// ErrBadSnapshot is wrapped by every RestoreShard error about the
// content of a snapshot (as opposed to reading it).
var ErrBadSnapshot = errors.New("bad correlation snapshot")

// RestoreShard reads a snapshot written by Snapshot and returns a shard
// equal in behaviour to the one snapshotted, with cfg (check it with
// Validate first; RestoreShard returns its error). Corrupt, truncated or
// inconsistent input is an error wrapping ErrBadSnapshot, never a panic.
// A configuration with tighter bounds than the snapshot's state applies
// them as new state arrives.
func RestoreShard(cfg Config, r io.Reader) (*Shard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var data []byte
	if br, ok := r.(*bytes.Reader); ok {
		data = make([]byte, br.Len())
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, fmt.Errorf("read snapshot: %w", err)
		}
	} else {
		var err error
		if data, err = io.ReadAll(r); err != nil {
			return nil, fmt.Errorf("read snapshot: %w", err)
		}
	}
	s := NewShard(cfg)
	if err := s.restore(data); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	return s, nil
}

// decoder reads a snapshot body on the binary cursor (codec.Dec): the
// first error sticks and every later read returns zero values.
type decoder struct {
	codec.Dec
	version uint64 // of the snapshot being read
	strs    []string
	logins  []*loginInfo
	tokens  []*tokenInfo
	s       *Shard
	// the numbers of sessions and files read, for the lists that index them
	nSess, nFiles int
}

// str reads a string reference; in is the interning table it belongs to
// (nil: kept as is, e.g. raw userid text).
// raw reads what snapScratch.raw wrote.
// rawBytes reads what snapScratch.raw wrote: the bytes, in the
// snapshot's buffer.
func (d *decoder) rawBytes() []byte {
	n := d.Uvarint()
	if n > uint64(d.Len()) {
		d.Fail("truncated string")
		return nil
	}
	return d.Bytes(int(n))
}

func (d *decoder) str(in *interner) string {
	switch x := d.Uvarint(); {
	case d.Err() != nil || x == 0:
		return ""
	case x == 1:
		n := d.Uvarint()
		if n > uint64(d.Len()) {
			d.Fail("truncated string")
			return ""
		}
		raw := string(d.Bytes(int(n)))
		d.strs = append(d.strs, raw)
		if in != nil {
			return in.str(raw)
		}
		return raw
	default:
		if x-2 >= uint64(len(d.strs)) {
			d.Fail("string reference %d out of range", x-2)
			return ""
		}
		if in != nil {
			return in.str(d.strs[x-2])
		}
		return d.strs[x-2]
	}
}

// readShared reads what writeShared wrote: none, a value that full reads
// (the next of *table), or one of *table read before; what names it in
// the error of a reference out of range.
func readShared[T any](d *decoder, what string, table *[]T, full func() T) T {
	var none T
	switch x := d.Uvarint(); {
	case d.Err() != nil || x == 0:
		return none
	case x == 1:
		v := full()
		*table = append(*table, v)
		return v
	default:
		if x-2 >= uint64(len(*table)) {
			d.Fail("%s reference %d out of range", what, x-2)
			return none
		}
		return (*table)[x-2]
	}
}

func (d *decoder) login() *loginInfo {
	return readShared(d, "login", &d.logins, func() *loginInfo {
		n := &d.s.names
		l := &loginInfo{authProt: d.str(n), dn: d.str(n), host: d.str(n), vo: d.str(n), role: d.str(n),
			groups: d.str(n), monInfo: d.str(n), release: d.str(n), app: d.str(n), info: d.str(n)}
		l.ipv6 = d.Byte() != 0
		return l
	})
}

func (d *decoder) token() *tokenInfo {
	return readShared(d, "token", &d.tokens, func() *tokenInfo {
		n := &d.s.names
		return d.s.shareToken(&tokenInfo{subject: d.str(n), name: d.str(n), org: d.str(n), role: d.str(n), groups: d.str(n)})
	})
}

// tracker reads a sequence tracker of a counter of modulus mod.
func (d *decoder) tracker(t *seqTracker, mod uint16) {
	t.seen = d.Uvarint()
	next := d.Uvarint()
	if next >= uint64(mod) {
		d.Fail("sequence %d out of range", next)
	}
	t.next = uint16(next)
	t.init = d.Byte() != 0
	if d.version < 2 {
		// Version 1 kept no fingerprints, and marked the positions before
		// the first packet as seen: start the window afresh at the next
		// packet (a late one is applied, none is counted lost).
		t.init = false
		return
	}
	t.known = d.Uvarint()
	if d.version < 5 {
		// A ring of the last n fingerprints, position next-1-i at
		// (head-i) mod n: put each under its number.
		head := d.Byte()
		n := d.Count(1)
		if n > 64 || (n > 0 && int(head) >= n) {
			d.Fail("tracker window %d, head %d", n, head)
			return
		}
		if n == 0 {
			t.init = false
			return
		}
		t.hashes = make([]uint32, mod)
		for i := range n {
			h := d.Uint32()
			back := (int(head) - i + n) % n // this slot holds position next-1-back
			t.hashes[(int(t.next)-1-back+2*int(mod))%int(mod)] = h
		}
		return
	}
	n := d.Count(4)
	if n != 0 && n != int(mod) {
		d.Fail("tracker of %d fingerprints, modulus %d", n, mod)
		return
	}
	if n > 0 {
		t.hashes = make([]uint32, n)
		for i := range t.hashes {
			if b := d.Bytes(4); b != nil {
				t.hashes[i] = binary.LittleEndian.Uint32(b)
			}
		}
	} else {
		t.init = false
	}
}

func (d *decoder) close() *closeData {
	cd := &closeData{}
	c := &cd.c
	c.FileID = d.Uint32()
	fl := d.Byte()
	c.Forced, c.HasOps, c.HasSSQ = fl&1 != 0, fl&2 != 0, fl&4 != 0
	c.Read, c.Readv, c.Write = d.Varint(), d.Varint(), d.Varint()
	o := &c.Ops
	o.Read, o.Readv, o.Write = d.Int32(), d.Int32(), d.Int32()
	o.RsMin, o.RsMax = d.Int16(), d.Int16()
	o.Rsegs = d.Varint()
	o.RdMin, o.RdMax, o.RvMin, o.RvMax, o.WrMin, o.WrMax = d.Int32(), d.Int32(), d.Int32(), d.Int32(), d.Int32(), d.Int32()
	for _, p := range [...]*float64{&c.SSQ.Read, &c.SSQ.Readv, &c.SSQ.ReadvSegs, &c.SSQ.Write} {
		if b := d.Bytes(8); b != nil {
			*p = math.Float64frombits(binary.LittleEndian.Uint64(b))
		}
	}
	cd.tEnd = d.Uint32()
	return cd
}

// restore fills the new shard s from data.
func (s *Shard) restore(data []byte) error {
	if len(data) < len(snapMagic)+4 || string(data[:len(snapMagic)]) != snapMagic {
		return errors.New("not a correlation snapshot (bad magic)")
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(data[len(data)-4:]) {
		return errors.New("checksum mismatch (truncated or corrupt)")
	}
	d := &decoder{Dec: codec.NewDec(body[len(snapMagic):]), s: s}
	d.version = d.Uvarint()
	if d.Err() == nil && (d.version < 1 || d.version > snapVersion) {
		return fmt.Errorf("unsupported snapshot version %d (want 1 to %d)", d.version, snapVersion)
	}
	s.setNow(time.Unix(d.Varint(), 0).UTC())
	s.nextInc = d.Uint32()

	d.stats()
	d.incarnations()
	d.sessions()
	d.files()
	d.lists()
	d.pending()
	if d.version >= 3 {
		d.traces()
	}
	d.Done()
	if d.Err() == nil {
		s.recountBytes()
	}
	return d.Err()
}

// stats reads the counters (the end of snapScratch.header).
func (d *decoder) stats() {
	s := d.s
	for i, p := range statScalars(&s.stats) {
		if d.version < 2 && i >= 11 {
			break // SeqCollisions came with version 2
		}
		if d.version < 4 && i >= 12 {
			break // ClockAhead came with version 4
		}
		*p = d.Uvarint()
	}
	for j, a := range statArrays(&s.stats) {
		if d.version < 2 && j >= 4 {
			break // Truncated came with version 2
		}
		n := d.Count(1)
		if n > len(a) {
			d.Fail("%d counters, at most %d known", n, len(a))
			break
		}
		for i := 0; i < n; i++ {
			a[i] = d.Uvarint()
		}
	}
}

// incarnations reads the server incarnations (see snapScratch.incarnations).
func (d *decoder) incarnations() {
	s := d.s
	// incarnations
	nInc := d.Count(1)
	s.incList = make([]*incarnation, 0, nInc)
	for k := 0; k < nInc && d.Err() == nil; k++ {
		inc := &incarnation{files: newList(), sessions: newList(), byText: newIndex[int32](s.idxSeed, 0)}
		inc.id = d.Uint32()
		var addr netip.Addr
		switch n := d.Byte(); n {
		case 4:
			if b := d.Bytes(4); b != nil {
				addr = netip.AddrFrom4([4]byte(b))
			}
		case 16:
			if b := d.Bytes(16); b != nil {
				addr = netip.AddrFrom16([16]byte(b))
			}
		default:
			d.Fail("address length %d", n)
		}
		if z := d.str(nil); z != "" && addr.Is6() {
			addr = addr.WithZone(z)
		}
		inc.key = incKey{addr: addr, stod: d.Uint32(), sid: d.Uvarint()}
		fl := d.Byte()
		inc.hasSID, inc.frm, inc.superseded, inc.traced = fl&1 != 0, fl&2 != 0, fl&4 != 0, fl&8 != 0
		inc.site, inc.inst, inc.pgm = d.str(&s.names), d.str(&s.names), d.str(&s.names)
		inc.ver, inc.host = d.str(&s.names), d.str(&s.names)
		inc.seen = d.Varint()
		for i := range inc.seq {
			d.tracker(&inc.seq[i], 256)
		}
		ng := d.Count(1)
		if ng > 256 {
			d.Fail("%d g-stream trackers", ng)
			break
		}
		for i := 0; i < ng && d.Err() == nil; i++ {
			p := provSeq{prov: d.Byte()}
			mod := uint16(256)
			if p.prov&0x80 != 0 {
				mod = 1000
			}
			d.tracker(&p.t, mod)
			inc.gseq = append(inc.gseq, p)
		}
		for i := range inc.lost {
			inc.lost[i] = d.Uvarint()
		}
		if d.Err() != nil {
			break
		}
		if inc.id == 0 || inc.id > s.nextInc || s.byID[inc.id] != nil || s.incs[inc.key] != nil {
			d.Fail("incarnation %d duplicated or out of range", inc.id)
			break
		}
		inc.ip = addr.String()
		s.incs[inc.key] = inc
		s.byID[inc.id] = inc
		s.incList = append(s.incList, inc)
		s.byAddr[inc.key.addr] = append(s.byAddr[inc.key.addr], inc)
	}
	for n, i := d.Count(1), 0; i < n && d.Err() == nil; i++ {
		inc := s.byID[d.Uint32()]
		if inc == nil || s.byAddrStod[addrStod{inc.key.addr, inc.key.stod}] != nil {
			d.Fail("bad server index entry")
			break
		}
		s.byAddrStod[addrStod{inc.key.addr, inc.key.stod}] = inc
	}
	for n, i := d.Count(1), 0; i < n && d.Err() == nil; i++ {
		inc := s.byID[d.Uint32()]
		if inc == nil || s.latest[addrSID{inc.key.addr, inc.key.sid}] != nil {
			d.Fail("bad latest-server entry")
			break
		}
		s.latest[addrSID{inc.key.addr, inc.key.sid}] = inc
	}
}

// sessions reads the sessions (see snapScratch.sessions).
func (d *decoder) sessions() {
	s := d.s
	// sessions
	nSess := d.Count(1)
	d.nSess = nSess
	s.sess.reset(nSess)
	s.sessIdx = newIndex[int32](s.idxSeed, nSess)
	for i := 0; i < nSess && d.Err() == nil; i++ {
		ss := s.sess.at(int32(i))
		ss.inc = d.Uint32()
		ss.dictID = d.Uint32()
		var text []byte
		if d.version >= 6 {
			text = d.rawBytes()
		} else {
			text = []byte(d.str(nil))
		}
		ss.prot, ss.user, ss.host = d.str(&s.names), d.str(&s.names), d.str(&s.names)
		s.setText(ss, text, packet.ParseUserID(text, true))
		ss.login = d.login()
		ss.token = d.token()
		ss.appInfo = d.str(&s.names)
		ss.exp, ss.act = d.Int32(), d.Int32()
		fl := d.Byte()
		ss.hasUEAC, ss.disc = fl&1 != 0, fl&2 != 0
		ss.seen = d.Varint()
		ss.files = newList()
		k := dictKey(ss.inc, ss.dictID)
		inc := s.byID[ss.inc]
		if s.sessIdx.has(k) || inc == nil {
			d.Fail("session %d: unknown server or duplicate", ss.dictID)
			break
		}
		s.sessIdx.put(k, int32(i))
		if fl&4 != 0 && d.version >= 6 { // the latest session of its userid text
			if inc.byText.has(ss.textKey) {
				d.Fail("session %d: userid text indexed twice", ss.dictID)
				break
			}
			inc.byText.put(ss.textKey, int32(i))
		}
		if ss.disc {
			lpush(&s.sess, &s.sessDisc, sessLRU, int32(i))
		} else {
			lpush(&s.sess, &s.sessLRU, sessLRU, int32(i))
		}
	}
}

// files reads the open and waiting files (see snapScratch.files).
func (d *decoder) files() {
	s := d.s
	// files
	nFiles := d.Count(1)
	d.nFiles = nFiles
	s.files.reset(nFiles)
	s.fileIdx = newIndex[int32](s.idxSeed, nFiles)
	for i := 0; i < nFiles && d.Err() == nil; i++ {
		f := s.files.at(int32(i))
		f.inc = d.Uint32()
		f.fileID = d.Uint32()
		f.user = d.Uint32()
		f.path = d.str(&s.pathsI)
		f.size, f.read, f.readv, f.wrt = d.Varint(), d.Varint(), d.Varint(), d.Varint()
		f.tOpen, f.tLast, f.seen, f.queued = d.Uint32(), d.Uint32(), d.Uint32(), d.Uint32()
		f.flags, f.pend = d.Byte(), d.Byte()
		f.sess = -1
		if f.flags&fClosed != 0 {
			s.closes[int32(i)] = d.close()
		}
		k := dictKey(f.inc, f.fileID)
		if s.fileIdx.has(k) || s.byID[f.inc] == nil || f.pend >= numRecordReasons {
			d.Fail("file %d: unknown server, duplicate or bad reason", f.fileID)
			break
		}
		s.fileIdx.put(k, int32(i))
		if f.flags&fPending != 0 {
			lpush(&s.files, &s.pendFiles, fileLRU, int32(i))
		} else {
			lpush(&s.files, &s.lru, fileLRU, int32(i))
		}
	}
}

// lists reads the servers' and sessions' lists (see snapScratch.lists).
func (d *decoder) lists() {
	s := d.s
	// lists: every file and session in its server's list exactly once
	nFiles, nSess := d.nFiles, d.nSess
	const inIncList, inSessList = 1, 2
	var placed []uint8
	if d.Err() == nil {
		placed = make([]uint8, max(nFiles, nSess))
	}
	nf, ns := 0, 0
	for _, inc := range s.incList {
		if d.Err() != nil {
			break
		}
		for n, j := d.Count(1), 0; j < n && d.Err() == nil; j++ {
			fi := int32(d.Index(nFiles))
			if d.Err() == nil && (s.files.at(fi).inc != inc.id || placed[fi]&inIncList != 0) {
				d.Fail("file list of server %d", inc.id)
			}
			if d.Err() == nil {
				placed[fi] |= inIncList
				lpush(&s.files, &inc.files, fileInc, fi)
				nf++
			}
		}
		for n, j := d.Count(1), 0; j < n && d.Err() == nil; j++ {
			si := int32(d.Index(nSess))
			if d.Err() == nil && (s.sess.at(si).inc != inc.id || placed[si]&inSessList != 0) {
				d.Fail("session list of server %d", inc.id)
			}
			if d.Err() == nil {
				placed[si] |= inSessList
				lpush(&s.sess, &inc.sessions, sessInc, si)
				ns++
			}
		}
		if d.version >= 6 {
			continue // the byText index came with the sessions
		}
		for n, j := d.Count(1), 0; j < n && d.Err() == nil; j++ {
			t := d.str(nil)
			si := int32(d.Index(nSess))
			if d.Err() == nil && s.sess.at(si).inc != inc.id {
				d.Fail("userid index of server %d", inc.id)
			}
			inc.byText.put(s.textKey([]byte(t)), si)
		}
	}
	if d.Err() == nil && (nf != nFiles || ns != nSess) {
		d.Fail("%d of %d files and %d of %d sessions in server lists", nf, nFiles, ns, nSess)
	}
	for si := 0; si < nSess && d.Err() == nil; si++ {
		ss := s.sess.at(int32(si))
		for n, j := d.Count(1), 0; j < n && d.Err() == nil; j++ {
			fi := int32(d.Index(nFiles))
			if d.Err() == nil && (s.files.at(fi).inc != ss.inc || s.files.at(fi).sess >= 0) {
				d.Fail("file list of session %d", ss.dictID)
			}
			if d.Err() == nil {
				s.files.at(fi).sess = int32(si)
				lpush(&s.files, &ss.files, fileSess, fi)
			}
		}
	}
}

// pending reads the pending references (see snapScratch.pending).
func (d *decoder) pending() {
	s := d.s
	// pending references
	for n, i := d.Count(1), 0; i < n && d.Err() == nil; i++ {
		k := d.Uvarint()
		s.paths.put(k, pendingPath{path: d.str(&s.pathsI), user: d.Uint32(), sess: -1, at: d.Varint()})
	}
	for n, i := d.Count(1), 0; i < n && d.Err() == nil; i++ {
		k := d.Uvarint()
		p := &pendingUser{token: d.token(), exp: d.Int32(), act: d.Int32()}
		p.hasUEAC = d.Byte() != 0
		p.at = d.Varint()
		s.users.put(k, p)
	}
	nq := d.Count(1)
	if d.Err() == nil {
		s.pending.q = make([]fifoEntry, 0, nq)
	}
	for i := 0; i < nq && d.Err() == nil; i++ {
		e := fifoEntry{key: d.Uvarint(), at: d.Varint(), kind: d.Byte()}
		if e.kind > pendUser {
			d.Fail("pending kind %d", e.kind)
		}
		s.pending.q = append(s.pending.q, e)
	}
}

// traces writes the I/O profiles being built (the traces section).
func (e *snapScratch) traces(s *Shard) {
	// Profiles of a server that is gone are left out: they wait only to
	// expire.
	n := 0
	for i := s.traceLRU.head; i >= 0; i = s.traces.at(i).ln[0].next {
		if s.byID[s.traces.at(i).inc] != nil {
			n++
		}
	}
	e.uv(uint64(n))
	for i := s.traceLRU.head; i >= 0; i = s.traces.at(i).ln[0].next {
		ts := s.traces.at(i)
		if s.byID[ts.inc] == nil {
			continue
		}
		e.uv(uint64(ts.inc))
		e.uv(uint64(ts.fileID))
		e.uv(uint64(ts.seen))
		e.v(ts.next)
		e.v(int64(ts.unwind))
		e.buf = append(e.buf, b2u(ts.ended))
		e.buf = append(e.buf, byte(ts.flaw)) // version 4
		e.uv(ts.gaps)                        // version 4
		p := &ts.io
		for _, v := range [...]int64{p.Reads, p.Readvs, p.Writes, p.ReadBytes, p.ReadvBytes, p.WriteBytes, p.SequentialReads, p.ReadvSegments} {
			e.v(v)
		}
		for _, h := range [...]*record.Log2Hist{&p.ReadSizes, &p.WriteSizes, &p.ReadvSizes, &p.ReadvCounts} {
			e.uv(uint64(len(h)))
			for _, c := range h {
				e.uv(uint64(c))
			}
		}
	}
}

// traces reads the traces section.
func (d *decoder) traces() {
	s := d.s
	for n, i := d.Count(1), 0; i < n && d.Err() == nil; i++ {
		ts := traceState{inc: d.Uint32(), fileID: d.Uint32(), seen: d.Uint32(), next: d.Varint(), unwind: d.Int32()}
		ts.ended = d.Byte() != 0
		if d.version >= 4 {
			ts.flaw = record.IOPartial(d.Byte())
			ts.gaps = d.Uvarint()
			if ts.flaw != record.IOWhole && ts.flaw != record.IOReordered {
				d.Fail("trace of file %d: flaw %d", ts.fileID, ts.flaw)
				return
			}
		} else if inc := s.byID[ts.inc]; inc != nil {
			ts.gaps = mainGaps(inc) // what went before is not this trace's
		}
		p := &ts.io
		for _, v := range [...]*int64{&p.Reads, &p.Readvs, &p.Writes, &p.ReadBytes, &p.ReadvBytes, &p.WriteBytes, &p.SequentialReads, &p.ReadvSegments} {
			*v = d.Varint()
		}
		for _, h := range [...]*record.Log2Hist{&p.ReadSizes, &p.WriteSizes, &p.ReadvSizes, &p.ReadvCounts} {
			if m := d.Count(1); m != len(h) {
				d.Fail("histogram of %d buckets", m)
				return
			}
			for j := range h {
				h[j] = d.Uint32()
			}
		}
		k := dictKey(ts.inc, ts.fileID)
		if s.traceIdx.has(k) || s.byID[ts.inc] == nil || s.traceIdx.len() >= s.cfg.maxTraces() {
			d.Fail("trace of file %d: unknown server, duplicate or over the bound", ts.fileID)
			return
		}
		j := s.traces.alloc()
		*s.traces.at(j) = ts
		s.traceIdx.put(k, j)
		lpush(&s.traces, &s.traceLRU, 0, j)
	}
}
