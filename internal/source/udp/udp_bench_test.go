package udp

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xrdmon/xrdmon/internal/source"
)

// BenchmarkReceive measures the reader loop over loopback: b.N datagrams of
// 200 bytes sent by 2 goroutines (sendmmsg is not used: each write is one
// syscall, so the senders cost more CPU than the receiver) and received. It
// reports received packets/s and the share lost in the kernel.
//
//	go test -run XXX -bench Receive -benchtime 200000x ./internal/source/udp/
func BenchmarkReceive(b *testing.B) {
	for _, bc := range []struct {
		readers int
		reuse   bool
	}{{1, false}, {2, false}, {2, true}} {
		b.Run(fmt.Sprintf("readers=%d/reuseport=%v", bc.readers, bc.reuse), func(b *testing.B) {
			benchReceive(b, bc.readers, bc.reuse)
		})
	}
}

func benchReceive(b *testing.B, readers int, reuse bool) {
	u, err := New(Options{Addr: "127.0.0.1:0", Readers: readers, ReusePort: reuse}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	out := make(chan *source.Batch, 256)
	ctx, cancel := context.WithCancel(context.Background())
	var received int
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for bt := range out {
			received += len(bt.Packets)
			bt.Free()
		}
	}()
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx, out) }()

	const senders = 2
	conns := make([]*net.UDPConn, senders)
	for i := range conns {
		conns[i] = dial(b, "127.0.0.1", u.LocalAddr())
	}
	msg := make([]byte, 200)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, c := range conns {
		n := b.N / senders
		if i == 0 {
			n += b.N % senders
		}
		wg.Go(func() {
			for range n {
				c.Write(msg)
			}
		})
	}
	wg.Wait()
	// Wait until the readers have drained the socket.
	for {
		last := testutil.ToFloat64(u.packets)
		time.Sleep(20 * time.Millisecond)
		if testutil.ToFloat64(u.packets) == last {
			break
		}
	}
	b.StopTimer()
	got := testutil.ToFloat64(u.packets)
	drops, _ := u.KernelDrops()
	cancel()
	<-done
	close(out)
	<-consumed
	b.ReportMetric(got/b.Elapsed().Seconds(), "packets/s")
	b.ReportMetric(float64(drops)/float64(b.N), "dropped/op")
}
