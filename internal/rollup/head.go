package rollup

import (
	"maps"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/xrdmon/xrdmon/internal/store"
)

// head is the sums not yet flushed, by minute (the start of a 1-minute
// bucket, Unix s). Hours and days are made of their minutes when the
// head is flushed or queried: a record updates one minute, not a bucket
// per resolution; only the entries a minute keeps as they came are also
// summed into their day as they come (days), for the flush.
type head struct {
	mins map[int64]*minute
	days map[int64]map[string]*Agg // the kept entries (minute.raw) summed, by day
}

func newHead() head {
	return head{mins: make(map[int64]*minute), days: make(map[int64]map[string]*Agg)}
}

// minute is the head's part of a 1-minute bucket. It starts sparse: its
// entries (records and progress snapshots) are kept as they came, their
// dimension values and what they add (raw), and summed into their day's
// series (head.days) but not into the minute's own nor the hour's. Past
// rawMax entries it becomes dense: every later entry is summed into the
// minute's series. A flush stores a sparse minute's kept entries as they
// are (a dense one's summed into the part of its series), and its hour's
// too (all the kept entries of the hour's minutes, at most 60 × rawMax).
// A stream whose time runs fast (a replay, a catch-up, xrdmon
// bench) has minutes of a few records and hours of a few thousand, each
// record making several series of its own: kept sparse, such a minute or
// hour costs its entries' bytes and the series of its day, not a sum, a
// key, an encoding and a merge into the day per series of the minute and
// of the hour. A collector keeping up with real time has minutes of
// thousands of records: they become dense within their first seconds. A
// minute's sums are those of its entries and its series.
type minute struct {
	raw    []rawEntry      // the first rawMax entries
	series map[string]*Agg // nil while sparse; then the later entries' series key -> sums
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
// came (and summed into its hour) while the minute is sparse, summed into
// the minute's series once it is dense. It allocates only for a minute or
// series the head does not hold yet, and for chunks.
func (b *Builder) add(t int64, r *sample, d *delta) {
	b.watermark = max(b.watermark, t)
	start := t - mod(t, 60)
	m := b.lastMinute
	if m == nil || start != b.lastMin {
		if m = b.head.mins[start]; m == nil {
			m = b.slab.minute()
			b.head.mins[start] = m
			b.headBytes += minuteOverhead
		}
		b.lastMin, b.lastMinute = start, m
	}
	if m.series == nil {
		if len(m.raw) < b.rawMax {
			ds := start - mod(start, 86400)
			b.headBytes += b.keep(m, r.vals, d) + b.dsum.add(b.day(ds), ds, &b.slab, r.vals, d)
			return
		}
		m.series = make(map[string]*Agg, len(m.raw)*len(b.specs)/2) // dense from now on
	}
	b.headBytes += b.sum.add(m.series, start, &b.slab, r.vals, d)
}

// day returns the head's sums of kept entries of the day that starts at
// ds.
func (b *Builder) day(ds int64) map[string]*Agg {
	if b.lastDayMap == nil || ds != b.lastDay {
		m := b.head.days[ds]
		if m == nil {
			m = make(map[string]*Agg)
			b.head.days[ds] = m
			b.headBytes += minuteOverhead
		}
		b.lastDay, b.lastDayMap = ds, m
	}
	return b.lastDayMap
}

// forget forgets what add remembers of the head's minutes and days (the
// head was swapped out or changed).
func (b *Builder) forget() {
	b.lastMinute, b.lastDayMap = nil, nil
	b.sum.reset()
	b.dsum.reset()
}

// keep appends an entry to sparse minute m, its values held in the slab
// (slab.strings), and returns the bytes it takes.
func (b *Builder) keep(m *minute, vals []string, d *delta) int64 {
	if len(m.raw) == cap(m.raw) {
		m.raw = append(b.slab.rawRoom(max(2*len(m.raw), slabRaw)), m.raw...)
	}
	kept, n := b.slab.strings(vals, b.copyVal)
	m.raw = append(m.raw, rawEntry{vals: kept, d: *d})
	return rawOverhead + n
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

// rawSums returns the series of entries raw of the specs whose keys can
// start with prefix (every spec when prefix is ""; a caller filters the
// keys), summed by specs (their dimensions at dims in the entries'
// values): what a sparse minute holds, summed for a query or from a
// stored part. Its sums are on the heap, not an adder's slab, whose
// chunks are sized for a head, not for a minute a query reads.
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

// minuteSums returns the series of dense minute m, its kept entries'
// sums and its own merged, without changing its own (its hour and day
// take them apart from the kept entries).
func (b *Builder) minuteSums(m *minute) map[string]*Agg {
	out := rawSums(m.raw, b.specs, b.dims, "")
	for k, a := range m.series {
		if c := out[k]; c != nil {
			c.Merge(a)
		} else {
			out[k] = a
		}
	}
	return out
}

// each calls fn with the series of m whose key starts with prefix: those
// of its entries kept, then its own, a key possibly twice (fn sums
// them). fn must not keep a.
func (b *Builder) each(m *minute, prefix string, fn func(key string, a *Agg)) {
	for _, series := range [2]map[string]*Agg{rawSums(m.raw, b.specs, b.dims, prefix), m.series} {
		for k, a := range series {
			if strings.HasPrefix(k, prefix) {
				fn(k, a)
			}
		}
	}
}

// headParts returns the parts that store head h, numbered from after
// part, and how many each bucket got. Each minute of h is encoded once,
// as one part: a sparse one's entries kept, a dense one's series with its
// kept entries summed into them. An hour
// gets its minutes' kept entries as one part of entries (their bytes as
// the minutes' parts hold them), and the series of its dense minutes; a
// day gets the sums of its minutes' kept entries (head.days, summed as
// they came) and its hours' series.
// A coarser bucket (hour, day) that the head holds one or two pieces of
// (as when the flushes come more often than the minutes: a collector
// keeping up) gets their bytes as its parts, merged later by its
// compaction like any bucket's; one that it holds more of (a stream
// whose time runs fast: a catch-up, a replay) gets one part of series,
// the merge of them, and its part of entries, so that its part count
// stays small. The series of those sums and merges are sl's.
//
// A bucket that retention deletes at watermark wm (expiredBefore) is not
// written: the flush's commit would delete it (a stream whose time runs
// fast flushes weeks of minutes at once, nearly all of them past the
// minutes' retention). Its sums still go into the coarser buckets.
func (b *Builder) headParts(h head, part int64, sl *slab, wm int64) ([]store.RollupPart, map[bucketKey]int) {
	// A bucket's sums so far (nil: entries as they came, in their day's
	// sums already), each with its encoded parts (nil: not yet).
	type piece struct {
		m     map[string]*Agg
		parts []specPart
		kept  bool // parts hold the minute's kept entries too: not a coarser bucket's
	}
	// The kept entries of an hour's minutes: their bytes in ents (the
	// minutes in time order, so an hour's are one run) and count.
	type kept struct {
		from, to, n int
	}
	var enc partEncoder
	ents := b.ents[:0]
	defer func() { b.ents = ents[:0] }()
	level := make(map[bucketKey][]piece, len(h.mins))
	hours := make(map[int64]*kept)
	minCut := b.expiredBefore(60, wm)
	for _, start := range slices.Sorted(maps.Keys(h.mins)) {
		m := h.mins[start]
		var ps []piece
		if len(m.raw) > 0 {
			hs := start - mod(start, 3600)
			from := len(ents)
			ents = appendEntries(ents, m.raw)
			if k := hours[hs]; k != nil {
				k.to, k.n = len(ents), k.n+len(m.raw)
			} else {
				hours[hs] = &kept{from, len(ents), len(m.raw)}
			}
			if start >= minCut && len(m.series) == 0 {
				ps = append(ps, piece{parts: []specPart{enc.rawPart(ents[from:], len(m.raw), b.specs, b.used)}})
			}
		}
		switch {
		case len(m.series) > 0 && len(m.raw) > 0 && start >= minCut:
			// Dense: one part of its series and its kept entries summed,
			// not a part of each that its compaction would read back,
			// sum and write again (a stream whose time runs fast has
			// every minute so).
			ps = append(ps, piece{m: m.series, parts: []specPart{enc.encodeAll(b.minuteSums(m))}, kept: true})
		case len(m.series) > 0:
			ps = append(ps, piece{m: m.series, parts: []specPart{enc.encodeAll(m.series)}})
		}
		level[bucketKey{60, start}] = ps
	}
	var out []store.RollupPart
	added := make(map[bucketKey]int)
	emit := func(lv map[bucketKey][]piece) {
		for _, bk := range sortedBuckets(lv) {
			if bk.start < b.expiredBefore(bk.step, wm) {
				continue
			}
			for _, p := range lv[bk] {
				part++
				out = append(out, rows(bk.step, bk.start, part, p.parts)...)
				added[bk]++
			}
		}
	}
	emit(level)
	for _, step := range Resolutions[1:] {
		s := int64(step / time.Second)
		coarse := make(map[bucketKey][]piece)
		var entries map[bucketKey]piece // the bucket's entries as they came, apart from its series
		switch step {
		case time.Hour:
			entries = make(map[bucketKey]piece, len(hours))
			for hs, k := range hours {
				entries[bucketKey{s, hs}] = piece{parts: []specPart{enc.rawPart(ents[k.from:k.to], k.n, b.specs, b.used)}}
			}
		case 24 * time.Hour:
			for ds, m := range h.days {
				coarse[bucketKey{s, ds}] = []piece{{m: m}}
			}
		}
		for _, bk := range sortedBuckets(level) {
			c := bucketKey{s, bk.start - mod(bk.start, s)}
			for _, p := range level[bk] {
				if p.kept {
					p.parts, p.kept = nil, false // its series alone, encoded below if taken as they are
				}
				if p.m != nil {
					coarse[c] = append(coarse[c], p)
				}
			}
		}
		for c, ps := range coarse {
			if len(ps) <= reusedPieces {
				for i := range ps {
					if ps[i].parts == nil {
						ps[i].parts = enc.encode(nil, ps[i].m)
					}
				}
				continue
			}
			m := make(map[string]*Agg, len(ps[0].m))
			for _, p := range ps {
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
		for c, p := range entries {
			coarse[c] = append([]piece{p}, coarse[c]...)
		}
		emit(coarse)
		level = coarse
	}
	return out, added
}

// reusedPieces is the most minutes (or hours) of a flush whose encoded
// parts an hour (or day) takes as they are; past it they are summed.
const reusedPieces = 2

// mergeBack adds src, a head whose flush failed, to the head: it is
// written by a later flush, with its cursor. Call with mu held.
func (b *Builder) mergeBack(src head) {
	b.forget()
	b.headBytes += headSize(src)
	for start, m := range src.mins {
		d := b.head.mins[start]
		if d == nil {
			b.head.mins[start] = m
			continue
		}
		d.raw = append(d.raw, m.raw...) // summed in src.days, merged below
		if m.series != nil {
			if d.series == nil {
				d.series = make(map[string]*Agg, len(m.series))
			}
			for k, a := range m.series {
				mergeInto(d.series, k, a)
			}
		}
	}
	mergeBuckets(b.head.days, src.days)
}

// headSize estimates the bytes of h.
func headSize(h head) int64 {
	var n int64
	for _, m := range h.mins {
		n += minuteOverhead + seriesSize(m.series)
		for _, e := range m.raw {
			n += rawOverhead
			for _, v := range e.vals {
				n += int64(len(v)) + int64(unsafe.Sizeof(v))
			}
		}
	}
	for _, m := range h.days {
		n += minuteOverhead + seriesSize(m)
	}
	return n
}

// seriesSize estimates the bytes of series m.
func seriesSize(m map[string]*Agg) int64 {
	var n int64
	for k, a := range m {
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
