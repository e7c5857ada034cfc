package rollup

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// BenchmarkRollupMinute measures the write path of the rollups the way a
// collector drives it: every active series is updated once a minute (one
// record per user, each user its own series), then the head is flushed to
// a real store and the finished minute compacted. One op is one minute;
// ns/series is the cost per active series and minute, which must stay flat
// from a thousand series to a million (RRD files grow with the series:
// one seek per series and update).
func BenchmarkRollupMinute(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("series=%d", n), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.MaxHeadBytes = 1 << 40
			bl := benchBuilder(b, cfg)
			recs := make([]record.Record, n)
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := range recs {
				recs[i] = record.Record{
					RecordID: fmt.Sprint(i), ServerIP: fmt.Sprintf("10.0.%d.%d", i%16/256, i%16), ServerID: uint64(i % 16),
					Site: fmt.Sprintf("T2_SITE_%d", i%40), VO: fmt.Sprintf("vo%d", i%8), User: fmt.Sprintf("user%07d", i),
					ClientHost: fmt.Sprintf("wn%d.site%d.example.org", i%500, i%40), Protocol: "xroot", AppName: "cmsRun",
					Path: fmt.Sprintf("/store/data/Run%d/f%d.root", i%20, i), FileID: uint32(i),
					ReadBytes: int64(i%1000+1) << 20, WriteBytes: int64(i % 3),
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for m := 0; m < b.N; m++ {
				at := t0.Add(time.Duration(m) * time.Minute)
				for i := range recs {
					r := &recs[i]
					r.Start, r.End = at.Add(-time.Second), at.Add(time.Second)
					bl.mu.Lock()
					bl.applyRecord(r)
					bl.mu.Unlock()
				}
				if err := bl.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/series")
			b.ReportMetric(100*b.Elapsed().Seconds()/float64(b.N)/60, "%core@1/min")
		})
	}
}

// benchRecords returns n records of a mixed population: 16 servers, 40
// sites, 8 VOs, 500 users, 300 client hosts, 20 directories, two
// protocols, some partial.
func benchRecords(n int, at time.Time) []record.Record {
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{
			RecordID: fmt.Sprint(i), ServerIP: fmt.Sprintf("10.0.0.%d", i%16), ServerHost: fmt.Sprintf("xrd%d.site%d.example.org", i%16, i%40),
			ServerID: uint64(i % 16), ServerStod: 1_700_000_000,
			Site: fmt.Sprintf("T2_SITE_%d", i%40), VO: fmt.Sprintf("vo%d", i%8), User: fmt.Sprintf("user%04d", i%500),
			ClientHost: fmt.Sprintf("10.1.%d.%d", i%300/256, i%300), ClientName: fmt.Sprintf("wn%d.site%d.example.org", i%300, i%40),
			Protocol: []string{"xroot", "https"}[i%2], AppName: "cmsRun",
			Path: fmt.Sprintf("/store/data/Run%d/f%d.root", i%20, i), FileID: uint32(i),
			Start: at.Add(-time.Duration(i%3000) * time.Second), End: at,
			ReadBytes: int64(i%1000+1) << 20, WriteBytes: int64(i % 3),
		}
		if i%17 == 0 {
			recs[i].Reason = record.Reasons[i%len(record.Reasons)]
		}
	}
	return recs
}

