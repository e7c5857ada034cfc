package amqp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/sink/busmsg"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/store"
)

// BenchmarkPublish publishes batches of 1000 records (GRACC, plus WLCG for
// a third of them) with persistent delivery, with in_flight batches'
// confirms outstanding at once (as the deliver loop does with
// Options.InFlight), to a real broker, and reports records/s. The records are already read from
// the store: this is the sink's own cost. Messages go to exchanges without
// queues (the broker confirms them at once after routing).
//
//	go test ./internal/sink/amqp -run '^$' -bench Publish -benchtime 100x
func BenchmarkPublish(b *testing.B) {
	u := testURL(b)
	for _, tc := range []struct{ perMsg, inFlight int }{{1, 1}, {1, 3}, {10, 1}, {10, 3}, {100, 3}} {
		b.Run(fmt.Sprintf("per_message=%d/in_flight=%d", tc.perMsg, tc.inFlight), func(b *testing.B) {
			ex := testExchanges(b, u)
			ex.Cache, ex.TPC, ex.Events = "", "", ""
			opts := fastOptions()
			opts.fill()
			p, err := newPublisher(Config{Config: amqpconn.Config{URL: u}, Exchanges: ex, Format: busmsg.Format{RecordsPerMessage: tc.perMsg}}, opts, sinktest.Discard())
			if err != nil {
				b.Fatal(err)
			}
			defer p.close()
			batches := make([][]store.Entry, tc.inFlight)
			for j := range batches {
				batches[j] = make([]store.Entry, 1000)
				for i := range batches[j] {
					r := testRecord(i)
					batches[j][i] = store.Entry{Seq: int64(i + 1), Record: &r}
				}
			}
			ctx := context.Background()
			if err := p.Deliver(ctx, batches[0]); err != nil {
				b.Fatal(err)
			}
			var waits []func(context.Context) error
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			n := 0
			for b.Loop() {
				if len(waits) == tc.inFlight {
					if err := waits[0](ctx); err != nil {
						b.Fatal(err)
					}
					waits = waits[1:]
				}
				w, err := p.Send(ctx, batches[n%tc.inFlight])
				if err != nil {
					b.Fatal(err)
				}
				waits = append(waits, w)
				n++
			}
			for _, w := range waits {
				if err := w(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*1000)/time.Since(start).Seconds(), "records/s")
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
			st := sinktest.OpenStore(b)
			sinktest.Fill(b, st, b.N, testRecord)
			opts := fastOptions()
			s, err := NewWithOptions(Config{Config: amqpconn.Config{URL: u}, Exchanges: ex, Format: busmsg.Format{RecordsPerMessage: perMsg}}, opts, st, sinktest.Discard(), nil)
			if err != nil {
				b.Fatal(err)
			}
			sinktest.DrainBench(b, st, opts.Name, s)
		})
	}
}
