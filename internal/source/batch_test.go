package source

import (
	"net/netip"
	"testing"
	"time"
)

// A source that checks Full before each packet never grows a batch's
// arena, whatever the datagram sizes: a batch's memory is bounded in bytes.
func TestBatchFullBoundsArena(t *testing.T) {
	pool := NewBatchPool(256, 256*BatchBytesPerPacket)
	sender := netip.MustParseAddrPort("192.0.2.1:1094")
	for _, size := range []int{100, 1500, 16384, MaxDatagram} {
		b := pool.Get()
		arena := cap(b.Buf())
		data := make([]byte, size)
		n := 0
		for !b.Full() {
			b.Append(data, sender, time.Time{})
			n++
		}
		if cap(b.Buf()) != arena {
			t.Errorf("%d-byte datagrams: arena grew from %d to %d bytes", size, arena, cap(b.Buf()))
		}
		if want := min(256, arena/size); n < want-MaxDatagram/size-1 || n > 256 {
			t.Errorf("%d-byte datagrams: %d per batch, want about %d", size, n, want)
		}
		b.Free()
	}
}
