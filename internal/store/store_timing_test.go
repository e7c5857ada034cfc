package store

import (
	"context"
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