// BenchmarkRollupRecord measures what one record costs the rollups with
// the default dimensions (the total and ten more series per record):
// the series keys, the head's lookups and the sums, in steady state (the
// series of the minute exist). The budget is 1 µs and no allocation per
// record (TestRollupRecordAllocs holds the second).
func BenchmarkRollupRecord(b *testing.B) {
	bl, err := New(DefaultConfig(), nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	recs := benchRecords(4096, time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC))
	for i := range recs { // the minute's series exist: steady state
		bl.applyRecord(&recs[i])
		bl.open = make(map[record.AccessKey]openAccess)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testenv.ProcessCPU()
	for i := range b.N {
		if i%len(recs) == 0 {
			clear(bl.open) // the same records again: not duplicates of themselves
		}
		bl.applyRecord(&recs[i%len(recs)])
	}
	b.ReportMetric(float64((testenv.ProcessCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/record")
}

// BenchmarkRollupRecordNewSeries is BenchmarkRollupRecord on a stream
// whose time runs fast (as a loadgen benchmark's does: hours of data a
// second): a new minute every 64 records, so that most records make new
// series. allocs/op is per record (the slab's chunks, amortized).
func BenchmarkRollupRecordNewSeries(b *testing.B) {
	bl, err := New(DefaultConfig(), nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	recs := benchRecords(4096, t0)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testenv.ProcessCPU()
	for i := range b.N {
		r := &recs[i%len(recs)]
		r.End = t0.Add(time.Duration(i/64) * time.Minute)
		if i%100_000 == 0 { // a flush: the head starts again
			bl.head, bl.slab = newHead(), slab{}
			bl.forget()
			clear(bl.open)
		}
		bl.applyRecord(r)
	}
	b.ReportMetric(float64((testenv.ProcessCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/record")
}

// BenchmarkRollupFlushInterval measures what the flush interval costs: a
// minute of 60,000 records (benchRecords' population) summed and flushed
// once, twice or six times (a flush interval of 60, 30 or 10 s). Every
// flush encodes and writes each series it holds again, so fewer flushes
// cost less; the default (30 s) keeps PostgreSQL's copy of the rollups
// close behind (docs/postgres.md).
func BenchmarkRollupFlushInterval(b *testing.B) {
	for _, per := range []int{1, 2, 6} {
		b.Run(fmt.Sprintf("flushes_per_min=%d", per), func(b *testing.B) {
			bl := benchBuilder(b, DefaultConfig())
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			recs := benchRecords(60000, t0)
			ctx := context.Background()
			cpu := testenv.ProcessCPU()
			b.ResetTimer()
			for m := 0; m < b.N; m++ {
				for i := range recs {
					r := &recs[i]
					r.End = t0.Add(time.Duration(m)*time.Minute + time.Duration(i)*time.Minute/time.Duration(len(recs)))
					r.Start = r.End.Add(-time.Second)
					bl.mu.Lock()
					bl.applyRecord(r)
					bl.mu.Unlock()
					if (i+1)%(len(recs)/per) == 0 {
						if err := bl.Flush(ctx); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportMetric(float64((testenv.ProcessCPU()-cpu).Milliseconds())/float64(b.N), "cpu-ms/minute")
		})
	}
}

// benchBuilder returns a builder of cfg on a real store of its own.
func benchBuilder(b testing.TB, cfg Config) *Builder {
	b.Helper()
	o := store.DefaultOptions()
	o.Path = filepath.Join(b.TempDir(), "xrdmon.db")
	o.Retention = 0
	st, err := store.Open(o, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	bl, err := New(cfg, st, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	return bl
}

// BenchmarkRollupFastClock is the whole of the rollups' work on a stream
// whose time runs fast, as `xrdmon bench`'s does at 150,000 packets/s
// (about 32 records a simulated minute, 1,800 minutes a second): each
// record summed, and the head flushed to a real store whenever it is full
// (minutes encoded, hours and days merged, parts written and compacted,
// old buckets expired). cpu-ns/record is all of it, per record; a
// regression here is what `xrdmon bench` shows as the rollups' stage.
func BenchmarkRollupFastClock(b *testing.B) {
	bl := benchBuilder(b, DefaultConfig())
	t0 := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	recs := benchRecords(4096, t0)
	ctx := context.Background()
	flushes := 0
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testenv.ProcessCPU()
	for i := range b.N {
		r := &recs[i%len(recs)]
		r.End = t0.Add(time.Duration(i/32) * time.Minute)
		r.Start = r.End.Add(-time.Duration(i%300) * time.Second)
		r.RecordID = strconv.Itoa(i)
		bl.mu.Lock()
		bl.applyRecord(r)
		full := bl.headBytes >= bl.flushAt()
		bl.mu.Unlock()
		if full {
			if err := bl.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			flushes++
		}
	}
	if err := bl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64((testenv.ProcessCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/record")
	b.ReportMetric(float64(b.N)/float64(flushes+1), "records/flush")
}

// BenchmarkRollupCatchUp is the rollups catching up from the store's log,
// as they do after yielding to a busy input (`xrdmon bench` at 150,000
// packets/s): records on the fast clock of BenchmarkRollupFastClock are
// appended to a real store, then a new builder reads, decodes, sums and
// flushes them all (CatchUp). cpu-ns/record is all of that, per record.
func BenchmarkRollupCatchUp(b *testing.B) {
	const n = 100_000
	t0 := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	proto := benchRecords(4096, t0)
	ctx := context.Background()
	var cpu time.Duration
	for range b.N {
		b.StopTimer()
		bl := benchBuilder(b, DefaultConfig())
		st := bl.st.(*store.Store)
		chunk := make([]record.Record, 0, 1024)
		for i := range n {
			r := proto[i%len(proto)]
			r.End = t0.Add(time.Duration(i/32) * time.Minute)
			r.Start = r.End.Add(-time.Duration(i%300) * time.Second)
			r.RecordID = strconv.Itoa(i)
			chunk = append(chunk, r)
			if len(chunk) == cap(chunk) || i == n-1 {
				if err := st.Append(ctx, chunk, nil); err != nil {
					b.Fatal(err)
				}
				chunk = chunk[:0]
			}
		}
		b.StartTimer()
		c0 := testenv.ProcessCPU()
		if err := bl.CatchUp(ctx); err != nil {
			b.Fatal(err)
		}
		cpu += testenv.ProcessCPU() - c0
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/record")
}
