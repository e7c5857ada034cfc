package rollup

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

var appendUvarint = binary.AppendUvarint

// Store is what the builder needs of the store (store.Store).
type Store interface {
	PartReader
	Read(ctx context.Context, afterSeq int64, max int) ([]store.Entry, error)
	CommitRollup(ctx context.Context, c store.RollupCommit) error
}

// serverKey names a server incarnation.
type serverKey struct {
	ip   string
	stod int64
	sid  uint64
}

func serverOf(k *record.AccessKey) serverKey { return serverKey{k.ServerIP, k.ServerStod, k.ServerID} }

// bucketKey names a bucket: its width and start (Unix seconds).
type bucketKey struct{ step, start int64 }

// head is the sums not yet flushed: bucket -> series key -> sums.
type head map[bucketKey]map[string]*Agg

// openAccess is what the builder counted of an access still open (from
// its progress events), or, once closed, a tombstone that makes later
// progress events of it count nothing.
type openAccess struct {
	read, readv, write int64
	last               int64 // Unix s of the last event
	closed             bool
}

// Parts of a bucket still open are compacted when they reach maxParts;
// a bucket over for sealGrace is compacted into one part.
const (
	maxParts  = 16
	sealGrace = 5 * time.Minute
	// A closed access's tombstone is kept this long (data time) for a
	// progress event of the same commit or a replay; an open access's
	// count past the open-file TTL.
	tombstoneTTL = 10 * time.Minute
	openTTL      = 25 * time.Hour
	readBatch    = 4096
	pollInterval = 200 * time.Millisecond
	drainTimeout = 10 * time.Second
)

// Builder builds rollups from a store's log. Run it with Run; query it
// with Query and Top (safe while it runs).
type Builder struct {
	cfg   Config
	st    Store
	log   *slog.Logger
	m     *metrics
	specs []Spec
	dims  [][]record.Dim

	mu        sync.Mutex // guards head and watermark for queries
	head      head
	headBytes int64
	watermark int64 // the latest data time seen (Unix s)

	open      map[record.AccessKey]*openAccess
	openBytes int64
	// serverTime is the latest time seen per server incarnation: open
	// accesses expire by their own server's clock, as servers' streams
	// need not be in time order with each other in the log.
	serverTime map[serverKey]int64
	cursor     int64
	part       int64             // the last part number used
	parts      map[bucketKey]int // parts stored per recent bucket
	keyBuf     []byte
	keys       []string
	lastFlush  time.Time
}

// New returns a builder over st; call Run to start it. reg registers its
// metrics (nil: not registered).
func New(cfg Config, st Store, log *slog.Logger, reg prometheus.Registerer) (*Builder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	specs, _ := cfg.specs()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	b := &Builder{cfg: cfg, st: st, log: log, m: m, specs: specs, head: make(head),
		open: make(map[record.AccessKey]*openAccess), parts: make(map[bucketKey]int), serverTime: make(map[serverKey]int64)}
	for _, s := range specs {
		b.dims = append(b.dims, s.Dims())
	}
	return b, nil
}

// Restore loads the builder's state and cursor from the store and counts
// the parts of recent buckets. Run calls it; call it directly to use
// CatchUp without Run.
func (b *Builder) Restore(ctx context.Context) error {
	state, cursor, err := b.st.RollupState(ctx)
	if err != nil {
		return err
	}
	if err := b.unmarshalState(state); err != nil {
		return fmt.Errorf("rollup state: %w", err)
	}
	b.cursor = cursor
	for _, step := range Resolutions {
		s := int64(step / time.Second)
		from := b.watermark - 2*s - int64(sealGrace/time.Second)
		n, err := b.st.RollupBuckets(ctx, s, from-from%s, b.watermark+s)
		if err != nil {
			return err
		}
		for start, k := range n {
			b.parts[bucketKey{s, start}] = k
		}
	}
	b.m.cursor.Set(float64(b.cursor))
	return nil
}

