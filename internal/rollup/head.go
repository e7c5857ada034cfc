package rollup

import (
	"strings"
	"time"
	"unsafe"

	"github.com/xrdmon/xrdmon/internal/store"
)

// head is the sums not yet flushed, by minute (the start of a 1-minute
// bucket, Unix s). Hours and days are made of their minutes when the
// head is flushed or queried: a record updates one bucket, not one per
// resolution.
type head map[int64]*minute

// minute is the head's part of a 1-minute bucket. It starts sparse: its
// entries (records and progress snapshots) are kept as they came, their
// dimension values and what they add (raw), and summed only when the
// minute is flushed or queried. Past rawMax entries it becomes dense: its
// entries are summed into its series, and so is every later one. A
// stream whose time runs fast (a replay, a catch-up, xrdmon bench) has
// minutes of a few records, each making several series of its own: kept
// sparse, such a minute costs its entries, not a sum, a key and an
// encoding per series, and its hour is summed from the entries, not
// merged from the minutes' series. A collector keeping up with real time
// has minutes of thousands of records: they become dense within their
// first seconds.
type minute struct {
	raw    []rawEntry      // while sparse (series nil)
	series map[string]*Agg // once dense: series key -> sums
}

// rawEntry is an entry of a sparse minute: its values of the builder's
// dimensions (Builder.used) and what it adds to each of its series.
type rawEntry struct {
	vals []string
	d    delta
}

// rawMax is the most entries a minute keeps as they came: past it, it is
// dense. The bench's stream (a simulated minute every 0.5 ms) has about
// 32 records a minute; a collector keeping up has thousands.
const rawMax = 128

// Bytes of the head besides keys and values: a minute, an entry (its
// delta and its values' headers), a series (aggOverhead).
const (
	minuteOverhead = int64(unsafe.Sizeof(minute{})) + 64
	rawOverhead    = int64(unsafe.Sizeof(rawEntry{}))
)

// aggOverhead is the bytes of a new series in the head besides its key:
// the Agg, the room for users and buckets the slab gives it, and its map
// slot.
const aggOverhead = int64(unsafe.Sizeof(Agg{})) + slabUsers*4 + 2*slabBuckets*int64(unsafe.Sizeof(hbucket{})) + 64

// add applies d to every series of r in the minute of time t: kept as it
// came while the minute is sparse, summed once it is dense. It allocates
// only for a minute or series the head does not hold yet (and chunks).
func (b *Builder) add(t int64, r *sample, d *delta) {
	b.watermark = max(b.watermark, t)
	start := t - mod(t, 60)
	m := b.lastMinute
	if m == nil || start != b.lastMin {
		if m = b.head[start]; m == nil {
			m = b.slab.minute()
			b.head[start] = m
			b.headBytes += minuteOverhead
		}
		b.lastMin, b.lastMinute = start, m
	}
	b.addTo(start, m, r.vals, d)
}

// addTo applies d to the series of vals in m, the minute that starts at
// start.
func (b *Builder) addTo(start int64, m *minute, vals []string, d *delta) {
	if m.series == nil {
		if len(m.raw) < b.rawMax {
			b.headBytes += b.keep(m, vals, d)
			return
		}
		b.densify(start, m)
	}
	b.headBytes += b.sum.add(m.series, start, &b.slab, vals, d)
}

// keep appends an entry to sparse minute m, its values copied into the
// slab, and returns the bytes it takes.
func (b *Builder) keep(m *minute, vals []string, d *delta) int64 {
	if len(m.raw) == cap(m.raw) {
		m.raw = append(b.slab.rawRoom(max(2*len(m.raw), slabRaw)), m.raw...)
	}
	kept, n := b.slab.strings(vals)
	m.raw = append(m.raw, rawEntry{vals: kept, d: *d})
	return rawOverhead + n
}

