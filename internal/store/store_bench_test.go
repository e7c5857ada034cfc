package store

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

// BenchmarkAppend appends batches of 1000 new records (one transaction and
// one commit each) and reports records/s.
//
//	go test ./internal/store -run '^$' -bench Append -benchtime 200x
func BenchmarkAppend(b *testing.B) {
	for _, sync := range []string{SyncFull, SyncNormal} {
		b.Run("sync="+sync, func(b *testing.B) {
			benchAppend(b, func(o *Options) { o.Synchronous = sync })
		})
	}
}

func benchAppend(b *testing.B, mod func(*Options)) {
	const batch = 1000
	s, _ := openTest(b, mod)
	ctx := context.Background()
	// Pre-build the batches so the benchmark measures the store only.
	batches := make([][]record.Record, 16)
	for i := range batches {
		batches[i] = testRecords(i*batch, batch)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	n := 0
	for b.Loop() {
		recs := batches[n%len(batches)]
		// Fresh ids each round so nothing is a duplicate.
		for j := range recs {
			recs[j].RecordID = recordIDFor(n*batch + j)
		}
		if err := s.Append(ctx, recs, nil); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(n*batch)/b.Elapsed().Seconds(), "records/s")
	// On a shared machine wall time says little; CPU time used by this
	// process (all threads) gives the throughput one free core would reach.
	b.ReportMetric(float64(n*batch)/(cpuTime()-cpu0).Seconds(), "records/cpu-s")
}

// BenchmarkReadBehind reads a log of 200 blocks (a busy collector's
// commits, 819 entries each) from its start to its end in reads of 4,096
// entries, as a rollup builder or a sink catching up does, and reports
// the CPU per entry read.
//
//	go test ./internal/store -run '^$' -bench ReadBehind
func BenchmarkReadBehind(b *testing.B) {
	s, _ := openTest(b, nil)
	ctx := context.Background()
	const blocks, per = 200, maxBlockEntries / 5
	for i := range blocks {
		if err := s.Append(ctx, testRecords(i*per, per), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	n := 0
	for b.Loop() {
		var after int64
		for {
			got, err := s.Read(ctx, after, 4096)
			if err != nil {
				b.Fatal(err)
			}
			if len(got) == 0 {
				break
			}
			after = got[len(got)-1].Seq
			n += len(got)
		}
	}
	if n == 0 || n%(blocks*per) != 0 {
		b.Fatalf("read %d entries, not whole logs of %d", n, blocks*per)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(n), "cpu-ns/entry")
}

// BenchmarkAppendNewNames appends batches of 1000 records whose users and
// directories are all new (as on a collector's first hour, or a busy
// site's new datasets): each record brings two names to the dictionary.
//
//	go test ./internal/store -run '^$' -bench AppendNewNames -benchtime 200x
func BenchmarkAppendNewNames(b *testing.B) {
	const batch = 1000
	s, _ := openTest(b, nil)
	ctx := context.Background()
	recs := testRecords(0, batch)
	b.ReportAllocs()
	cpu0 := cpuTime()
	n := 0
	for b.Loop() {
		for j := range recs {
			k := n*batch + j
			recs[j].RecordID = recordIDFor(k)
			recs[j].User = fmt.Sprintf("user%d", k)
			recs[j].Path = fmt.Sprintf("/store/data/Run%d/f.root", k)
		}
		if err := s.Append(ctx, recs, nil); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(n*batch)/(cpuTime()-cpu0).Seconds(), "records/cpu-s")
}

// cpuTime returns the user+system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func recordIDFor(i int) string {
	const hex = "0123456789abcdef"
	var id [32]byte
	x := uint64(i)*0x9e3779b97f4a7c15 + 1
	y := uint64(i) ^ 0x5bd1e995
	for k := range 16 {
		id[k] = hex[(x>>(4*k))&0xf]
		id[16+k] = hex[(y>>(4*k))&0xf]
	}
	return string(id[:])
}

// BenchmarkAppendRealistic appends batches like the pipeline's (one Append
// per 200 ms commit: 18,000 records at 90,000 records/s) with realistic
// data: End times move forward, ids are real SHA-256 record ids, 60
// servers at 12 sites, and, pessimistically, users and directories drawn
// uniformly from 2000 and 1200 (a batch of 5000 touches ~1800 users and
// ~1200 directories, each a separate page of its index). Paths are all
// distinct. The store starts with 100,000 records. It reports records/s
// (wall) and records per CPU second spent in Append (the fairer number on
// a shared machine).
//
//	go test ./internal/store -run '^$' -bench AppendRealistic -benchtime 40x
func BenchmarkAppendRealistic(b *testing.B) {
	for _, size := range []int{1000, 5000, 18000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			benchAppendRealistic(b, size, 100_000)
		})
	}
}

