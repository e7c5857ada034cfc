//go:build linux

package udp

import (
	"context"
	"net"
	"testing"
)

// BenchmarkReadBatch measures the reader alone: per round, 20,000 datagrams
// of 200 bytes are queued in the socket with the timer stopped, then read
// with recvmmsg (64 per call), copied into pooled batches and freed.
//
//	go test -run XXX -bench ReadBatch -benchtime 400000x ./internal/source/udp/
func BenchmarkReadBatch(b *testing.B) {
	u, err := New(Options{Addr: "127.0.0.1:0", Readers: 1}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer u.Close()
	r, err := newReader(u, u.conns[0])
	if err != nil {
		b.Fatal(err)
	}
	c := dial(b, "127.0.0.1", u.LocalAddr())
	msg := make([]byte, 200)
	ctx := context.Background()
	const round = 20000
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(round, b.N-done)
		b.StopTimer()
		sendN(b, c, msg, n)
		b.StartTimer()
		for got := 0; got < n; {
			bt, err := r.readBatch(ctx)
			if err != nil || bt == nil {
				b.Fatal(err)
			}
			got += bt.Len()
			bt.Free()
		}
		done += n
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "packets/s")
}

func sendN(b *testing.B, c *net.UDPConn, msg []byte, n int) {
	for range n {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
	}
}