// densify sums the entries of sparse minute m (which starts at start)
// into its series: from now on it is dense.
func (b *Builder) densify(start int64, m *minute) {
	m.series = make(map[string]*Agg, len(m.raw)*len(b.specs)/2)
	for i := range m.raw {
		e := &m.raw[i]
		b.headBytes += b.sum.add(m.series, start, &b.slab, e.vals, &e.d)
	}
	m.raw = nil
}

// adder sums entries into the series of a bucket, spec by spec: an
// entry's key of each spec, its sums found in the bucket's map or made
// from a slab. It remembers per spec the series the last entry went to:
// consecutive entries often share one (the total, a server's, a site's).
type adder struct {
	specs []Spec
	dims  [][]int // per spec, the indexes of its dimensions in an entry's values
	last  []lastSeries
	key   []byte
}

// lastSeries is the series a spec's last entry went to.
type lastSeries struct {
	start int64 // its bucket's
	key   []byte
	agg   *Agg // nil: none
}

func newAdder(specs []Spec, dims [][]int) adder {
	return adder{specs: specs, dims: dims, last: make([]lastSeries, len(specs))}
}

// reset forgets the last series: call it when the maps it went to are
// let go (or given to another adder).
func (ad *adder) reset() { clear(ad.last) }

// add applies d to every series of vals in m, the series of the bucket
// that starts at start, new series coming from sl, and returns the bytes
// m grew by. It allocates only for a series m does not hold yet.
func (ad *adder) add(m map[string]*Agg, start int64, sl *slab, vals []string, d *delta) int64 {
	var grew int64
	for i, s := range ad.specs {
		c := &ad.last[i]
		ad.key = appendKey(ad.key[:0], s, ad.dims[i], vals)
		a := c.agg
		if a == nil || c.start != start || string(c.key) != string(ad.key) {
			if a = m[string(ad.key)]; a == nil {
				a = sl.agg(slabUsers, slabBuckets)
				m[sl.key(ad.key)] = a
				grew += int64(len(ad.key)) + aggOverhead
			}
			c.start, c.key, c.agg = start, append(c.key[:0], ad.key...), a
		}
		if d.closed && (len(a.Users.small) == cap(a.Users.small) || len(a.Duration.b) == cap(a.Duration.b) || len(a.Size.b) == cap(a.Size.b)) {
			sl.room(a)
		}
		grew += a.apply(d)
	}
	return grew
}

// rawSums returns the series of entries raw whose key starts with prefix
// (every series when prefix is ""), summed by specs (their dimensions at
// dims in the entries' values): what a sparse minute holds, summed for a
// query or from a stored part.
func rawSums(raw []rawEntry, specs []Spec, dims [][]int, prefix string) map[string]*Agg {
	out := make(map[string]*Agg)
	var key []byte
	for i, s := range specs {
		if sp := string(s) + "\x00"; !strings.HasPrefix(sp, prefix) && !strings.HasPrefix(prefix, sp) {
			continue
		}
		for j := range raw {
			e := &raw[j]
			key = appendKey(key[:0], s, dims[i], e.vals)
			if !strings.HasPrefix(string(key), prefix) {
				continue
			}
			a := out[string(key)]
			if a == nil {
				a = &Agg{}
				out[string(key)] = a
			}
			a.apply(&e.d)
		}
	}
	return out
}

// each calls fn with the series of m whose key starts with prefix: its
// sums (dense), or those of its entries (sparse). fn must not keep a.
func (b *Builder) each(m *minute, prefix string, fn func(key string, a *Agg)) {
	series := m.series
	if series == nil {
		series = rawSums(m.raw, b.specs, b.dims, prefix)
	}
	for k, a := range series {
		if strings.HasPrefix(k, prefix) {
			fn(k, a)
		}
	}
}

