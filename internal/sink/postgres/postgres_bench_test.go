package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/store"
)

// BenchmarkLoad loads batches of new records (COPY to staging, INSERT ...
// ON CONFLICT, COMMIT) into a real database and reports records/s. The
// records are already read from the store: this is the sink's own cost.
//
//	go test ./internal/sink/postgres -run '^$' -bench Load -benchtime 40x
func BenchmarkLoad(b *testing.B) {
	u := testURL(b)
	for _, size := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			schema := sinktest.PostgresSchema(b, u)
			w, err := NewWriter(u, fastOptions(schema), sinktest.Discard())
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			ctx := context.Background()
			next := 0
			mk := func() []store.Entry {
				batch := make([]store.Entry, size)
				for i := range batch {
					r := testRecord(next)
					next++
					batch[i] = store.Entry{Seq: int64(next), Record: &r}
				}
				return batch
			}
			if err := w.Deliver(ctx, mk()); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				batch := mk()
				b.StartTimer()
				start := time.Now()
				if err := w.Deliver(ctx, batch); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(b.N*size)/elapsed.Seconds(), "records/s")
		})
	}
}

// BenchmarkSink measures the whole sink: records appended to a store are
// read back, loaded and the cursor moved, in records/s.
//
//	go test ./internal/sink/postgres -run '^$' -bench Sink -benchtime 200000x
func BenchmarkSink(b *testing.B) {
	u := testURL(b)
	schema := sinktest.PostgresSchema(b, u)
	st := sinktest.OpenStore(b)
	sinktest.Fill(b, st, b.N, testRecord)
	opts := fastOptions(schema)
	s := newSink(b, u, opts, st)
	sinktest.DrainBench(b, st, opts.Name, s)
}
