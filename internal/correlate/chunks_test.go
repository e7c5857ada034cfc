package correlate

import (
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// TestDrainInChunks: a server that closes 2,600 files in one burst (a
// drain) hands them over as chunks of at most RecordChunk records, every
// record once and in the order they were made; the chunks given back are
// reused for the next burst, so it allocates no new chunk.
func TestDrainInChunks(t *testing.T) {
	const n = 2600
	sh := NewShard(DefaultConfig())
	s := newSrv("192.0.2.60:1094", t0, 90)
	now := time.Unix(t0+10, 0)
	burst := func(first uint32) {
		for id := first; id < first+n; id += 100 {
			sh.Handle(s.f(0, 5, func(fb *packet.FStreamBuilder) {
				for j := id; j < id+100; j++ {
					fb.Open(openLFN(j, 0, "/drain/f", 10))
				}
			}), s.addr, now)
		}
		for id := first; id < first+n; id += 100 {
			sh.Handle(s.f(5, 9, func(fb *packet.FStreamBuilder) {
				for j := id; j < id+100; j++ {
					fb.Close(packet.FileClose{FileID: j, Read: int64(j)})
				}
			}), s.addr, now)
		}
	}
	check := func(chunks [][]record.Record, first uint32) {
		t.Helper()
		if want := (n + RecordChunk - 1) / RecordChunk; len(chunks) != want {
			t.Fatalf("%d chunks, want %d", len(chunks), want)
		}
		next := first
		for _, c := range chunks {
			if len(c) > RecordChunk {
				t.Fatalf("chunk of %d records, bound %d", len(c), RecordChunk)
			}
			for i := range c {
				if c[i].FileID != next || c[i].ReadBytes != int64(next) || c[i].Reason != record.Complete {
					t.Fatalf("record %+v, want file %d complete", c[i], next)
				}
				next++
			}
		}
		if next != first+n {
			t.Fatalf("%d records, want %d", next-first, n)
		}
	}
	burst(1)
	var o Output
	sh.Drain(&o)
	chunks := o.Records
	check(chunks, 1)
	var more Output
	if sh.Drain(&more); len(more.Records) != 0 {
		t.Fatalf("a second drain returned %d chunks", len(more.Records))
	}
	first := map[*record.Record]bool{}
	for _, c := range chunks {
		first[&c[:1][0]] = true
	}
	sh.Recycle(chunks)
	burst(1 + n)
	var next Output
	sh.Drain(&next)
	again := next.Records
	check(again, 1+n)
	for _, c := range again {
		if !first[&c[:1][0]] {
			t.Fatal("a new chunk was allocated although recycled ones were free")
		}
	}
}