// Run builds rollups until ctx is cancelled, then flushes what it holds.
func (b *Builder) Run(ctx context.Context) error {
	if err := b.Restore(ctx); err != nil {
		return err
	}
	b.log.Info("Rollups started", "cursor", b.cursor, "dimensions", len(b.specs)-1)
	b.lastFlush = time.Now()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		n, err := b.step(ctx)
		if err != nil && ctx.Err() == nil {
			b.m.errors.Inc()
			b.log.Warn("Rollup step failed; retrying", "err", err)
		}
		if ctx.Err() != nil {
			// Sum what reached the log before the stop, then flush.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTimeout)
			err := b.CatchUp(fctx)
			cancel()
			return err
		}
		if n == readBatch && err == nil {
			continue
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// step reads and applies one batch of the log, and flushes when due.
func (b *Builder) step(ctx context.Context) (int, error) {
	entries, err := b.st.Read(ctx, b.cursor, readBatch)
	if err != nil {
		return 0, fmt.Errorf("read store: %w", err)
	}
	b.Apply(entries)
	if time.Since(b.lastFlush) >= b.cfg.FlushInterval.D() || b.headBytes >= int64(b.cfg.MaxHeadBytes) {
		if err := b.Flush(ctx); err != nil {
			return len(entries), err
		}
	}
	return len(entries), nil
}

// CatchUp applies the whole log after the cursor and flushes: what a
// stopped builder does to be current (tests, replay, xrdmon report on a
// store no collector runs).
func (b *Builder) CatchUp(ctx context.Context) error {
	for {
		entries, err := b.st.Read(ctx, b.cursor, readBatch)
		if err != nil {
			return fmt.Errorf("read store: %w", err)
		}
		if len(entries) == 0 {
			return b.Flush(ctx)
		}
		b.Apply(entries)
		if b.headBytes >= int64(b.cfg.MaxHeadBytes) {
			if err := b.Flush(ctx); err != nil {
				return err
			}
		}
	}
}

// Apply adds log entries to the head and moves the cursor past them.
func (b *Builder) Apply(entries []store.Entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range entries {
		e := &entries[i]
		switch {
		case e.Record != nil:
			b.applyRecord(e.Record)
		case e.Event != nil && e.Event.Type == record.EventProgress:
			p, err := record.ParseProgress(e.Event)
			if err != nil {
				b.m.invalid.Inc()
				break
			}
			b.applyProgress(&p)
		}
		b.cursor = e.Seq
	}
	b.m.cursor.Set(float64(b.cursor))
	b.m.headBytes.Set(float64(b.headBytes))
}

func (b *Builder) applyProgress(p *record.Record) {
	t := p.End.Unix()
	k := p.Access()
	b.seen(&k, t)
	o := b.open[k]
	if o == nil {
		if b.openBytes >= int64(b.cfg.MaxOpenBytes) {
			b.m.openEvicted.Inc() // its bytes count at its close
			return
		}
		o = &openAccess{}
		b.open[k] = o
		b.openBytes += openSize(&k)
	}
	if o.closed {
		return
	}
	dr, dv, dw := max(0, p.ReadBytes-o.read), max(0, p.ReadvBytes-o.readv), max(0, p.WriteBytes-o.write)
	o.read, o.readv, o.write = max(o.read, p.ReadBytes), max(o.readv, p.ReadvBytes), max(o.write, p.WriteBytes)
	o.last = max(o.last, t)
	if dr+dv+dw == 0 {
		return
	}
	b.add(t, p, func(a *Agg) {
		a.ReadBytes += dr
		a.ReadvBytes += dv
		a.WriteBytes += dw
	})
	b.m.progress.Inc()
}

func (b *Builder) applyRecord(r *record.Record) {
	t := r.End.Unix()
	var counted openAccess
	k := r.Access()
	b.seen(&k, t)
	if o := b.open[k]; o != nil {
		if o.closed {
			return // the same access twice (the store drops duplicates; be safe)
		}
		counted = *o
	}
	if r.End.Unix()/60 > r.Start.Unix()/60 {
		// Progress events of it may still follow: leave a tombstone.
		if o := b.open[k]; o != nil {
			*o = openAccess{closed: true, last: t}
		} else {
			b.open[k] = &openAccess{closed: true, last: t}
			b.openBytes += openSize(&k)
		}
	}
	dr, dv, dw := max(0, r.ReadBytes-counted.read), max(0, r.ReadvBytes-counted.readv), max(0, r.WriteBytes-counted.write)
	ri := reasonIndex(r.Reason)
	user := hashIdentity(r.Dim(record.DimIdentity))
	var ms int64 // a record without an open has no duration
	if !r.Start.IsZero() {
		ms = max(r.End.Sub(r.Start).Milliseconds(), 0)
	}
	dur := histIndex(float64(ms))
	size := histIndex(float64(r.ReadBytes + r.ReadvBytes + r.WriteBytes))
	b.add(t, r, func(a *Agg) {
		a.ReadBytes += dr
		a.ReadvBytes += dv
		a.WriteBytes += dw
		if ri < 0 {
			a.Transfers++
		} else {
			a.Partial++
			a.PartialBy[ri]++
		}
		a.Users.Add(user)
		a.DurationMS += ms
		a.Duration.observeIndex(dur)
		a.Size.observeIndex(size)
	})
	b.m.records.Inc()
}

// seen notes that k's server was at time t.
func (b *Builder) seen(k *record.AccessKey, t int64) {
	sk := serverOf(k)
	if cur, ok := b.serverTime[sk]; !ok || t > cur {
		b.serverTime[sk] = t
	}
}

func openSize(k *record.AccessKey) int64 { return int64(96 + len(k.ServerIP)) }

// add applies fn to every series of r in the buckets of time t.
func (b *Builder) add(t int64, r *record.Record, fn func(*Agg)) {
	b.watermark = max(b.watermark, t)
	b.keys = b.keys[:0]
	for i, s := range b.specs {
		b.keyBuf = seriesKey(b.keyBuf[:0], s, b.dims[i], r)
		b.keys = append(b.keys, string(b.keyBuf))
	}
	for _, step := range Resolutions {
		s := int64(step / time.Second)
		bk := bucketKey{s, t - mod(t, s)}
		m := b.head[bk]
		if m == nil {
			m = make(map[string]*Agg)
			b.head[bk] = m
		}
		for _, key := range b.keys {
			a := m[key]
			if a == nil {
				a = &Agg{}
				m[key] = a
				b.headBytes += int64(len(key)) + 64
			} else {
				b.headBytes -= int64(a.size())
			}
			fn(a)
			b.headBytes += int64(a.size())
		}
	}
}

// mod is t mod s, non-negative for times before 1970 too.
func mod(t, s int64) int64 {
	m := t % s
	if m < 0 {
		m += s
	}
	return m
}

// Flush writes the head as parts, compacts the buckets that are over or
// hold too many parts, expires old buckets, and saves the state and cursor,
// all in one transaction.
func (b *Builder) Flush(ctx context.Context) error {
	start := time.Now()
	// Queries hold mu while they read the head and the parts: they see a
	// bucket either before this commit or after it, never both.
	b.mu.Lock()
	defer b.mu.Unlock()
	h, wm := b.head, b.watermark

	c := store.RollupCommit{Cursor: b.cursor, Expire: make(map[int64]int64)}
	part := b.part
	added := make(map[bucketKey]int)
	for _, bk := range sortedBuckets(h) {
		part++
		c.Add = append(c.Add, rows(bk.step, bk.start, part, encodeParts(h[bk]))...)
		added[bk]++
	}
	compacted, err := b.compactions(ctx, added, wm)
	if err != nil {
		return err
	}
	c.Compacted = compacted
	for _, step := range Resolutions {
		if ret := b.cfg.retention(step); ret > 0 {
			s := int64(step / time.Second)
			c.Expire[s] = wm - int64(ret/time.Second)
		}
	}
	b.expireOpen(wm)
	c.State = b.marshalState(part, wm)
	c.Meta = b.marshalMeta(wm)
	if err := b.st.CommitRollup(ctx, c); err != nil {
		return err
	}
	b.head, b.headBytes = make(head), 0
	b.part = part
	for bk, n := range added {
		b.parts[bk] += n
	}
	for _, p := range compacted {
		b.parts[bucketKey{p.Step, p.Start}] = 1
	}
	for bk, n := range b.parts {
		if bk.start+bk.step+int64(sealGrace/time.Second) < wm && n <= 1 {
			delete(b.parts, bk)
		}
	}
	b.lastFlush = time.Now()
	b.m.flushes.Inc()
	b.m.flushSeconds.Observe(time.Since(start).Seconds())
	b.m.headBytes.Set(0)
	return nil
}

// sortedBuckets returns the keys of m by width, then start.
func sortedBuckets[V any](m map[bucketKey]V) []bucketKey {
	out := make([]bucketKey, 0, len(m))
	for bk := range m {
		out = append(out, bk)
	}
	slices.SortFunc(out, func(a, b bucketKey) int {
		return cmp.Or(cmp.Compare(a.step, b.step), cmp.Compare(a.start, b.start))
	})
	return out
}

// compactions merges the parts of the buckets that are over (sealGrace
// past their end) or that reach maxParts with this flush's.
func (b *Builder) compactions(ctx context.Context, added map[bucketKey]int, wm int64) ([]store.RollupPart, error) {
	var out []store.RollupPart
	for _, bk := range sortedBuckets(b.parts) {
		n := b.parts[bk] + added[bk]
		sealed := bk.start+bk.step+int64(sealGrace/time.Second) < wm
		if added[bk] > 0 || n <= 1 || (!sealed && n < maxParts) {
			continue // a bucket written by this flush is compacted by a later one
		}
		m := make(map[string]*Agg)
		var last int64
		err := b.st.RollupParts(ctx, bk.step, bk.start, bk.start+1, store.AllSpecs, func(p store.RollupPart) error {
			last = max(last, p.Part)
			return mergePart(m, p.Data, "")
		})
		if err != nil {
			return nil, fmt.Errorf("compact rollup bucket %d/%d: %w", bk.step, bk.start, err)
		}
		out = append(out, rows(bk.step, bk.start, last, encodeParts(m))...)
		b.m.compactions.Inc()
	}
	return out, nil
}

// expireOpen forgets tombstones and open accesses long past by their
// server's clock, and servers not heard of for the open TTL.
func (b *Builder) expireOpen(wm int64) {
	for k, o := range b.open {
		ttl := openTTL
		if o.closed {
			ttl = tombstoneTTL
		}
		if o.last+int64(ttl/time.Second) < b.serverTime[serverOf(&k)] {
			delete(b.open, k)
			b.openBytes -= openSize(&k)
		}
	}
	for sk, t := range b.serverTime {
		if t+int64(openTTL/time.Second) < wm {
			delete(b.serverTime, sk)
		}
	}
	b.m.openBytes.Set(float64(b.openBytes))
}

// Part encoding (version 3), in sections by spec (the builder stores
// one section per part, a part per spec, so that a query reads only its
// spec's series):
//
//	byte    0 (an S2 block, the older formats, never starts with 0)
//	byte    version (3)
//	uvarint number of sections, then per section, in spec order:
//	uvarint spec length, spec, uvarint length, S2-compressed series:
//	  uvarint number of series, then per series in key order:
//	  uvarint key length, key, uvarint Agg length, Agg (appendAgg)
//
// Versions 1 and 2 (still read) are the series of every spec in one
// S2-compressed block: a version byte, then the series as above;
// version 1 has no duration sum.

const partVersion = 3

// encodeParts returns the stored parts of m: one per spec, each in the
// format above with one section.
func encodeParts(m map[string]*Agg) []specPart {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a spec's keys are together: a key starts with its spec and a zero byte
	var out []specPart
	var body, ab []byte
	for i := 0; i < len(keys); {
		spec, _, _ := strings.Cut(keys[i], "\x00")
		j := i
		for j < len(keys) && strings.HasPrefix(keys[j], spec+"\x00") {
			j++
		}
		body = appendUvarint(body[:0], uint64(j-i))
		for _, k := range keys[i:j] {
			body = appendUvarint(body, uint64(len(k)))
			body = append(body, k...)
			ab = appendAgg(ab[:0], m[k])
			body = appendUvarint(body, uint64(len(ab)))
			body = append(body, ab...)
		}
		z := s2.Encode(nil, body)
		b := []byte{0, partVersion, 1}
		b = appendUvarint(b, uint64(len(spec)))
		b = append(b, spec...)
		b = appendUvarint(b, uint64(len(z)))
		out = append(out, specPart{spec, append(b, z...)})
		i = j
	}
	return out
}

// specPart is the stored part of one spec's series.
type specPart struct {
	spec string
	data []byte
}

// rows returns the store rows of parts.
func rows(step, start, part int64, parts []specPart) []store.RollupPart {
	out := make([]store.RollupPart, len(parts))
	for i, p := range parts {
		out[i] = store.RollupPart{Step: step, Start: start, Part: part, Spec: p.spec, Data: p.data}
	}
	return out
}

// mergePart adds the series of a stored part whose key starts with prefix
// (every series when prefix is "") to m.
func mergePart(m map[string]*Agg, data []byte, prefix string) error {
	return walkStored(data, walk{prefix: prefix}, func(key string, a *Agg) { mergeInto(m, key, a) })
}

// mergeInto adds a to m's series key (a is kept when m has none).
func mergeInto(m map[string]*Agg, key string, a *Agg) {
	if cur := m[key]; cur != nil {
		cur.Merge(a)
	} else {
		m[key] = a
	}
}

// walk says which series of a part to decode, and how much of them.
type walk struct {
	prefix string                // keys that start with it ("": all); a spec and its zero byte reads that spec's section only
	keep   func(key string) bool // nil: all
	light  bool                  // the sums only (bytes, transfers), not the users nor the distributions
}

// walkStored calls fn with each series of a stored part that w selects.
func walkStored(data []byte, w walk, fn func(key string, a *Agg)) error {
	secs, err := sectionsOf(data, w.prefix)
	if err != nil {
		return err
	}
	for _, sc := range secs {
		if err := walkSeries(&decoder{Dec: codec.NewDec(sc.raw)}, sc.v, w, fn); err != nil {
			return err
		}
	}
	return nil
}

// section is a decompressed list of series of a part of version v.
type section struct {
	v   byte
	raw []byte
}

// sectionsOf returns the decompressed sections of a stored part that can
// hold keys starting with prefix: a prefix of a spec and its zero byte
// selects that spec's section only (parts of versions 1 and 2 have one
// section of every spec).
func sectionsOf(data []byte, prefix string) ([]section, error) {
	if len(data) == 0 || data[0] != 0 {
		raw, err := s2.Decode(nil, data) // versions 1 and 2
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errCorrupt, err)
		}
		d := decoder{Dec: codec.NewDec(raw)}
		v := d.Byte()
		if d.Err() == nil && (v < 1 || v > 2) {
			return nil, fmt.Errorf("%w: part version %d", errCorrupt, v)
		}
		return []section{{v, d.Rest()}}, d.Err()
	}
	d := decoder{Dec: codec.NewDec(data[1:])}
	if v := d.Byte(); d.Err() == nil && v != partVersion {
		return nil, fmt.Errorf("%w: part version %d", errCorrupt, v)
	}
	spec, whole := strings.CutSuffix(prefix, "\x00")
	whole = whole && !strings.Contains(spec, "\x00")
	var out []section
	for range d.Count(2) {
		s := d.Bytes(d.Count(1))
		z := d.Bytes(d.Count(1))
		if d.Err() != nil {
			return nil, d.Err()
		}
		if whole && string(s) != spec {
			continue
		}
		raw, err := s2.Decode(nil, z)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errCorrupt, err)
		}
		out = append(out, section{partVersion, raw})
	}
	return out, d.Err()
}

