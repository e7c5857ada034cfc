package amqp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/store"
)

// BenchmarkPublish publishes batches of 1000 records (GRACC, plus WLCG for
// a third of them) with persistent delivery and waits for all confirms, to
// a real broker, and reports records/s. The records are already read from
// the store: this is the sink's own cost. Messages go to exchanges without
// queues (the broker confirms them at once after routing).
//
//	go test ./internal/sink/amqp -run '^$' -bench Publish -benchtime 100x
func BenchmarkPublish(b *testing.B) {
	u := testURL(b)
	for _, perMsg := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("per_message=%d", perMsg), func(b *testing.B) {
			ex := testExchanges(b, u)
			ex.Cache, ex.TPC, ex.Events = "", "", ""
			p := &publisher{cfg: config.AMQPOutput{URL: u, Exchanges: ex, RecordsPerMessage: perMsg}, opts: fastOptions(), log: discard(), perMsg: perMsg}
			p.opts.fill()
			defer p.close()
			batch := make([]store.Entry, 1000)
			for i := range batch {
				r := testRecord(i)
				batch[i] = store.Entry{Seq: int64(i + 1), Record: &r}
			}
			ctx := context.Background()
			if err := p.Deliver(ctx, batch); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for b.Loop() {
				if err := p.Deliver(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(batch))/time.Since(start).Seconds(), "records/s")
		})
	}
}

// BenchmarkSink measures the whole sink: records appended to a store are
// read back, published and confirmed and the cursor moved, in records/s.
//
//	go test ./internal/sink/amqp -run '^$' -bench Sink -benchtime 200000x
func BenchmarkSink(b *testing.B) {
	u := testURL(b)
	for _, perMsg := range []int{1, 100} {
		b.Run(fmt.Sprintf("per_message=%d", perMsg), func(b *testing.B) {
			ex := testExchanges(b, u)
			ex.Cache, ex.TPC, ex.Events = "", "", ""
			st := openStore(b)
			ctx := context.Background()
			for i := 0; i < b.N; i += 1000 {
				if err := st.Append(ctx, testRecords(i, min(1000, b.N-i)), nil); err != nil {
					b.Fatal(err)
				}
			}
			opts := fastOptions()
			s, err := NewWithOptions(config.AMQPOutput{URL: u, Exchanges: ex, RecordsPerMessage: perMsg}, opts, st, discard(), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			stop := runSink(b, s)
			last := lastSeq(b, st)
			for cursor(b, st, opts.Name) < last {
				time.Sleep(5 * time.Millisecond)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
			b.StopTimer()
			stop()
		})
	}
}
