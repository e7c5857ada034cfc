package correlate_test

import (
	"bytes"
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
// drained, as the pipeline does. One op is one datagram. trace-io adds
// every access's I/O on the t-stream (the profile per file), redirectors
// a chain of redirects before each open (with the opens reported, as the
// pipeline's redirect linker needs).
func BenchmarkCorrelateLoadgen(b *testing.B) {
	for _, c := range []struct {
		name string
		mod  func(*loadgen.Config)
	}{
		{"plain", func(*loadgen.Config) {}},
		{"trace-io", func(c *loadgen.Config) { c.Trace = "io"; c.FileSizeMax = 256 << 20 }},
		{"redirectors", func(c *loadgen.Config) { c.Redirectors = 2 }},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := loadgen.DefaultConfig()
			cfg.Servers, cfg.Clients = 20, 2000
			cfg.Duration = 3 * time.Minute
			cfg.ThinkTime = time.Second
			cfg.KeepRecords = false
			c.mod(&cfg)
			benchLoadgen(b, cfg)
		})
	}
}

func benchLoadgen(b *testing.B, cfg loadgen.Config) {
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
		out  correlate.Output
		tick time.Time
	)
	ccfg := correlate.DefaultConfig()
	ccfg.ReportOpens = cfg.Redirectors > 0
	i := len(pkts)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		if i == len(pkts) {
			b.StopTimer()
			s, i, tick = correlate.NewShard(ccfg), 0, time.Time{}
			b.StartTimer()
		}
		p := &pkts[i]
		i++
		s.Handle(p.Data, p.Sender, p.Received)
		if p.Received.Sub(tick) >= time.Second {
			tick = p.Received
			s.Tick(tick)
			clear(out.Records)
			out.Records, out.Events, out.Opens = out.Records[:0], out.Events[:0], out.Opens[:0]
			s.Drain(&out)
			recs = recs[:0]
			for _, c := range out.Records {
				recs = append(recs, c...)
			}
			s.Recycle(out.Records)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(len(pkts)), "packets/pass")
	if st := s.Stats(); st.TotalLost() != 0 || st.TotalRejected() != 0 {
		b.Fatalf("stats: %+v", st)
	}
}

// BenchmarkSnapshotLoadgen measures a checkpoint of a shard in the state
// `xrdmon bench` puts it in at 150,000 packets/s: loadgen's default
// servers and clients, their packets received at that rate (the shard's
// clock, which expires sessions and files, is the arrival's), 1,500,000 of
// them (10 s), then Snapshot as the pipeline takes it every checkpoint:
//
//	go test ./internal/correlate -run '^$' -bench SnapshotLoadgen -benchtime 10x
func BenchmarkSnapshotLoadgen(b *testing.B) {
	cfg := loadgen.DefaultConfig()
	cfg.Count, cfg.Duration, cfg.KeepRecords = 1_500_000, 0, false
	mem, _, err := loadgen.InMemory(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	s := correlate.NewShard(correlate.DefaultConfig())
	var out correlate.Output
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var tick time.Time
	for i := range mem.Packets {
		p := &mem.Packets[i]
		at := t0.Add(time.Duration(i) * time.Second / 150_000)
		s.Handle(p.Data, p.Sender, at)
		if at.Sub(tick) >= time.Second {
			tick = at
			s.Tick(at)
			out.Records, out.Events, out.Opens = out.Records[:0], out.Events[:0], out.Opens[:0]
			s.Drain(&out)
			s.Recycle(out.Records)
		}
	}
	var buf bytes.Buffer
	if err := s.Snapshot(&buf); err != nil { // warm the scratch buffers
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		buf.Reset()
		if err := s.Snapshot(&buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes")
	b.ReportMetric(float64(s.Stats().Sessions), "sessions")
}
