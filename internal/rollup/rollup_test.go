package rollup

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"context"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/pipeline"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/units"
)

// collected runs a loadgen stream with long transfers (isXfr updates)
// through the collector's pipeline into a real store and returns it with
// the truth.
func collected(t testing.TB, cfg loadgen.Config) (*store.Store, *loadgen.Truth) {
	t.Helper()
	return collectedWith(t, cfg, 0, nil)
}

// collectedWith is collected, with a commit every commitPackets packets
// (0: the default), calling before(st) on the store before the pipeline
// writes to it.
func collectedWith(t testing.TB, cfg loadgen.Config, commitPackets int, before func(*store.Store)) (*store.Store, *loadgen.Truth) {
	t.Helper()
	g, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mem loadgen.Memory
	truth, err := g.Run(context.Background(), &mem)
	if err != nil {
		t.Fatal(err)
	}
	o := store.DefaultOptions()
	o.Path = filepath.Join(t.TempDir(), "xrdmon.db")
	o.Retention = 0
	st, err := store.Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if before != nil {
		before(st)
	}
	po := pipeline.DefaultOptions()
	po.Shards = 2
	po.StateKey = ""
	po.FlushOnExit = true
	po.InputClock = true
	po.CommitPackets = commitPackets
	p, err := pipeline.New(context.Background(), po, st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *source.Batch, 4)
	go func() {
		for i := 0; i < len(mem.Packets); i += 256 {
			in <- &source.Batch{Packets: mem.Packets[i:min(i+256, len(mem.Packets))]}
		}
		close(in)
	}()
	if err := p.Run(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	return st, truth
}

func longConfig() loadgen.Config {
	c := loadgen.DefaultConfig()
	c.Servers, c.Duration, c.Seed = 3, 40*time.Minute, 7
	c.LongFrac, c.LongTransfer = 0.2, 25*time.Minute
	return c
}

func newBuilder(t testing.TB, st Store, cfg Config) *Builder {
	t.Helper()
	b, err := New(cfg, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

var forever = [2]time.Time{time.Unix(0, 0), time.Unix(1<<40, 0)}

// The rollups' sums by site and VO equal loadgen's truth: every byte,
// transfer and partial transfer, at every resolution; bytes of long
// transfers show in the minutes they flowed, before their close.
func TestRollupsMatchTruth(t *testing.T) {
	st, truth := collected(t, longConfig())
	cfg := DefaultConfig()
	cfg.RetentionMinute, cfg.RetentionHour = 0, 0
	b := newBuilder(t, st, cfg)
	if err := b.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	type sums struct{ read, readv, write, complete, partial, ms int64 }
	want := map[string]*sums{}
	var total sums
	for i := range truth.Records {
		r := &truth.Records[i]
		for _, k := range []string{r.Site + "/" + r.VO} {
			if want[k] == nil {
				want[k] = &sums{}
			}
			w := want[k]
			w.read, w.readv, w.write = w.read+r.ReadBytes, w.readv+r.ReadvBytes, w.write+r.WriteBytes
			if r.Partial() {
				w.partial++
			} else {
				w.complete++
			}
		}
		total.read += r.ReadBytes + r.ReadvBytes
		total.write += r.WriteBytes
	}
	ctx := context.Background()
	// Transfer times as the stream tells them (its times are whole
	// seconds of the server's clock, not the truth's).
	for seq := int64(0); ; {
		es, err := st.Read(ctx, seq, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if r := e.Record; r != nil && !r.Start.IsZero() && want[r.Site+"/"+r.VO] != nil {
				want[r.Site+"/"+r.VO].ms += r.End.Sub(r.Start).Milliseconds()
			}
			seq = e.Seq
		}
	}
	rows, tot, err := b.Top(ctx, []record.Dim{record.DimSite, record.DimVO}, forever[0], forever[1], ByBytes, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(want) {
		t.Fatalf("%d site/vo rows, truth has %d", len(rows), len(want))
	}
	for _, r := range rows {
		w := want[r.Keys[0]+"/"+r.Keys[1]]
		got := sums{r.ReadBytes, r.ReadvBytes, r.WriteBytes, r.Transfers, r.Partial, r.DurationMS}
		if w == nil || got != *w {
			t.Errorf("%v: %+v, truth %+v", r.Keys, got, w)
		}
	}
	if tot.ReadBytes+tot.ReadvBytes != total.read || tot.WriteBytes != total.write {
		t.Errorf("total read %d write %d, truth %d %d", tot.ReadBytes+tot.ReadvBytes, tot.WriteBytes, total.read, total.write)
	}
	// Every resolution sums to the same total.
	for _, step := range Resolutions {
		ss, err := b.Series(ctx, Query{From: forever[0], To: forever[1], Step: step})
		if err != nil {
			t.Fatal(err)
		}
		if len(ss) != 1 || ss[0].Total.Bytes() != tot.Bytes() || ss[0].Total.Transfers != tot.Transfers {
			t.Errorf("%s: %d series, total %d bytes %d transfers, want %d %d", step, len(ss), ss[0].Total.Bytes(), ss[0].Total.Transfers, tot.Bytes(), tot.Transfers)
		}
	}
	// A long transfer's bytes appear in the minutes before its close.
	ss, err := b.Series(ctx, Query{By: []record.Dim{record.DimUser}, From: forever[0], To: forever[1], Step: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	early := 0
	for i := range truth.Records {
		r := &truth.Records[i]
		if r.End.Sub(r.Start) < 5*time.Minute || r.Partial() {
			continue
		}
		for _, s := range ss {
			if s.Keys[0] != r.User {
				continue
			}
			for _, p := range s.Points {
				if p.Time.After(r.Start.Add(2*time.Minute)) && p.Time.Before(r.End.Add(-2*time.Minute)) && p.Bytes() > 0 {
					early++
					break
				}
			}
		}
	}
	if early == 0 {
		t.Error("no long transfer has bytes counted before its close")
	}
	if b.m.progress == nil {
		t.Fatal("no metrics")
	}
}

// A builder that crashes (its head and everything since its last flush
// lost) and resumes from the store gives the same buckets as one that ran
// through.
func TestRollupsRestartExact(t *testing.T) {
	st, _ := collected(t, longConfig())
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.RetentionMinute, cfg.RetentionHour = 0, 0

	// The uninterrupted run, on a copy of the log read in one go.
	ref, last := reference(t, st, cfg)
	// Crash twice: once mid-way after a flush, once with unflushed work.
	b := newBuilder(t, st, cfg)
	applyUpTo(t, b, st, last/3)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	applyUpTo(t, b, st, 2*last/3) // applied, never flushed: lost in the crash
	b = newBuilder(t, st, cfg)
	applyUpTo(t, b, st, last/2)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b = newBuilder(t, st, cfg)
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	sameSeries(t, ref, b, "after restarts")
}

func applyUpTo(t *testing.T, b *Builder, st *store.Store, seq int64) {
	t.Helper()
	for b.cursor < seq {
		es, err := st.Read(context.Background(), b.cursor, int(min(500, seq-b.cursor)))
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			return
		}
		b.Apply(es)
	}
}

func diffSeries(got, want []Series) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d series, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := &got[i], &want[i]
		if !slices.Equal(g.Keys, w.Keys) || len(g.Points) != len(w.Points) {
			return fmt.Sprintf("series %d: %v with %d points, want %v with %d", i, g.Keys, len(g.Points), w.Keys, len(w.Points))
		}
		for j := range g.Points {
			if s := diffAgg(&g.Points[j].Agg, &w.Points[j].Agg); s != "" || !g.Points[j].Time.Equal(w.Points[j].Time) {
				return fmt.Sprintf("%v at %s: %s", g.Keys, g.Points[j].Time, s)
			}
		}
	}
	return ""
}

func diffAgg(g, w *Agg) string {
	if g.ReadBytes != w.ReadBytes || g.ReadvBytes != w.ReadvBytes || g.WriteBytes != w.WriteBytes ||
		g.Transfers != w.Transfers || g.Partial != w.Partial || g.PartialBy != w.PartialBy || g.DurationMS != w.DurationMS ||
		g.Users.Count() != w.Users.Count() || !slices.Equal(g.Duration.b, w.Duration.b) || !slices.Equal(g.Size.b, w.Size.b) {
		return fmt.Sprintf("%+v, want %+v", *g, *w)
	}
	return ""
}

// memRollups is a Store whose rollup side is in memory: the reference run
// shares the log but not the parts of the builder under test.
type memRollups struct {
	*store.Store
	parts []store.RollupPart
	state []byte
	cur   int64
}

func (m *memRollups) CommitRollup(_ context.Context, c store.RollupCommit) error {
	for _, p := range c.Compacted {
		m.parts = slices.DeleteFunc(m.parts, func(q store.RollupPart) bool {
			return q.Step == p.Step && q.Start == p.Start && q.Part <= p.Part
		})
	}
	m.parts = append(m.parts, c.Compacted...)
	m.parts = append(m.parts, c.Add...)
	for step, before := range c.Expire {
		m.parts = slices.DeleteFunc(m.parts, func(q store.RollupPart) bool { return q.Step == step && q.Start < before })
	}
	m.state, m.cur = c.State, c.Cursor
	return nil
}

func (m *memRollups) RollupState(context.Context) ([]byte, int64, error) { return m.state, m.cur, nil }

func (m *memRollups) AddRollupParts(_ context.Context, ps []store.RollupPart) error {
	m.parts = append(m.parts, ps...)
	return nil
}

func (m *memRollups) DropRollupPartsAfter(_ context.Context, part int64) (int64, error) {
	n := len(m.parts)
	m.parts = slices.DeleteFunc(m.parts, func(q store.RollupPart) bool { return q.Part > part })
	return int64(n - len(m.parts)), nil
}

func (m *memRollups) RollupParts(_ context.Context, step, from, to int64, spec string, fn func(store.RollupPart) error) error {
	ps := slices.Clone(m.parts)
	slices.SortFunc(ps, func(a, b store.RollupPart) int {
		if a.Start != b.Start {
			return int(a.Start - b.Start)
		}
		return int(a.Part - b.Part)
	})
	for _, p := range ps {
		if p.Step == step && p.Start >= from && p.Start < to && (spec == store.AllSpecs || p.Spec == spec || p.Spec == store.AllSpecs) {
			if err := fn(p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *memRollups) RollupBuckets(_ context.Context, step, from, to int64) (map[int64]int, error) {
	parts := map[[2]int64]bool{}
	out := map[int64]int{}
	for _, p := range m.parts {
		if p.Step == step && p.Start >= from && p.Start < to && !parts[[2]int64{p.Start, p.Part}] {
			parts[[2]int64{p.Start, p.Part}] = true
			out[p.Start]++
		}
	}
	return out, nil
}

func TestHistQuantile(t *testing.T) {
	var h Hist
	for v := 1; v <= 1000; v++ {
		h.Observe(float64(v))
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		got, want := h.Quantile(q), q*1000
		if math.Abs(got-want)/want > 0.1 {
			t.Errorf("q%.2f = %.1f, want %.1f within 10%%", q, got, want)
		}
	}
	var g Hist
	g.Merge(&h)
	g.Merge(&h)
	if g.Count() != 2000 || g.Quantile(0.5) != h.Quantile(0.5) {
		t.Errorf("merged: %d values, median %.1f", g.Count(), g.Quantile(0.5))
	}
}

func TestUsers(t *testing.T) {
	var u, v Users
	for i := range 20 {
		u.Add(hashIdentity(fmt.Sprint("user", i)))
		u.Add(hashIdentity(fmt.Sprint("user", i))) // twice: counted once
	}
	if u.Count() != 20 {
		t.Fatalf("exact: %d", u.Count())
	}
	for i := range 5000 {
		v.Add(hashIdentity(fmt.Sprint("user", i)))
	}
	v.Merge(&u)
	if n := v.Count(); math.Abs(float64(n)-5000)/5000 > 0.05 { // 1.6 % standard error: within 3σ
		t.Errorf("estimated %d distinct, want 5000 within 5%%", n)
	}
	// Round trip through the part encoding.
	a := &Agg{Users: v, Transfers: 3}
	a.Duration.Observe(1234)
	raw := encodeParts(map[string]*Agg{"\x00": a})[0].data
	var got *Agg
	if err := walkStored(raw, walk{}, func(_ string, x *Agg) { got = x.clone() }); err != nil {
		t.Fatal(err)
	}
	if d := diffAgg(got, a); d != "" {
		t.Error(d)
	}
}

// A part is read by spec: a query of one spec gets its series only.
func TestPartFormats(t *testing.T) {
	m := map[string]*Agg{}
	for i, k := range []string{"\x00", "site\x00\x01A", "site\x00\x01B", "site,vo\x00\x01A\x03cms", "vo\x00\x03cms"} {
		a := &Agg{ReadBytes: int64(i + 1), Transfers: 1, DurationMS: 7}
		a.Size.Observe(float64(1000 * (i + 1)))
		m[k] = a
	}
	var v3 [][]byte
	for _, p := range encodeParts(m) {
		v3 = append(v3, p.data)
	}
	if len(v3) != 4 {
		t.Fatalf("%d parts, want one per spec (4)", len(v3))
	}
	var enc partEncoder
	all := enc.encodeAll(m) // a minute's row: every spec's section
	if all.spec != store.AllSpecs {
		t.Fatalf("a part of every spec is stored as spec %q, want %q", all.spec, store.AllSpecs)
	}
	for name, parts := range map[string][][]byte{"a part per spec": v3, "one part of every spec": {all.data}} {
		for _, prefix := range []string{"", "site\x00", "site,vo\x00", "vo\x00", "\x00", "dir\x00"} {
			got := map[string]*Agg{}
			for _, data := range parts {
				if err := walkStored(data, walk{prefix: prefix}, func(k string, a *Agg) { got[k] = a.clone() }); err != nil {
					t.Fatalf("%s %q: %v", name, prefix, err)
				}
			}
			n := 0
			for k, a := range m {
				if !strings.HasPrefix(k, prefix) {
					continue
				}
				n++
				if got[k] == nil || diffAgg(got[k], a) != "" {
					t.Errorf("%s %q: series %q: %+v, want %+v", name, prefix, k, got[k], a)
				}
			}
			if len(got) != n {
				t.Errorf("%s %q: %d series, want %d", name, prefix, len(got), n)
			}
		}
	}
}

func TestReasons(t *testing.T) {
	if numReasons != len(record.Reasons) {
		t.Fatalf("numReasons %d, record.Reasons has %d", numReasons, len(record.Reasons))
	}
}

// Garbage parts are errors, never panics.
func FuzzPart(f *testing.F) {
	a := &Agg{ReadBytes: 5, Transfers: 1}
	a.Users.Add(1)
	a.Size.Observe(1e6)
	f.Add(encodeParts(map[string]*Agg{"site\x00\x03abc": a, "\x00": a})[1].data)
	var enc partEncoder
	raw := []rawEntry{{vals: []string{"abc", "cms"}, d: delta{read: 5, closed: true, reason: 1, user: 7, ms: 9, dur: 13, size: 80}},
		{vals: []string{"abc", ""}, d: delta{write: 3}}}
	f.Add(enc.rawPart(appendEntries(nil, raw), len(raw), []Spec{"", "site", "site,vo"}, []record.Dim{record.DimSite, record.DimVO}).data)
	f.Add([]byte{1, 200, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = walkStored(b, walk{}, func(string, *Agg) {})
		_ = walkStored(b, walk{prefix: "site\x00", light: true}, func(string, *Agg) {})
		_, _, _ = splitKey(string(b))
		var bl Builder
		bl.open, bl.serverTime = map[record.AccessKey]openAccess{}, map[serverKey]int64{}
		_ = bl.unmarshalState(b)
	})
}

// denseReference returns a store of a long collected stream, a config
// that keeps every bucket, a builder over it that sums every entry as it
// comes (no minute kept sparse), caught up, and the store's last seq.
func denseReference(t *testing.T) (*store.Store, Config, *Builder, int64) {
	t.Helper()
	st, _ := collected(t, longConfig())
	cfg := DefaultConfig()
	cfg.RetentionMinute, cfg.RetentionHour = 0, 0
	dense := newBuilder(t, &memRollups{Store: st}, cfg)
	dense.rawMax = 0
	if err := dense.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	last, err := st.LastSeq(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st, cfg, dense, last
}

// A minute kept sparse (its entries as they came) gives every series the
// same sums as one summed as the entries come (dense), at every
// resolution: read from the head, from the stored parts after a flush,
// and with minutes that turn dense part way (rawMax 4).
func TestSparseMinutesExact(t *testing.T) {
	ctx := context.Background()
	st, cfg, dense, last := denseReference(t)
	for _, raw := range []int{rawMax, 4} {
		b := newBuilder(t, &memRollups{Store: st}, cfg)
		b.rawMax = raw
		applyUpTo(t, b, st, last)
		sparse, full := 0, 0
		for _, m := range b.head.mins {
			if m.series == nil {
				sparse++
			} else {
				full++
			}
		}
		if sparse == 0 || raw == 4 && full == 0 {
			t.Fatalf("raw %d: %d sparse minutes, %d dense: the stream does not test them", raw, sparse, full)
		}
		t.Logf("raw %d: %d minutes sparse, %d dense", raw, sparse, full)
		sameSeries(t, dense, b, fmt.Sprintf("in the head (%d minutes sparse of %d, raw %d)", sparse, sparse+full, raw))
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		sameSeries(t, dense, b, fmt.Sprintf("stored (raw %d)", raw))
	}
}

// A dense minute that one flush writes is stored as one part, its kept
// entries summed into its series: nothing for a compaction to read back,
// sum and write again (a stream whose time runs fast has every minute
// so). Its sums, and those of its hour and day, are exact.
func TestDenseMinuteOnePart(t *testing.T) {
	ctx := context.Background()
	st, cfg, dense, last := denseReference(t)
	mr := &memRollups{Store: st}
	b := newBuilder(t, mr, cfg)
	b.rawMax = 4
	applyUpTo(t, b, st, last)
	mins, mixed := len(b.head.mins), 0
	for _, m := range b.head.mins {
		if m.series != nil && len(m.raw) > 0 {
			mixed++
		}
	}
	if mixed == 0 {
		t.Fatal("no dense minute with kept entries: the stream does not test them")
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	parts, err := mr.RollupBuckets(ctx, 60, forever[0].Unix(), forever[1].Unix())
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != mins {
		t.Fatalf("%d minutes stored, want %d", len(parts), mins)
	}
	for start, n := range parts {
		if n != 1 {
			t.Errorf("minute %s: %d parts, want 1", time.Unix(start, 0).UTC(), n)
		}
	}
	t.Logf("%d minutes, %d of them dense with kept entries", mins, mixed)
	sameSeries(t, dense, b, "a part a minute")
}

// An hour whose minutes are sparse is stored as their entries, a part per
// flush that holds some of them, and summed only for its day: flushed
// every few entries, so that hours and days get parts from many flushes
// and are compacted, its series are those of a builder that sums every
// entry as it comes (dense), at every resolution.
func TestSparseHoursAcrossFlushes(t *testing.T) {
	ctx := context.Background()
	st, cfg, dense, last := denseReference(t)
	b := newBuilder(t, &memRollups{Store: st}, cfg)
	flushes := 0
	for seq := int64(0); seq < last; {
		seq = min(seq+7, last)
		applyUpTo(t, b, st, seq)
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		flushes++
	}
	if compactions := testutil.ToFloat64(b.m.compactions); flushes < 20 || compactions == 0 {
		t.Fatalf("%d flushes, %v compactions: the stream does not split hours", flushes, compactions)
	}
	sameSeries(t, dense, b, fmt.Sprintf("stored in %d flushes", flushes))
}

// The head's bytes, which decide when it is flushed and bound it
// (rollup.max_head_bytes), count what it holds: records whose every value
// is new (an attacker's, or a stream of unique users and directories) on
// a clock that runs fast, sparse minutes (the series their entries make
// in their hours) and dense ones alike, within a factor of two of the
// heap they take.
func TestHeadBytesTrackMemory(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	recs := benchRecords(20000, t0)
	for i := range recs {
		r := &recs[i]
		r.End = t0.Add(time.Duration(i/32) * time.Minute)
		r.User, r.AppName = fmt.Sprintf("user-%d-%s", i, strings.Repeat("u", 40)), fmt.Sprintf("app-%d", i)
		r.Path = fmt.Sprintf("/store/%d/%s/x/f.root", i, strings.Repeat("d", 40))
		r.ClientName = fmt.Sprintf("wn.%d.example.org", i)
	}
	for _, raw := range []int{rawMax, 0} {
		cfg := DefaultConfig()
		cfg.MaxHeadBytes = 1 << 40
		b, err := New(cfg, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.rawMax = raw
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range recs {
			b.applyRecord(&recs[i])
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("raw %d: %d records: head bytes %d, heap %d (%.2f)", raw, len(recs), b.headBytes, heap, float64(b.headBytes)/float64(heap))
		if b.headBytes < heap/2 || b.headBytes > 2*heap {
			t.Errorf("raw %d: the head counts %d bytes for %d of heap", raw, b.headBytes, heap)
		}
		runtime.KeepAlive(b)
	}
}

// A sparse minute's part, read for any spec or prefix, holds the series
// its entries sum to.
func TestRawPart(t *testing.T) {
	specs := []Spec{"", "site", "vo", "site,vo"}
	dims := []record.Dim{record.DimSite, record.DimVO}
	idx := [][]int{nil, {0}, {1}, {0, 1}}
	var raw []rawEntry
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		e := rawEntry{vals: []string{[]string{"A", "B", "C\x00\xff"}[rng.IntN(3)], []string{"cms", "atlas", ""}[rng.IntN(3)]}}
		e.d = delta{read: rng.Int64N(1 << 40), readv: rng.Int64N(100), write: rng.Int64N(1 << 20)}
		if i%3 != 0 {
			e.d.closed, e.d.reason, e.d.user, e.d.ms = true, rng.IntN(numReasons+1)-1, rng.Uint32(), rng.Int64N(1e6)
			e.d.dur, e.d.size = histIndex(float64(e.d.ms)), histIndex(float64(e.d.read))
		}
		raw = append(raw, e)
	}
	want := make(map[string]*Agg)
	ad := newAdder(specs, idx)
	var sl slab
	for i := range raw {
		ad.add(want, 60, &sl, raw[i].vals, &raw[i].d)
	}
	var enc partEncoder
	data := enc.rawPart(appendEntries(nil, raw), len(raw), specs, dims).data
	for _, prefix := range []string{"", "\x00", "site\x00", "vo\x00", "site,vo\x00", "site\x00\x01A", "dir\x00"} {
		got := map[string]*Agg{}
		if err := walkStored(data, walk{prefix: prefix}, func(k string, a *Agg) { got[k] = a.clone() }); err != nil {
			t.Fatalf("%q: %v", prefix, err)
		}
		n := 0
		for k, a := range want {
			if !strings.HasPrefix(k, prefix) {
				continue
			}
			n++
			if g := got[k]; g == nil || !reflect.DeepEqual(g.Summary(), a.Summary()) || g.Users.Count() != a.Users.Count() {
				t.Fatalf("%q: series %q: got %+v, want %+v", prefix, k, g, a.Summary())
			}
		}
		if n != len(got) || n == 0 && prefix != "dir\x00" {
			t.Fatalf("%q: %d series, want %d", prefix, len(got), n)
		}
	}
	for cut := range len(data) {
		if err := walkStored(data[:cut], walk{}, func(string, *Agg) {}); err == nil {
			t.Fatalf("a part cut at %d of %d bytes read without an error", cut, len(data))
		}
	}
}

// TestRollupRecordAllocs: summing a record into series the minute already
// holds allocates nothing (the series keys are built in a reused buffer
// and looked up without a string); only a new series allocates.
func TestRollupRecordAllocs(t *testing.T) {
	bl, err := New(DefaultConfig(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	recs := benchRecords(1024, time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC))
	for i := range recs {
		bl.applyRecord(&recs[i])
	}
	i := 0
	allocs := testing.AllocsPerRun(2000, func() {
		if i%len(recs) == 0 {
			clear(bl.open)
		}
		bl.applyRecord(&recs[i%len(recs)])
		i++
	})
	if allocs != 0 {
		t.Fatalf("%.2f allocations per record, want 0", allocs)
	}
}

// TestHistAddMerge: a histogram built by adds in any order, by merges of
// histograms and by decoding holds the same counts per bucket as a plain
// count (the index marks stay right through inserts and merges, also for
// indexes beyond the marked range).
func TestHistAddMerge(t *testing.T) {
	rng := uint64(1)
	next := func(n int) int {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int(rng % uint64(n))
	}
	for round := range 200 {
		want := map[int16]int64{}
		var parts [3]Hist
		for range 1 + next(300) {
			i := int16(next(300))
			if round%5 == 0 {
				i -= 20 // some negative indexes: only a corrupt part has them, but they must count
			}
			n := int64(1 + next(3))
			want[i] += n
			parts[next(3)].add(i, n)
		}
		var h Hist
		for k := range parts {
			h.Merge(&parts[k])
		}
		var d decoder
		d.Dec = codec.NewDec(appendHist(nil, &h))
		var back Hist
		d.hist(&back)
		for _, got := range []*Hist{&h, &back} {
			if len(got.b) != len(want) {
				t.Fatalf("round %d: %d buckets, want %d", round, len(got.b), len(want))
			}
			for k, b := range got.b {
				if want[b.i] != b.n || (k > 0 && got.b[k-1].i >= b.i) {
					t.Fatalf("round %d: bucket %d count %d, want %d (or out of order)", round, b.i, b.n, want[b.i])
				}
			}
		}
		// More adds on the merged one land in the right buckets.
		for range 50 {
			i := int16(next(300))
			want[i]++
			h.add(i, 1)
		}
		for _, b := range h.b {
			if want[b.i] != b.n {
				t.Fatalf("round %d after adds: bucket %d count %d, want %d", round, b.i, b.n, want[b.i])
			}
		}
	}
}

// TestRollupsFedLive: a builder running (Run) beside the pipeline, fed
// by the store's listener as the pipeline commits, flushing every few
// milliseconds, and made to miss some commits (a feed lost, as when it
// is behind: it must find the gap and read the log), sums exactly what a
// builder reading the whole log sums.
func TestRollupsFedLive(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RetentionMinute, cfg.RetentionHour = 0, 0
	cfg.FlushInterval = units.Duration(3 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var live *Builder
	var fed, refused int
	done := make(chan error, 1)
	st, _ := collectedWith(t, longConfig(), 500, func(st *store.Store) {
		var err error
		if live, err = New(cfg, st, nil, nil); err != nil {
			t.Fatal(err)
		}
		n := 0
		st.Listen(func(es []store.Entry) {
			if n++; n%7 == 3 {
				refused++
				return
			}
			live.Feed(es)
			fed += len(es)
		})
		go func() { done <- live.Run(ctx) }()
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if fed == 0 || refused == 0 || live.m == nil {
		t.Fatalf("fed %d entries, refused %d feeds: the stream is too short", fed, refused)
	}
	if n := testutil.ToFloat64(live.m.readBack); n == 0 {
		t.Fatal("xrdmon_rollup_read_back_total = 0: the refused feeds' entries were not read back from the log")
	}
	ref := newBuilder(t, &memRollups{Store: st}, cfg)
	if err := ref.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	live = newBuilder(t, st, cfg) // what the running one committed
	sameSeries(t, ref, live, "fed live")
}

// TestRollupsStoppedBeforeStart: a builder stopped before it has even
// restored (collect of a short file, whose input ends first) still sums
// the whole log and commits it, as one that ran would.
func TestRollupsStoppedBeforeStart(t *testing.T) {
	st, _ := collected(t, longConfig())
	cfg := DefaultConfig()
	cfg.RetentionMinute, cfg.RetentionHour = 0, 0
	b, err := New(cfg, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunStopped(t, b) // the rollups stop as a sink does
	ref := newBuilder(t, &memRollups{Store: st}, cfg)
	if err := ref.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	sameSeries(t, ref, newBuilder(t, st, cfg), "stopped before start")
}

// TestRollupsUncommittedFlushDropped: a flush writes its parts in several
// transactions ahead of its commit; a builder that stops between them (a
// crash) leaves parts no state counts, and the next builder drops them and
// sums those entries again: every bucket as an uninterrupted run has it.
func TestRollupsUncommittedFlushDropped(t *testing.T) {
	st, _ := collected(t, longConfig())
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.RetentionMinute, cfg.RetentionHour = 0, 0
	ref, last := reference(t, st, cfg)
	b := newBuilder(t, st, cfg)
	applyUpTo(t, b, st, last/3)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The crash: the next flush's parts written, its commit never made.
	applyUpTo(t, b, st, 2*last/3)
	ps, _ := b.headParts(b.head, b.part, &slab{}, b.watermark)
	if err := st.AddRollupParts(ctx, ps); err != nil {
		t.Fatal(err)
	}
	b = newBuilder(t, st, cfg) // restores: drops the orphans
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	sameSeries(t, ref, b, "after an uncommitted flush")
}

// sameSeries fails unless got has every series of ref, for every spec
// and resolution, over all time.
func sameSeries(t *testing.T, ref, got *Builder, what string) {
	t.Helper()
	sameSeriesFrom(t, ref, got, what, forever[0])
}

// sameSeriesFrom is sameSeries with the minutes compared from minutes on
// (those retention kept).
func sameSeriesFrom(t *testing.T, ref, got *Builder, what string, minutes time.Time) {
	t.Helper()
	ctx := context.Background()
	for _, spec := range ref.Specs() {
		for _, step := range Resolutions {
			q := Query{By: spec.Dims(), From: forever[0], To: forever[1], Step: step}
			if step == time.Minute {
				q.From = minutes
			}
			want, err := ref.Series(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			have, err := got.Series(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffSeries(have, want); d != "" {
				t.Fatalf("%q at %s %s: %s", spec, step, what, d)
			}
		}
	}
}

// reference returns a builder that summed the whole log of st in one go
// (its parts kept in memory), and the log's last sequence number.
func reference(t *testing.T, st *store.Store, cfg Config) (*Builder, int64) {
	t.Helper()
	ctx := context.Background()
	ref := newBuilder(t, &memRollups{Store: st}, cfg)
	if err := ref.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	last, err := st.LastSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ref, last
}

// Merging exact sets is their union, whatever their overlap and sizes,
// up to and past smallUsers (then a sketch).
func TestUsersMergeUnion(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		var u, v Users
		want := map[uint32]bool{}
		na, nb := rng.IntN(900), rng.IntN(900)
		for range na {
			h := uint32(rng.IntN(2500))
			u.Add(h)
			want[h] = true
		}
		for range nb {
			h := uint32(rng.IntN(2500))
			v.Add(h)
			want[h] = true
		}
		u.Merge(&v)
		if len(want) > smallUsers {
			if u.hll == nil {
				t.Fatalf("trial %d: %d users and no sketch", trial, len(want))
			}
			continue
		}
		if u.Count() != int64(len(want)) || !slices.IsSorted(u.small) {
			t.Fatalf("trial %d: %d users (sorted %v), want %d", trial, u.Count(), slices.IsSorted(u.small), len(want))
		}
		for _, h := range u.small {
			if !want[h] {
				t.Fatalf("trial %d: %d is not a user", trial, h)
			}
		}
	}
}

// TestSearchUsers holds searchUsers to slices.BinarySearch: sets short and
// long, hashes present, absent, below and above all of them.
func TestSearchUsers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 200 {
		set := make([]uint32, 0, n)
		for len(set) < n {
			set = append(set, rng.Uint32()%2000)
		}
		slices.Sort(set)
		set = slices.Compact(set)
		for h := uint32(0); h < 2001; h += 1 + uint32(rng.IntN(3)) {
			wi, wf := slices.BinarySearch(set, h)
			if gi, gf := searchUsers(set, h); gi != wi || gf != wf {
				t.Fatalf("set of %d, hash %d: searchUsers = %d, %v; want %d, %v", len(set), h, gi, gf, wi, wf)
			}
		}
	}
	// Hashes spread over 32 bits, as real ones are: the entry guess.
	for n := range 1100 {
		set := make([]uint32, n)
		for i := range set {
			set[i] = rng.Uint32()
		}
		slices.Sort(set)
		set = slices.Compact(set)
		probes := []uint32{0, 1, 1<<32 - 1, 1<<32 - 2}
		for range 50 {
			probes = append(probes, rng.Uint32())
		}
		for _, x := range set[:min(len(set), 50)] {
			probes = append(probes, x, x-1, x+1)
		}
		for _, h := range probes {
			wi, wf := slices.BinarySearch(set, h)
			if gi, gf := searchUsers(set, h); gi != wi || gf != wf {
				t.Fatalf("set of %d, hash %d: searchUsers = %d, %v; want %d, %v", len(set), h, gi, gf, wi, wf)
			}
		}
	}
}

// TestRollupsYield: while the input is busy the builder sums nothing (its
// cursor stays where it was) and, once the input is not, catches up from
// the log to the sums of a builder that read it all; with a short
// max_yield it catches up although the input never stops being busy.
func TestRollupsYield(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxYield time.Duration
		busyEnds bool
	}{
		{"until the input catches up", time.Hour, true},
		{"at most max_yield", 20 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.RetentionMinute, cfg.RetentionHour = 0, 0
			cfg.FlushInterval = units.Duration(3 * time.Millisecond)
			cfg.MaxYield = units.Duration(tc.maxYield)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var busy atomic.Bool
			busy.Store(true)
			reg := prometheus.NewRegistry()
			var live *Builder
			done := make(chan error, 1)
			st, _ := collectedWith(t, longConfig(), 500, func(st *store.Store) {
				var err error
				if live, err = New(cfg, st, nil, reg); err != nil {
					t.Fatal(err)
				}
				live.YieldTo(busy.Load)
				st.Listen(live.Feed)
				go func() { done <- live.Run(ctx) }()
			})
			last, err := st.LastSeq(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cursor := func() int64 {
				live.mu.Lock()
				defer live.mu.Unlock()
				return live.cursor
			}
			if tc.busyEnds {
				if c := cursor(); c != 0 {
					t.Fatalf("the builder summed up to entry %d of %d while the input was busy", c, last)
				}
				busy.Store(false)
			}
			deadline := time.Now().Add(20 * time.Second)
			for cursor() < last {
				if time.Now().After(deadline) {
					t.Fatalf("the builder is at entry %d of %d: it did not catch up", cursor(), last)
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if n := testutil.ToFloat64(live.m.yields); n < 1 {
				t.Fatalf("xrdmon_rollup_yields_total = %v, want at least one pause", n)
			}
			ref, _ := reference(t, st, cfg)
			sameSeries(t, ref, newBuilder(t, st, cfg), tc.name)
		})
	}
}

// TestRollupsPauseKeepsTheFeed: while the rollups pause for a busy input,
// the batches the store feeds them wait in the queue (bounded by
// max_queue_bytes) instead of being dropped and read back from the log;
// a queue too small for the pause is summed, paused or not, past three
// quarters of its bound. Either way none is dropped, and the sums are
// exact.
func TestRollupsPauseKeepsTheFeed(t *testing.T) {
	for _, small := range []bool{false, true} {
		t.Run(fmt.Sprintf("small=%v", small), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.RetentionMinute, cfg.RetentionHour = 0, 0
			cfg.FlushInterval = units.Duration(3 * time.Millisecond)
			if small {
				cfg.MaxQueueBytes = 64 << 10 // ~200 samples
			}
			var busy atomic.Bool
			var commits, pausedAt, fed int
			var cursorAt, cursorEnd int64
			st, live := runPaused(t, cfg, &busy, nil, func(live *Builder, es []store.Entry) {
				cursor := func() int64 {
					live.mu.Lock()
					defer live.mu.Unlock()
					return live.cursor
				}
				switch commits++; commits {
				case 3:
					busy.Store(true)
					time.Sleep(2 * pollInterval) // Run sees it
					pausedAt, cursorAt = commits, cursor()
				case 9:
					cursorEnd = cursor()
					busy.Store(false)
				}
				for chunk := range slices.Chunk(es, 4) { // more batches than the queue had slots when it counted them
					live.Feed(chunk)
					fed++
					// The appender is slower than the summing here:
					// a paused builder must sum a queue past three
					// quarters of its bound for this to go on.
					for deadline := time.Now().Add(5 * time.Second); small && live.queueHigh(); {
						if time.Now().After(deadline) {
							t.Error("a paused builder left its queue past three quarters of its bound")
							return
						}
						time.Sleep(time.Millisecond)
					}
				}
			})
			if commits < 10 || pausedAt == 0 || fed < 100 {
				t.Fatalf("%d commits (%d batches), paused at %d: the stream is too short", commits, fed, pausedAt)
			}
			if n := testutil.ToFloat64(live.m.yields); n < 1 {
				t.Fatalf("xrdmon_rollup_yields_total = %v, want a pause", n)
			}
			if summed := cursorEnd != cursorAt; summed != small {
				t.Fatalf("the builder summed from entry %d to %d while paused; want summing only when the queue is too small", cursorAt, cursorEnd)
			}
			if n := testutil.ToFloat64(live.m.feedDropped); n != 0 {
				t.Fatalf("xrdmon_rollup_feed_dropped_total = %v after a pause, want 0", n)
			}
			if q := live.queued.Load(); q != 0 {
				t.Fatalf("%d bytes still counted in the queue after the stop", q)
			}
			ref, _ := reference(t, st, cfg)
			sameSeries(t, ref, newBuilder(t, st, cfg), "after a pause")
		})
	}
}

// TestRollupsPausedHeadBounded: a builder paused the whole stream, with a
// queue and a head too small for it, sums past three quarters of the
// queue and flushes its head when full, paused or not (before, a paused
// builder never flushed, and its head grew with the pause), and the sums
// are exact.
func TestRollupsPausedHeadBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RetentionMinute, cfg.RetentionHour = 0, 0
	cfg.MaxQueueBytes, cfg.MaxHeadBytes = 64<<10, 96<<10
	var busy atomic.Bool
	busy.Store(true)
	var maxHead int64
	var paused float64 // flushes while paused
	st, _ := runPaused(t, cfg, &busy, func(live *Builder) {
		deadline := time.Now().Add(20 * time.Second)
		for testutil.ToFloat64(live.m.flushes) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		paused = testutil.ToFloat64(live.m.flushes)
		busy.Store(false)
	}, func(live *Builder, es []store.Entry) {
		for chunk := range slices.Chunk(es, 4) { // a batch adds far less than a third of the head
			live.Feed(chunk)
			live.mu.Lock()
			maxHead = max(maxHead, live.headBytes)
			live.mu.Unlock()
		}
	})
	if paused == 0 {
		t.Fatal("no flush while paused: the head grew past its bound")
	}
	// The bound is kept between batches and reads of the log; one read of
	// the log (a batch dropped by this small queue) may pass it by what it
	// holds, a small part of the default 32 MiB head but not of this one:
	// bounded, not within it.
	t.Logf("the head held %d bytes at the most while paused (bound %d)", maxHead, cfg.MaxHeadBytes)
	ref, _ := reference(t, st, cfg)
	sameSeries(t, ref, newBuilder(t, st, cfg), "paused with a small head")
}

// runPaused collects longConfig's stream with a commit every 50 packets
// beside a builder running with cfg, paused while busy holds, to which
// each commit goes through listen; after the stream, end (if
// any) runs, then the builder stops. It returns the store and the builder.
func runPaused(t *testing.T, cfg Config, busy *atomic.Bool, end func(*Builder), listen func(*Builder, []store.Entry)) (*store.Store, *Builder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var live *Builder
	done := make(chan error, 1)
	st, _ := collectedWith(t, longConfig(), 50, func(st *store.Store) {
		var err error
		if live, err = New(cfg, st, nil, prometheus.NewRegistry()); err != nil {
			t.Fatal(err)
		}
		live.YieldTo(busy.Load)
		st.Listen(func(es []store.Entry) { listen(live, es) })
		go func() { done <- live.Run(ctx) }()
	})
	if end != nil {
		end(live)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return st, live
}

// TestFeedQueueBoundedInBytes: the fed queue holds max_queue_bytes of
// samples at the most; a batch that would pass it is dropped and counted,
// and a batch summed gives its bytes back.
func TestFeedQueueBoundedInBytes(t *testing.T) {
	st, recs := storedRecords(t)
	if len(recs) < 40 {
		t.Fatalf("%d records: the stream is too short", len(recs))
	}
	b := newBuilder(t, st, DefaultConfig())
	per := roomOf(b, 10)
	b.cfg.MaxQueueBytes = units.ByteSize(2*per + per/2) // room for 2 batches of 10
	batch := func(i int) []store.Entry { return recs[10*i : 10*i+10] }
	for i := range 3 {
		b.Feed(batch(i))
		if q := b.queued.Load(); q > int64(b.cfg.MaxQueueBytes) {
			t.Fatalf("after batch %d: %d bytes queued, bound %d", i, q, b.cfg.MaxQueueBytes)
		}
	}
	if len(b.feed) != 2 || b.queued.Load() != 2*per {
		t.Fatalf("%d batches (%d bytes) queued, want 2 (%d)", len(b.feed), b.queued.Load(), 2*per)
	}
	if n := testutil.ToFloat64(b.m.feedDropped); n != 1 {
		t.Fatalf("xrdmon_rollup_feed_dropped_total = %v, want 1", n)
	}
	b.spend(<-b.feed) // summed: its room is free again
	b.Feed(batch(3))
	if len(b.feed) != 2 || b.queued.Load() != 2*per {
		t.Fatalf("after one was summed: %d batches (%d bytes) queued, want 2 (%d)", len(b.feed), b.queued.Load(), 2*per)
	}
}

// storedRecords returns a store of longConfig's stream and the records
// among its first 4,096 entries.
func storedRecords(t *testing.T) (*store.Store, []store.Entry) {
	t.Helper()
	st, _ := collected(t, longConfig())
	es, err := st.Read(context.Background(), 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	var recs []store.Entry
	for _, e := range es {
		if e.Record != nil {
			recs = append(recs, e)
		}
	}
	return st, recs
}

// roomOf returns the bytes a fed batch of n entries takes when made for
// them: what Feed counts.
func roomOf(b *Builder, n int) int64 {
	return new(feedBatch).grow(n, len(b.used))
}

// The fed queue counts the room its batches hold: a batch that a large
// append grew, summed and then filled by small appends while the builder
// is behind, would hold far more than its entries (with 1,000 servers at
// 150,000 packets/s, 150 MB in a queue bounded at 16 MiB). Every queued
// batch's room is counted, and the room queued stays within the bound.
func TestFeedQueueCountsRoom(t *testing.T) {
	st, recs := storedRecords(t)
	const large = 400
	if len(recs) < large {
		t.Fatalf("%d records: the stream is too short", len(recs))
	}
	b := newBuilder(t, st, DefaultConfig())
	b.cfg.MaxQueueBytes = units.ByteSize(2 * roomOf(b, large))
	b.Feed(recs[:large])
	b.spend(<-b.feed) // summed: a batch with room for 400 waits to be filled again
	for i := range 100 {
		b.Feed(recs[2*i : 2*i+2])
	}
	var room int64
	for len(b.feed) > 0 {
		fb := <-b.feed
		room += fb.room()
	}
	if q := b.queued.Load(); q != room || room > int64(b.cfg.MaxQueueBytes) {
		t.Fatalf("%d bytes of batches queued, counted %d, bound %d", room, q, b.cfg.MaxQueueBytes)
	}
}

// A builder whose head is flushed every few records, each new head
// filling the chunks of the one flushed before it (slab.recycle), stores
// the same series as one that flushes once: no series of a new head starts
// with what a flushed one held, and no flushed series is changed by a new
// head's. Both with minutes kept sparse (their entries in recycled
// chunks) and with every minute dense (its series in recycled chunks).
func TestRollupsRecycledChunksExact(t *testing.T) {
	ctx := context.Background()
	recycled := 0
	query := func(small bool, rawMax int) ([]Series, int) {
		st, _ := collected(t, longConfig())
		cfg := DefaultConfig()
		cfg.RetentionMinute, cfg.RetentionHour = 0, 0
		if small {
			cfg.MaxHeadBytes = 3 << 10
		}
		b := newBuilder(t, st, cfg)
		b.rawMax = rawMax
		recycled = 0
		for seq := int64(0); ; { // CatchUp, in batches small enough to flush often
			es, err := st.Read(ctx, seq, 8)
			if err != nil {
				t.Fatal(err)
			}
			if len(es) == 0 {
				break
			}
			b.Apply(es)
			seq = es[len(es)-1].Seq
			if b.headFull() {
				if err := b.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if free := &b.slab.free; len(free.aggs) > 0 && rawMax == 0 || len(free.raws) > 0 && len(free.strs) > 0 {
					recycled++
				}
			}
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		var all []Series
		for _, by := range [][]record.Dim{{record.DimUser}, {record.DimSite, record.DimVO}, nil} {
			for _, step := range Resolutions[:2] {
				ss, err := b.Series(ctx, Query{By: by, From: forever[0], To: forever[1], Step: step})
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, ss...)
			}
		}
		return all, int(testutil.ToFloat64(b.m.flushes))
	}
	want, _ := query(false, 0)
	for _, raw := range []int{rawMax, 0} {
		got, flushes := query(true, raw)
		if flushes < 10 || recycled < flushes/2 {
			t.Fatalf("raw %d: %d flushes, %d left chunks to reuse: the head did not fill often enough to test reuse", raw, flushes, recycled)
		}
		if len(got) != len(want) {
			t.Fatalf("raw %d: %d series after %d flushes, %d after one", raw, len(got), flushes, len(want))
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("raw %d: series %v after %d flushes:\n%+v\nafter one:\n%+v", raw, want[i].Keys, flushes, got[i].Total, want[i].Total)
			}
		}
	}
}

// mergeSorted's search for a few users gives the union a pass over both
// gives, whatever the overlap.
func TestMergeSortedFew(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	set := func(n, span int) []uint32 {
		m := make(map[uint32]bool)
		for len(m) < n {
			m[uint32(rng.IntN(span))] = true
		}
		out := make([]uint32, 0, n)
		for h := range m {
			out = append(out, h)
		}
		slices.Sort(out)
		return out
	}
	for range 2000 {
		na := rng.IntN(300)
		nb := 1 + rng.IntN(fewUsers)
		span := 1 + na + nb + rng.IntN(600)
		a, b := set(na, max(span, na)), set(nb, max(span, nb))
		m := make(map[uint32]bool)
		for _, h := range a {
			m[h] = true
		}
		for _, h := range b {
			m[h] = true
		}
		want := make([]uint32, 0, len(m))
		for h := range m {
			want = append(want, h)
		}
		slices.Sort(want)
		got := mergeSorted(slices.Clone(a), b)
		if !slices.Equal(got, want) {
			t.Fatalf("mergeSorted(%v, %v) = %v, want %v", a, b, got, want)
		}
	}
}

// retentionCheck is memRollups that records the parts a flush writes
// into buckets its own commit deletes by retention.
type retentionCheck struct {
	memRollups
	pending []store.RollupPart // written ahead of the next commit
	minutes int                // minute parts written
	wasted  []store.RollupPart // written, then deleted by the same flush
}

func (r *retentionCheck) AddRollupParts(ctx context.Context, ps []store.RollupPart) error {
	r.pending = append(r.pending, ps...)
	return r.memRollups.AddRollupParts(ctx, ps)
}

func (r *retentionCheck) CommitRollup(ctx context.Context, c store.RollupCommit) error {
	for _, p := range slices.Concat(r.pending, c.Add, c.Compacted) {
		if p.Step == 60 {
			r.minutes++
		}
		if before, ok := c.Expire[p.Step]; ok && p.Start < before {
			r.wasted = append(r.wasted, p)
		}
	}
	r.pending = r.pending[:0]
	return r.memRollups.CommitRollup(ctx, c)
}

// A flush does not write the buckets its commit deletes by retention (a
// stream whose time runs fast, a replay or a catch-up, flushes days of
// minutes at once, nearly all past rollup.retention_minute); their sums
// are in the coarser buckets all the same, and the minutes within
// retention are those of a builder that keeps every minute.
func TestExpiredBucketsNotWritten(t *testing.T) {
	ctx := context.Background()
	st, _ := collected(t, longConfig()) // 40 minutes
	cfg := DefaultConfig()
	cfg.RetentionMinute, cfg.RetentionHour = units.Duration(10*time.Minute), 0
	all := cfg
	all.RetentionMinute = 0
	ref := newBuilder(t, &memRollups{Store: st}, all)
	if err := ref.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	rc := &retentionCheck{memRollups: memRollups{Store: st}}
	b := newBuilder(t, rc, cfg)
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rc.wasted) > 0 {
		p := rc.wasted[0]
		t.Fatalf("%d parts written into buckets their flush deleted, e.g. step %d start %d part %d", len(rc.wasted), p.Step, p.Start, p.Part)
	}
	cut := time.Unix(b.expiredBefore(60, b.watermark), 0)
	if rc.minutes == 0 || rc.minutes >= 30 {
		t.Fatalf("%d minute parts written: want some, fewer than the stream's 40 minutes", rc.minutes)
	}
	t.Logf("%d minute parts written, minutes kept from %s", rc.minutes, cut.UTC())
	sameSeriesFrom(t, ref, b, "with retention", cut.Add(time.Minute)) // the first minute kept whole
}

// TestKeptValuesShared: a sparse minute keeps its entries' values without
// copying the strings of their records that are whole (the server, the
// user: shared with the record), but copies the directory, which is part
// of the record's path, so that the head does not keep every path alive.
func TestKeptValuesShared(t *testing.T) {
	b := benchBuilder(t, DefaultConfig())
	t0 := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	recs := benchRecords(2, t0)
	recs[0].Path = "/store/data/Run7/" + strings.Repeat("x", 4000) + ".root"
	b.mu.Lock()
	b.applyRecord(&recs[0])
	b.applyRecord(&recs[1])
	m := b.head.mins[t0.Unix()-30]
	b.mu.Unlock()
	if m == nil || len(m.raw) != 2 || m.series != nil {
		t.Fatalf("minute %+v: want a sparse minute of 2 entries", m)
	}
	for i, d := range b.used {
		v, want := m.raw[0].vals[i], recs[0].Dim(d)
		if v != want {
			t.Errorf("%s: kept %q, want %q", d, v, want)
		}
		if v == "" {
			continue
		}
		shared := unsafe.StringData(v) == unsafe.StringData(want)
		if shared == d.Part() {
			t.Errorf("%s: shared %v, want %v (Part %v)", d, shared, !d.Part(), d.Part())
		}
	}
	i := slices.Index(b.used, record.DimDir)
	if i < 0 {
		t.Fatal("dir is not a default dimension")
	}
	if v := m.raw[0].vals[i]; v != "/store/data/Run7" {
		t.Errorf("dir kept as %q", v)
	}
}

// TestHistIndex holds histIndex to its definition, ceil(4·log2 v): every
// integer up to 2^20, powers of two and their neighbours, the integers
// nearest each quarter-octave bound of every octave, and random values
// of every magnitude a count of bytes or milliseconds can have. A stored
// bucket must not depend on which way it was found.
func TestHistIndex(t *testing.T) {
	check := func(v float64) {
		t.Helper()
		want := int16(0)
		if v > 1 {
			want = histIndexLog(v)
		}
		if got := histIndex(v); got != want {
			t.Fatalf("histIndex(%v) = %d, want %d", v, got, want)
		}
	}
	for v := range 1 << 20 {
		check(float64(v))
	}
	for e := range 63 {
		p := math.Ldexp(1, e)
		for _, v := range []float64{p, math.Nextafter(p, 0), math.Nextafter(p, math.Inf(1)), p - 1, p + 1} {
			check(v)
		}
		for _, b := range quarterOctave {
			x := b * p
			for _, v := range []float64{x, math.Floor(x), math.Ceil(x), math.Nextafter(x, 0), math.Nextafter(x, math.Inf(1))} {
				check(v)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		check(float64(rng.Uint64() >> rng.UintN(64)))
	}
	check(-5)
	check(0.5)
}
