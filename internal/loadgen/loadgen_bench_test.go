package loadgen

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// BenchmarkUDP measures the packets/s offered to a local UDP socket
// (nothing reads it; the kernel drops what overflows its buffer).
//
//	go test ./internal/loadgen -run '^$' -bench 'UDP|Generate' -benchtime 2000000x
func BenchmarkUDP(b *testing.B) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	benchRun(b, func() Output {
		out, err := NewUDP(ln.LocalAddr().String())
		if err != nil {
			b.Fatal(err)
		}
		return out
	})
}

// BenchmarkGenerate measures the generator alone.
func BenchmarkGenerate(b *testing.B) {
	benchRun(b, func() Output { return &Discard{} })
}

// benchRun generates b.N packets (20 servers with 200 clients each) into
// the output and reports packets/s.
func benchRun(b *testing.B, mk func() Output) {
	cfg := DefaultConfig()
	cfg.Servers, cfg.Clients = 20, 200
	cfg.Duration, cfg.Count = 0, int64(b.N)
	cfg.KeepRecords = false
	g, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	out := mk()
	defer out.Close()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	truth, err := g.Run(context.Background(), out)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		b.Fatal(err)
	}
	b.ReportMetric(float64(truth.Emitted)/time.Since(start).Seconds(), "packets/s")
	b.ReportMetric(float64(truth.Bytes)/float64(max(truth.Generated, 1)), "bytes/packet")
}