// walkSeries calls fn with each series of d, a list of series of a part
// of version v, that w selects.
func walkSeries(d *decoder, v byte, w walk, fn func(key string, a *Agg)) error {
	for range d.Count(2) {
		key := d.Bytes(d.Count(1))
		ab := d.Bytes(d.Count(1))
		if d.Err() != nil {
			return d.Err()
		}
		if len(key) < len(w.prefix) || string(key[:len(w.prefix)]) != w.prefix || (w.keep != nil && !w.keep(string(key))) {
			continue
		}
		a := &Agg{}
		ad := decoder{Dec: codec.NewDec(ab), version: v}
		if w.light {
			ad.sums(a)
		} else {
			ad.agg(a)
		}
		if ad.Err() != nil {
			return ad.Err()
		}
		fn(string(key), a)
	}
	return d.Err()
}

// State encoding: byte version (1), varint part, varint watermark,
// uvarint n, n × (uvarint len, server ip, varint stod, uvarint sid,
// uvarint file id, varint start, varint read, readv, write, last, byte closed).

func (b *Builder) marshalState(part, wm int64) []byte {
	out := []byte{1}
	out = binary.AppendVarint(out, part)
	out = binary.AppendVarint(out, wm)
	out = appendUvarint(out, uint64(len(b.open)))
	for k, o := range b.open {
		out = appendUvarint(out, uint64(len(k.ServerIP)))
		out = append(out, k.ServerIP...)
		out = binary.AppendVarint(out, k.ServerStod)
		out = appendUvarint(out, k.ServerID)
		out = appendUvarint(out, uint64(k.FileID))
		out = binary.AppendVarint(out, k.Start)
		for _, v := range []int64{o.read, o.readv, o.write, o.last} {
			out = binary.AppendVarint(out, v)
		}
		closed := byte(0)
		if o.closed {
			closed = 1
		}
		out = append(out, closed)
	}
	return out
}

func (b *Builder) unmarshalState(state []byte) error {
	if len(state) == 0 {
		return nil
	}
	d := decoder{Dec: codec.NewDec(state)}
	if v := d.Byte(); v != 1 {
		return fmt.Errorf("%w: state version %d", errCorrupt, v)
	}
	b.part = d.Varint()
	b.watermark = d.Varint()
	n := d.Count(10)
	for range n {
		var k record.AccessKey
		k.ServerIP = string(d.Bytes(d.Count(1)))
		k.ServerStod = d.Varint()
		k.ServerID = d.Uvarint()
		k.FileID = uint32(d.Uvarint())
		k.Start = d.Varint()
		o := &openAccess{read: d.Varint(), readv: d.Varint(), write: d.Varint(), last: d.Varint()}
		o.closed = d.Byte() == 1
		if d.Err() != nil {
			return d.Err()
		}
		b.open[k] = o
		b.openBytes += openSize(&k)
		b.seen(&k, o.last)
	}
	return d.Err()
}