func benchAppendRealistic(b *testing.B, batch, prefill int) {
	s, _ := openTest(b, nil)
	ctx := context.Background()
	next := 0
	gen := func(recs []record.Record) {
		for j := range recs {
			recs[j] = realisticRecord(next)
			next++
		}
	}
	recs := make([]record.Record, batch)
	for next < prefill {
		gen(recs)
		if err := s.Append(ctx, recs, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.PostNow(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		gen(recs)
		c0 := cpuTime()
		b.StartTimer()
		if err := s.Append(ctx, recs, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime() - c0
		b.StartTimer()
		n += batch
	}
	// The posting pass of the blocks written (Append runs it every
	// postInterval, which a short run may not reach): counted too.
	c0 := cpuTime()
	if err := s.PostNow(ctx); err != nil {
		b.Fatal(err)
	}
	cpu += cpuTime() - c0
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(n)/cpu.Seconds(), "records/cpu-s")
}

// realisticRecord returns record number i of a stream of 90,000 records/s.
func realisticRecord(i int) record.Record {
	h := uint64(i)*0x9e3779b97f4a7c15 ^ 0xdeadbeefcafef00d
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	srv := int(h % 60)
	end := t0.Add(time.Duration(i) * 11 * time.Microsecond)
	start := end.Add(-time.Duration(h>>8%3600) * time.Second)
	r := record.Record{
		Start:      start,
		End:        end,
		Received:   end.Add(time.Second),
		ServerIP:   fmt.Sprintf("192.0.2.%d", srv),
		ServerHost: fmt.Sprintf("xrootd%02d.site%d.example.org", srv, srv%12),
		ServerID:   uint64(0xabcdef000000 + srv),
		ServerStod: 1767225600,
		Site:       fmt.Sprintf("T2_XX_Site%d", srv%12),
		Program:    "xrootd",
		Version:    "v5.8.4",
		Protocol:   "xroot",
		User:       fmt.Sprintf("user%d", h>>16%2000),
		UserDictID: uint32(h),
		ClientHost: "[::ffff:198.51.100.7]",
		ClientName: "worker-17.example.edu",
		DN:         "/DC=org/DC=example/OU=People/CN=Some User 12345",
		VO:         "cms",
		AppInfo:    "crab:250301_120000:someuser_task",
		FileID:     uint32(i),
		Path:       fmt.Sprintf("/store/mc/Run3Summer23/Dataset%d/AODSIM/v%d/%016x.root", h>>24%300, h>>40%4, h),
		FileSize:   2_000_000_000 + int64(h%1000000),
		ReadBytes:  int64(h % 1e9),
		ReadvBytes: 12345,
		HasOps:     true,
		ReadOps:    42,
		ReadvOps:   7,
		ReadvSegs:  120,
		ReadMin:    1024,
		ReadMax:    1 << 20,
	}
	r.RecordID = record.RecordID(r.ServerIP, r.ServerStod, r.ServerID, r.FileID, r.Start, r.End)
	return r
}

// BenchmarkAppendLargeStore measures how the cost of Append grows with the
// size of the store: batches of 5000 realistic records (as in
// BenchmarkAppendRealistic) appended to a store that already holds 0, 1 M
// and 3 M of them. It reports CPU microseconds per record (process CPU
// time, all threads, during Append only), records per CPU second and
// records/s (wall).
//
// The preloaded databases are built once per run by Append in batches of
// 50,000 with synchronous=NORMAL. Each sub-benchmark works on its own
// copy.
//
//	go test ./internal/store -run '^$' -bench AppendLargeStore -benchtime 40x -timeout 30m
func BenchmarkAppendLargeStore(b *testing.B) {
	dir := b.TempDir()
	sizes := []int{0, 1_000_000, 3_000_000}
	templates := map[int]string{}
	built := false
	build := func() {
		if built {
			return
		}
		built = true
		t := time.Now()
		c0 := cpuTime()
		preloadTemplates(b, dir, sizes[1:], templates)
		b.Logf("preloaded %d records in %v (%v CPU)", sizes[len(sizes)-1], time.Since(t).Round(time.Second), (cpuTime() - c0).Round(time.Second))
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("records=%dk", size/1000), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "store.db")
			if size > 0 {
				build()
				if err := copyFile(templates[size], path); err != nil {
					b.Fatal(err)
				}
			}
			benchAppendOn(b, path, size, 5000)
		})
	}
}

