package source

import (
	"net/netip"
	"sync"
	"time"
)

// BatchPool recycles batches whose datagrams are copied compactly into one
// byte arena per batch, so a batch holds the bytes it carries rather than a
// receive buffer per packet. A pooled batch's Free puts it back. Safe for
// concurrent use.
type BatchPool struct {
	pool     sync.Pool
	packets  int
	arenaCap int
}

// BatchBytesPerPacket is the arena room per packet that file and bus
// sources give their batches: their messages carry whole monitoring
// buffers, not 1,500-byte datagrams. Most are a few hundred bytes and
// some 16 KiB f-stream packets, and a batch is full when less than a
// largest datagram is left (Full), so 1 KiB a packet (256 KiB for 256
// packets) fills a batch either way. A larger arena only costs: 4 KiB a
// packet made 1 MiB arenas, each new one zeroed and faulted in page by
// page, and replay of the OSG benchmark's capture spent about 10 % more CPU
// (BENCHMARKS.md, eighteenth check).
const BatchBytesPerPacket = 1024

// NewBatchPool returns a pool of batches with room for packets packets and an
// arena of arenaBytes bytes (both grow when needed).
func NewBatchPool(packets, arenaBytes int) *BatchPool {
	p := &BatchPool{packets: packets, arenaCap: arenaBytes}
	p.pool.New = func() any {
		b := &PooledBatch{pool: p}
		b.Packets = make([]Packet, 0, p.packets)
		b.arena = make([]byte, 0, p.arenaCap)
		b.Free = b.release // bound once, so Free costs no allocation per batch
		return b
	}
	return p
}

// Get returns an empty batch.
func (p *BatchPool) Get() *PooledBatch {
	return p.pool.Get().(*PooledBatch)
}

// PooledBatch is a Batch from a BatchPool. Hand &b.Batch to the pipeline;
// its Free returns b to the pool. Only one goroutine may fill it.
type PooledBatch struct {
	Batch
	arena []byte
	pool  *BatchPool
}

// Append copies data into the arena and adds it as a packet.
func (b *PooledBatch) Append(data []byte, sender netip.AddrPort, received time.Time) {
	start := len(b.arena)
	b.arena = append(b.arena, data...)
	b.Packets = append(b.Packets, Packet{Data: b.arena[start:len(b.arena):len(b.arena)], Sender: sender, Received: received})
}

// Buf returns the arena, for appending a datagram to it in place (for
// example with AppendShoveler); then pass the extended arena and the appended
// datagram to Add. If the append had to grow the arena, earlier packets keep
// pointing into the old one, which stays valid.
func (b *PooledBatch) Buf() []byte { return b.arena }

// Add records data, which was appended to the arena returned by Buf, as a
// packet; buf is the extended arena.
func (b *PooledBatch) Add(buf, data []byte, sender netip.AddrPort, received time.Time) {
	b.arena = buf
	b.Packets = append(b.Packets, Packet{Data: data[:len(data):len(data)], Sender: sender, Received: received})
}

// Len returns the number of packets in the batch.
func (b *PooledBatch) Len() int { return len(b.Packets) }

// Bytes returns the number of datagram bytes in the arena.
func (b *PooledBatch) Bytes() int { return len(b.arena) }

// Full reports whether the batch should be handed over: it holds the
// pool's number of packets, or its arena has no room left for a largest
// datagram. Sources that check it before each packet never grow the arena,
// so a batch's memory is bounded in bytes (arenaBytes + one datagram) and
// the arena is reused as it is.
func (b *PooledBatch) Full() bool {
	return len(b.Packets) >= b.pool.packets || cap(b.arena)-len(b.arena) < MaxDatagram
}

func (b *PooledBatch) release() {
	clear(b.Packets) // drop references for the GC
	b.Packets = b.Packets[:0]
	b.arena = b.arena[:0]
	b.Ack = nil
	b.pool.pool.Put(b)
}
