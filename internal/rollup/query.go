package rollup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// ErrNotRolledUp is returned for a query by dimensions the configuration
// does not keep (rollup.dimensions).
var ErrNotRolledUp = errors.New("not rolled up")

// Query asks for series.
type Query struct {
	// By is the dimensions to group by (nil: the total); they must be one
	// of the configured combinations.
	By []record.Dim
	// From and To bound the buckets (From inclusive, To exclusive, both
	// rounded out to Step).
	From, To time.Time
	// Step is the resolution: one minute, hour or day.
	Step time.Duration
	// Where keeps only series whose value of a dimension (of By) is given.
	Where map[record.Dim]string
}

// Point is one bucket of a series.
type Point struct {
	Time time.Time
	Agg
}

// Series is one series of a query: its values of the query's dimensions
// and its points, oldest first; Total merges the points.
type Series struct {
	Keys   []string
	Points []Point
	Total  Agg
}

// Querier answers queries over the rollups: from the stored parts, and
// for a running builder (Builder embeds its Querier) from its head too. A
// Querier of a store alone (NewReader) is what xrdmon report reads: it
// does not see what the builder has not flushed yet.
type Querier struct {
	cfg   Config
	specs []Spec
	parts PartReader
	live  *Builder // nil: the store's parts only
	// watermark of a reader: the builder's at its last flush
	watermark int64
}

// wm returns the latest data time summed (Unix s).
func (qr *Querier) wm() int64 {
	if b := qr.live; b != nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.watermark
	}
	return qr.watermark
}

// lockParts orders a query with a running builder's flush (see
// Builder.partsMu); a reader has nothing to order with.
func (qr *Querier) lockParts() {
	if qr.live != nil {
		qr.live.partsMu.RLock()
	}
}

func (qr *Querier) unlockParts() {
	if qr.live != nil {
		qr.live.partsMu.RUnlock()
	}
}

// Specs returns the dimension combinations kept, the total ("") first.
func (qr *Querier) Specs() []Spec { return slices.Clone(qr.specs) }

func (qr *Querier) spec(by []record.Dim) (Spec, error) {
	s := SpecOf(by)
	if !slices.Contains(qr.specs, s) {
		return "", fmt.Errorf("%w: %q (kept: %v)", ErrNotRolledUp, s, qr.specs[1:])
	}
	return s, nil
}

// Series answers q: one series per combination of values seen, each with
// the points of the buckets that have data.
func (qr *Querier) Series(ctx context.Context, q Query) ([]Series, error) {
	spec, err := qr.spec(q.By)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(Resolutions, q.Step) {
		return nil, fmt.Errorf("rollup step %s: want 1m, 1h or 24h", q.Step)
	}
	s := int64(q.Step / time.Second)
	from, to := q.From.Unix(), q.To.Unix()
	from -= mod(from, s)
	if m := mod(to, s); m != 0 {
		to += s - m
	}
	byBucket := make(map[int64]map[string]*Agg)
	err = qr.read(ctx, []span{{s, from, to}}, spec, walk{}, func(start int64, m map[string]*Agg) {
		byBucket[start] = m
	})
	if err != nil {
		return nil, err
	}
	series := make(map[string]*Series)
	starts := make([]int64, 0, len(byBucket))
	for start := range byBucket {
		starts = append(starts, start)
	}
	slices.Sort(starts)
	for _, start := range starts {
		for key, a := range byBucket[start] {
			sr := series[key]
			if sr == nil {
				_, vals, err := splitKey(key)
				if err != nil {
					return nil, err
				}
				if !where(q.By, vals, q.Where) {
					continue
				}
				sr = &Series{Keys: vals}
				series[key] = sr
			}
			sr.Points = append(sr.Points, Point{Time: time.Unix(start, 0).UTC(), Agg: *a})
			sr.Total.Merge(a)
		}
	}
	out := make([]Series, 0, len(series))
	for _, sr := range series {
		out = append(out, *sr)
	}
	slices.SortFunc(out, func(x, y Series) int {
		return cmp.Or(cmp.Compare(y.Total.Bytes(), x.Total.Bytes()), slices.Compare(x.Keys, y.Keys))
	})
	return out, nil
}

func where(by []record.Dim, vals []string, w map[record.Dim]string) bool {
	for d, v := range w {
		i := slices.Index(by, d)
		if i < 0 || i >= len(vals) || vals[i] != v {
			return false
		}
	}
	return true
}

// Row is one line of a top-N answer: a series' values and its sums over
// the window.
type Row struct {
	Keys []string
	Agg
}

// Measure names what Top orders by.
type Measure string

// The measures Top can order by.
const (
	ByBytes     Measure = "bytes"
	ByRead      Measure = "read"
	ByWrite     Measure = "write"
	ByTransfers Measure = "transfers"
	ByPartial   Measure = "partial"
	ByUsers     Measure = "users"
)