// benchAppendOn opens the store at path, holding the first next realistic
// records, and times Appends of batch more.
func benchAppendOn(b *testing.B, path string, next, batch int) {
	o := DefaultOptions()
	o.Path = path
	o.Retention = 0
	o.MaxBytes = 0
	s, err := Open(o, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	recs := make([]record.Record, batch)
	gen := func() {
		for j := range recs {
			recs[j] = realisticRecord(next)
			next++
		}
	}
	// Warm the page cache as a long-running writer would have it.
	for range 5 {
		gen()
		if err := s.Append(ctx, recs, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.PostNow(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		gen()
		c0 := cpuTime()
		b.StartTimer()
		if err := s.Append(ctx, recs, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime() - c0
		b.StartTimer()
		n += batch
	}
	// The posting pass of the blocks written, as in benchAppendRealistic.
	c0 := cpuTime()
	if err := s.PostNow(ctx); err != nil {
		b.Fatal(err)
	}
	cpu += cpuTime() - c0
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(n)/cpu.Seconds(), "records/cpu-s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/record")
}

// preloadTemplates writes databases holding the first sizes[i] realistic
// records (sizes ascending) into dir and records their paths in out.
func preloadTemplates(b *testing.B, dir string, sizes []int, out map[int]string) {
	o := DefaultOptions()
	o.Path = filepath.Join(dir, "preload.db")
	o.Retention = 0
	o.MaxBytes = 0
	o.Synchronous = SyncNormal
	s, err := Open(o, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	exec := func(q string) {
		if _, err := s.wc.ExecContext(ctx, q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	recs := make([]record.Record, 50_000)
	next := 0
	for _, size := range sizes {
		for next < size {
			n := min(len(recs), size-next)
			for j := range n {
				recs[j] = realisticRecord(next + j)
			}
			if err := s.Append(ctx, recs[:n], nil); err != nil {
				b.Fatal(err)
			}
			next += n
		}
		exec("PRAGMA wal_checkpoint(TRUNCATE)")
		out[size] = filepath.Join(dir, fmt.Sprintf("preload-%d.db", size))
		if err := copyFile(o.Path, out[size]); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if err := os.Remove(o.Path); err != nil {
		b.Fatal(err)
	}
}

// copyFile copies the database file src (checkpointed: no WAL) to dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	// Written back now, so that the benchmark's first checkpoint fsync
	// does not flush gigabytes of the copy (counted as its CPU time).
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
