package correlate_test

import (
	"context"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/record"
)

// BenchmarkCorrelateLoadgen measures Handle on loadgen's simulated
// servers and clients (logins with tokens, info and UEAC records, opens
// with LFN, xfr and closes, cache g-stream events), fed in order to one
// shard with a Tick every simulated second and the records and raw events
// drained, as the pipeline does. One op is one datagram.
func BenchmarkCorrelateLoadgen(b *testing.B) {
	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients = 20, 2000
	cfg.Duration = 3 * time.Minute
	cfg.ThinkTime = time.Second
	cfg.KeepRecords = false
	g, err := loadgen.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var mem loadgen.Memory
	if _, err := g.Run(context.Background(), &mem); err != nil {
		b.Fatal(err)
	}
	pkts := mem.Packets
	var (
		s    *correlate.Shard
		recs []record.Record
		evs  []record.Event
		tick time.Time
	)
	i := len(pkts)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		if i == len(pkts) {
			b.StopTimer()
			s, i, tick = correlate.NewShard(correlate.DefaultConfig()), 0, time.Time{}
			b.StartTimer()
		}
		p := &pkts[i]
		i++
		s.Handle(p.Data, p.Sender, p.Received)
		if p.Received.Sub(tick) >= time.Second {
			tick = p.Received
			s.Tick(tick)
			recs = s.TakeRecords(recs[:0])
			evs = s.TakeRawEvents(evs[:0])
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(len(pkts)), "packets/pass")
	if st := s.Stats(); st.TotalLost() != 0 || st.TotalRejected() != 0 {
		b.Fatalf("stats: %+v", st)
	}
}