// Value returns a's value of measure m.
func (m Measure) Value(a *Agg) int64 {
	switch m {
	case ByRead:
		return a.ReadBytes + a.ReadvBytes
	case ByWrite:
		return a.WriteBytes
	case ByTransfers:
		return a.Transfers + a.Partial
	case ByPartial:
		return a.Partial
	case ByUsers:
		return a.Users.Count()
	}
	return a.Bytes()
}

// Top returns the n series of dimensions by with the largest measure over
// [from, to), and the total of the window. The window is covered with the
// coarsest buckets that fit in it (days, then hours, then minutes at its
// edges); an edge older than the finer resolution's retention is rounded
// out to the coarser bucket.
//
// With n > 0 and a measure of sums (not users), Top ranks the series by
// their sums alone (read without their users and distributions), then
// reads in full only the n it returns, and the total from the total's
// series.
func (qr *Querier) Top(ctx context.Context, by []record.Dim, from, to time.Time, m Measure, n int) ([]Row, Agg, error) {
	spec, err := qr.spec(by)
	if err != nil {
		return nil, Agg{}, err
	}
	spans := qr.cover(from.Unix(), to.Unix())
	if n <= 0 || m == ByUsers {
		// Every series in full: one pass.
		sums, err := qr.sum(ctx, spans, spec, walk{})
		if err != nil {
			return nil, Agg{}, err
		}
		return topOf(sums, m, n)
	}
	// Rank by the sums alone, then read in full the n returned, from the
	// same sections (read and decompressed once).
	secs, head, err := qr.load(ctx, spans, spec)
	if err != nil {
		return nil, Agg{}, err
	}
	pass := func(w walk) (map[string]*Agg, error) {
		sums := make(map[string]*Agg)
		for _, sc := range secs {
			if err := walkSeries(&decoder{Dec: codec.NewDec(sc.raw)}, w, func(k string, a *Agg) { mergeInto(sums, k, a) }); err != nil {
				return nil, err
			}
		}
		for k, a := range head {
			if w.keep == nil || w.keep(k) {
				c := &Agg{}
				c.Merge(a)
				mergeInto(sums, k, c)
			}
		}
		return sums, nil
	}
	prefix := string(spec) + "\x00"
	light, err := pass(walk{prefix: prefix, light: true})
	if err != nil {
		return nil, Agg{}, err
	}
	rows, err := rank(light, m, n)
	if err != nil {
		return nil, Agg{}, err
	}
	top := make(map[string]bool, len(rows))
	for _, r := range rows {
		top[r.key] = true
	}
	full, err := pass(walk{prefix: prefix, keep: func(k string) bool { return top[k] }})
	if err != nil {
		return nil, Agg{}, err
	}
	out := make([]Row, len(rows))
	for i, r := range rows {
		out[i] = Row{Keys: r.vals, Agg: *full[r.key]}
	}
	var total Agg
	if spec == "" {
		for _, a := range full {
			total.Merge(a)
		}
	} else {
		ts, err := qr.sum(ctx, spans, "", walk{})
		if err != nil {
			return nil, Agg{}, err
		}
		for _, a := range ts {
			total.Merge(a)
		}
	}
	return out, total, nil
}

// topOf ranks every series of sums and returns the n first with the
// total of all.
func topOf(sums map[string]*Agg, m Measure, n int) ([]Row, Agg, error) {
	rows, err := rank(sums, m, n)
	if err != nil {
		return nil, Agg{}, err
	}
	var total Agg
	for _, a := range sums {
		total.Merge(a)
	}
	out := make([]Row, len(rows))
	for i, r := range rows {
		out[i] = Row{Keys: r.vals, Agg: *sums[r.key]}
	}
	return out, total, nil
}

// load returns the decompressed sections of spec's series in the stored
// parts of spans, and a copy of the head's sums of spec in spans.
func (qr *Querier) load(ctx context.Context, spans []span, spec Spec) ([]section, map[string]*Agg, error) {
	qr.lockParts()
	defer qr.unlockParts()
	prefix := string(spec) + "\x00"
	var secs []section
	head := make(map[string]*Agg)
	for _, sp := range spans {
		err := qr.parts.RollupParts(ctx, sp.step, sp.from, sp.to, string(spec), func(p store.RollupPart) error {
			ss, err := sectionsOf(p.Data, prefix)
			secs = append(secs, ss...)
			return err
		})
		if err != nil {
			return nil, nil, err
		}
		for _, m := range qr.headSums(sp, prefix, nil) {
			for k, a := range m {
				mergeInto(head, k, a)
			}
		}
	}
	return secs, head, nil
}