// headParts returns the parts that store head h, numbered from after
// part, and how many each bucket got. Each minute of h is encoded once:
// a sparse one as its entries, a dense one as its series. A coarser
// bucket (hour, day) that the head holds one or two minutes of (as when
// the flushes come more often than the minutes: a collector keeping up)
// gets their bytes as its parts, merged later by its compaction like any
// bucket's; one that it holds more minutes of (a stream whose time runs
// fast: a catch-up, a replay) gets one part, the sum of them: the entries
// of its sparse minutes summed, the series of its dense ones merged, so
// that its part count stays small. The series of those sums are sl's.
func (b *Builder) headParts(h head, part int64, sl *slab) ([]store.RollupPart, map[bucketKey]int) {
	// A bucket's sums so far, each with its encoded parts: a sparse
	// minute's entries, or series.
	type piece struct {
		raw   []rawEntry
		m     map[string]*Agg
		parts []specPart
	}
	var enc partEncoder
	level := make(map[bucketKey][]piece, len(h))
	for start, m := range h {
		p := piece{raw: m.raw, m: m.series}
		if m.series == nil {
			p.parts = []specPart{enc.encodeRaw(m.raw, b.specs, b.used)}
		} else {
			p.parts = []specPart{enc.encodeAll(m.series)}
		}
		level[bucketKey{60, start}] = []piece{p}
	}
	var out []store.RollupPart
	added := make(map[bucketKey]int)
	emit := func(lv map[bucketKey][]piece) {
		for _, bk := range sortedBuckets(lv) {
			for _, p := range lv[bk] {
				part++
				out = append(out, rows(bk.step, bk.start, part, p.parts)...)
				added[bk]++
			}
		}
	}
	emit(level)
	ad := newAdder(b.specs, b.dims)
	for _, step := range Resolutions[1:] {
		s := int64(step / time.Second)
		coarse := make(map[bucketKey][]piece)
		for _, bk := range sortedBuckets(level) {
			c := bucketKey{s, bk.start - mod(bk.start, s)}
			coarse[c] = append(coarse[c], level[bk]...)
		}
		for c, ps := range coarse {
			if len(ps) <= reusedPieces {
				continue
			}
			m := make(map[string]*Agg, max(len(ps[0].m), len(ps[0].raw)*len(b.specs)/2))
			for _, p := range ps {
				for i := range p.raw {
					ad.add(m, c.start, sl, p.raw[i].vals, &p.raw[i].d)
				}
				for k, a := range p.m {
					if cur := m[k]; cur != nil {
						sl.merge(cur, a)
					} else {
						m[k] = sl.clone(a)
					}
				}
			}
			coarse[c] = []piece{{m: m, parts: enc.encode(nil, m)}}
		}
		emit(coarse)
		level = coarse
	}
	return out, added
}

// reusedPieces is the most minutes (or hours) of a flush whose encoded
// parts an hour (or day) takes as they are; past it they are summed.
const reusedPieces = 2

// mergeBack adds the minutes of src, a head whose flush failed, to the
// head: they are written by a later flush, with its cursor. Call with mu
// held.
func (b *Builder) mergeBack(src head) {
	b.lastMinute = nil
	b.sum.reset()
	for start, m := range src {
		d := b.head[start]
		if d == nil {
			b.head[start] = m
			b.headBytes += minuteSize(m)
			continue
		}
		for i := range m.raw {
			b.addTo(start, d, m.raw[i].vals, &m.raw[i].d)
		}
		if m.series != nil {
			if d.series == nil {
				b.densify(start, d)
			}
			for k, a := range m.series {
				mergeInto(d.series, k, a)
				b.headBytes += int64(len(k)) + aggOverhead + int64(a.size())
			}
		}
	}
}

// minuteSize estimates the bytes of m.
func minuteSize(m *minute) int64 {
	n := minuteOverhead
	for _, e := range m.raw {
		n += rawOverhead
		for _, v := range e.vals {
			n += int64(len(v)) + int64(unsafe.Sizeof(v))
		}
	}
	for k, a := range m.series {
		n += int64(len(k)) + aggOverhead + int64(a.size())
	}
	return n
}

// mergeBuckets adds the series of src to dst, by bucket start.
func mergeBuckets(dst, src map[int64]map[string]*Agg) {
	for start, m := range src {
		d := dst[start]
		if d == nil {
			dst[start] = m
			continue
		}
		for k, a := range m {
			mergeInto(d, k, a)
		}
	}
}