// headSums returns copies of the series in the heads of a running
// builder (the one being fed and the one being flushed) whose key starts
// with prefix (and that keep keeps, when not nil), summed into the buckets
// of span sp, by start; nothing for a reader. Call it with the parts
// locked (lockParts).
func (qr *Querier) headSums(sp span, prefix string, keep func(string) bool) map[int64]map[string]*Agg {
	b := qr.live
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[int64]map[string]*Agg)
	for _, h := range [2]head{b.head, b.flushing} {
		for start, hm := range h.mins {
			bs := start - mod(start, sp.step)
			if bs < sp.from || bs >= sp.to {
				continue
			}
			m := out[bs]
			b.each(hm, prefix, func(k string, a *Agg) {
				if keep != nil && !keep(k) {
					return
				}
				if m == nil {
					m = make(map[string]*Agg)
					out[bs] = m
				}
				if cur := m[k]; cur != nil {
					cur.Merge(a)
				} else {
					c := &Agg{}
					c.Merge(a)
					m[k] = c
				}
			})
		}
	}
	return out
}

// sum merges, per series of spec that w keeps, the buckets of spans.
func (qr *Querier) sum(ctx context.Context, spans []span, spec Spec, w walk) (map[string]*Agg, error) {
	sums := make(map[string]*Agg)
	err := qr.read(ctx, spans, spec, w, func(_ int64, bm map[string]*Agg) {
		for k, a := range bm {
			mergeInto(sums, k, a)
		}
	})
	return sums, err
}

// ranked is a series' place in a top-N.
type ranked struct {
	key  string
	vals []string
	v    int64
}

// rank returns the n series of sums with the largest measure m (all
// when n <= 0), ties by their values.
func rank(sums map[string]*Agg, m Measure, n int) ([]ranked, error) {
	rows := make([]ranked, 0, len(sums))
	for k, a := range sums {
		_, vals, err := splitKey(k)
		if err != nil {
			return nil, err
		}
		rows = append(rows, ranked{k, vals, m.Value(a)})
	}
	slices.SortFunc(rows, func(x, y ranked) int {
		return cmp.Or(cmp.Compare(y.v, x.v), slices.Compare(x.vals, y.vals))
	})
	if n > 0 && len(rows) > n {
		rows = rows[:n]
	}
	return rows, nil
}

// span is a run of buckets of one width: [from, to) in Unix seconds.
type span struct{ step, from, to int64 }

// cover returns spans of buckets that cover [from, to): whole days, then
// hours, then minutes at the edges.
func (qr *Querier) cover(from, to int64) []span {
	wm := qr.wm()
	const m, h, d = 60, 3600, 86400
	// Round out to what the finest available resolution can answer.
	unit := int64(m)
	if r := qr.cfg.RetentionMinute.D(); r > 0 && from < wm-int64(r/time.Second) {
		unit = h
		if r := qr.cfg.RetentionHour.D(); r > 0 && from < wm-int64(r/time.Second) {
			unit = d
		}
	}
	from -= mod(from, unit)
	if x := mod(to, unit); x != 0 {
		to += unit - x
	}
	if from >= to {
		return nil
	}
	var out []span
	var rec func(from, to int64, steps []int64)
	rec = func(from, to int64, steps []int64) {
		if from >= to {
			return
		}
		s := steps[0]
		if len(steps) == 1 {
			out = append(out, span{s, from, to})
			return
		}
		a, z := from, to
		if x := mod(a, s); x != 0 {
			a += s - x
		}
		z -= mod(z, s)
		if a >= z {
			rec(from, to, steps[1:])
			return
		}
		out = append(out, span{s, a, z})
		rec(from, a, steps[1:])
		rec(z, to, steps[1:])
	}
	rec(from, to, []int64{d, h, m})
	return out
}

// read merges, for each bucket of the spans, the stored parts and the
// head's sums of spec's series that w keeps (w.prefix is set here), and
// calls fn once per bucket.
func (qr *Querier) read(ctx context.Context, spans []span, spec Spec, w walk, fn func(start int64, m map[string]*Agg)) error {
	qr.lockParts()
	defer qr.unlockParts()
	prefix := string(spec) + "\x00"
	w.prefix = prefix
	for _, sp := range spans {
		buckets := make(map[int64]map[string]*Agg)
		err := qr.parts.RollupParts(ctx, sp.step, sp.from, sp.to, string(spec), func(p store.RollupPart) error {
			m := buckets[p.Start]
			if m == nil {
				m = make(map[string]*Agg)
				buckets[p.Start] = m
			}
			return walkStored(p.Data, w, func(key string, a *Agg) { mergeInto(m, key, a) })
		})
		if err != nil {
			return err
		}
		mergeBuckets(buckets, qr.headSums(sp, prefix, w.keep))
		for start, m := range buckets {
			fn(start, m)
		}
	}
	return nil
}
