package correlate

import (
	"testing"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// t builds one t-stream packet: a window mark, the entries, a window mark.
func (s *srv) t(from, to int32, fill func(tb *packet.TraceBuilder)) []byte {
	var tb packet.TraceBuilder
	tb.Reset(nil, s.hdr('t', &s.mainSeq))
	tb.Window(s.sid, t0+from, t0+from)
	fill(&tb)
	tb.Window(s.sid, t0+to, t0+to)
	return tb.Finish()
}

// traceFeed is one traced session: file 8 read sequentially in 4 reads of
// 1 MiB, then one jump back; two vector reads (one unwound into its
// segments, as `iov` sends them); file 9 written. order says whether the
// t-stream comes before ("trace-first") or after the f-stream close.
func traceFeed(order string) *feed {
	s := newSrv("192.0.2.30:1094", t0-100, 77)
	uid := s.uid("xroot", "alice", 5, "wn1")
	var f feed
	f.send(s, 1, s.login(7, uid, packet.Login{}))
	f.send(s, 2, s.f(0, 2, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(8, 7, "/data/a", 10<<20))
		o := openLFN(9, 7, "/data/b", 0)
		o.RW = true
		fb.Open(o)
	}))
	// The client's buffer is flushed twice: when full, after the
	// sequential reads, and at its disconnect.
	trace1 := s.t(2, 30, func(tb *packet.TraceBuilder) {
		tb.Open(8, 10<<20)
		for i := int64(0); i < 4; i++ {
			tb.IO(8, i<<20, 1<<20)
		}
	})
	trace2 := s.t(30, 60, func(tb *packet.TraceBuilder) {
		tb.IO(8, 0, 4096)              // back to the start: not sequential
		tb.Readv(8, 1, 3, 3000, false) // io: a summary only
		tb.Readv(8, 2, 2, 1500, true)  // iov: a summary, then the segments
		tb.IO(8, 100, 1000)            // segment, not a read
		tb.IO(8, 5000, 500)            // segment, not a read
		tb.IO(9, 0, -(64 << 10))       // writes
		tb.IO(9, 64<<10, -(64 << 10))
		tb.Close(8, 4<<20+4096+4500, 0)
		tb.Close(9, 0, 128<<10)
		tb.Disc(7, 0, 58)
		tb.IO(8, 0, 0) // after the close: counted only if the file has not been emitted yet
	})
	closes := s.f(50, 60, func(fb *packet.FStreamBuilder) {
		fb.Close(packet.FileClose{FileID: 8, Read: 4<<20 + 4096, Readv: 4500})
		fb.Close(packet.FileClose{FileID: 9, Write: 128 << 10})
	})
	f.send(s, 31, trace1)
	if order == "trace-first" {
		f.send(s, 61, trace2)
		f.send(s, 62, closes)
	} else {
		f.send(s, 61, closes)
		f.tick(100)
		f.send(s, 120, trace2)
	}
	f.tick(200)
	return &f
}

func TestTraceProfile(t *testing.T) {
	for _, order := range []string{"trace-first", "close-first"} {
		t.Run(order, func(t *testing.T) {
			f := traceFeed(order)
			recs, _, _ := f.runTwice(t, DefaultConfig())
			for k := range f.steps {
				f.sameAsUninterrupted(t, DefaultConfig(), k)
			}
			if len(recs) != 2 {
				t.Fatalf("%d records, want 2: %+v", len(recs), recs)
			}
			m := byFile(recs)
			r := m[8]
			if r.Partial() || !r.HasIO || r.ReadBytes != 4<<20+4096 {
				t.Fatalf("file 8: %+v", r)
			}
			want := record.IOProfile{
				Complete: true, Reads: 6, Readvs: 2, ReadBytes: 4<<20 + 4096, ReadvBytes: 4500,
				SequentialReads: 4, ReadvSegments: 5,
			}
			want.ReadSizes[21] = 4 // 1 MiB
			want.ReadSizes[13] = 1 // 4096
			want.ReadSizes[0] = 1  // the zero-length read
			want.ReadvSizes[12] = 1
			want.ReadvSizes[11] = 1
			want.ReadvCounts[2] = 2
			if order == "close-first" {
				// The record waited for its trace: the entry after the
				// client's DISC is not part of it.
				want.Reads, want.ReadSizes[0] = 5, 0
			}
			if r.IO == nil || *r.IO != want {
				t.Errorf("file 8 profile:\n got %+v\nwant %+v", r.IO, want)
			}
			w := m[9]
			if !w.HasIO || w.IO == nil || w.IO.Writes != 2 || w.IO.WriteBytes != 128<<10 || w.IO.WriteSizes[17] != 2 || !w.IO.Complete || w.IO.Reads != 0 {
				t.Errorf("file 9 profile: %+v", w.IO)
			}
		})
	}
}

// A server that does not trace I/O gives records without a profile, at
// once: a `files`-only t-stream (OPEN and CLOSE) is not I/O tracing.
func TestTraceAbsentWithoutIO(t *testing.T) {
	s := newSrv("192.0.2.31:1094", t0-100, 78)
	uid := s.uid("xroot", "bob", 5, "wn2")
	var f feed
	f.send(s, 1, s.login(7, uid, packet.Login{}))
	f.send(s, 2, s.t(0, 60, func(tb *packet.TraceBuilder) { tb.Open(8, 100) }))
	f.send(s, 3, s.f(0, 3, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(8, 7, "/x", 100))
		fb.Close(packet.FileClose{FileID: 8, Read: 100})
	}))
	recs, _, _ := f.runTwice(t, DefaultConfig())
	if len(recs) != 1 || recs[0].HasIO || recs[0].IO != nil {
		t.Fatalf("records: %+v", recs)
	}
}

// A trace that never ends: the record waits PendingTTL, then goes out
// complete with the incomplete profile.
func TestTraceLateGivesUp(t *testing.T) {
	s := newSrv("192.0.2.32:1094", t0-100, 79)
	uid := s.uid("xroot", "carol", 5, "wn3")
	var f feed
	f.send(s, 1, s.login(7, uid, packet.Login{}))
	f.send(s, 2, s.t(0, 60, func(tb *packet.TraceBuilder) { tb.IO(8, 0, 100) }))
	f.send(s, 3, s.f(0, 3, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(8, 7, "/x", 100))
		fb.Close(packet.FileClose{FileID: 8, Read: 100})
	}))
	f.tick(10)
	cfg := DefaultConfig()
	recs, _, _ := f.run(t, cfg)
	if len(recs) != 0 {
		t.Fatalf("emitted before its trace ended: %+v", recs)
	}
	f.tick(10 + int64(cfg.PendingTTL.Seconds()))
	recs, _, _ = f.runTwice(t, cfg)
	if len(recs) != 1 || recs[0].Partial() || !recs[0].HasIO || recs[0].IO.Complete || recs[0].IO.Reads != 1 ||
		recs[0].IO.Partial != record.IONoClose {
		t.Fatalf("records: %+v", recs)
	}
}

// heavyTrace is the t-stream of one heavily traced access with `iov`: 658
// reads, then 102 vector reads of 6,911 segments in all (each a READU and
// its segments), then the CLOSE, in packets of at most 2,048 entries (a
// 32 KiB buffer), and the profile it gives.
func heavyTrace(s *srv, dict uint32) ([][]byte, record.IOProfile) {
	var pkts [][]byte
	var tb packet.TraceBuilder
	n := 0
	entry := func(add func()) {
		if n == 0 {
			tb.Reset(nil, s.hdr('t', &s.mainSeq))
			tb.Window(s.sid, t0+10, t0+10)
		}
		add()
		if n++; n == 2046 {
			tb.Window(s.sid, t0+20, t0+20)
			pkts = append(pkts, tb.Finish())
			n = 0
		}
	}
	want := record.IOProfile{Complete: true}
	entry(func() { tb.Open(dict, 1<<30) })
	for i := int64(0); i < 658; i++ {
		entry(func() { tb.IO(dict, i<<16, 1<<16) })
		want.Reads++
		want.ReadBytes += 1 << 16
		want.ReadSizes.Add(1 << 16)
	}
	want.SequentialReads = 658
	segsLeft := 6911
	for i := 0; i < 102; i++ {
		segs := segsLeft / (102 - i)
		segsLeft -= segs
		entry(func() { tb.Readv(dict, uint8(i), int16(segs), int32(segs*1024), true) })
		for j := 0; j < segs; j++ {
			entry(func() { tb.IO(dict, int64(i*100000+j*2048), 1024) })
		}
		want.Readvs++
		want.ReadvBytes += int64(segs * 1024)
		want.ReadvSegments += int64(segs)
		want.ReadvSizes.Add(int64(segs * 1024))
		want.ReadvCounts.Add(int64(segs))
	}
	entry(func() { tb.Close(dict, want.ReadBytes+want.ReadvBytes, 0) })
	if n > 0 {
		tb.Window(s.sid, t0+20, t0+20)
		pkts = append(pkts, tb.Finish())
	}
	return pkts, want
}

// A heavily traced file keeps its whole I/O profile; when the trace lost
// a packet, was delivered out of order or never came, the profile says
// why it is partial.
func TestTraceHeavyFile(t *testing.T) {
	for _, c := range []struct {
		name string
		send func(f *feed, s *srv, pkts [][]byte)
		want record.IOPartial
	}{
		{"whole", func(f *feed, s *srv, pkts [][]byte) {
			for _, p := range pkts {
				f.send(s, 20, p)
			}
		}, record.IOWhole},
		{"a packet lost", func(f *feed, s *srv, pkts [][]byte) {
			for i, p := range pkts {
				if i != 1 {
					f.send(s, 20, p)
				}
			}
		}, record.IOLost},
		{"packets swapped", func(f *feed, s *srv, pkts [][]byte) {
			pkts[1], pkts[2] = pkts[2], pkts[1]
			for _, p := range pkts {
				f.send(s, 20, p)
			}
		}, record.IOReordered},
		{"all lost", func(*feed, *srv, [][]byte) {}, record.IOUntraced},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSrv("192.0.2.33:1094", t0-100, 80)
			uid := s.uid("xroot", "dave", 5, "wn4")
			var f feed
			f.send(s, 1, s.login(7, uid, packet.Login{}))
			f.send(s, 2, s.t(0, 2, func(tb *packet.TraceBuilder) { tb.IO(5, 0, 100) })) // the server traces I/O
			f.send(s, 3, s.f(0, 3, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(8, 7, "/heavy", 1<<30)) }))
			pkts, want := heavyTrace(s, 8)
			if len(pkts) != 4 {
				t.Fatalf("%d trace packets", len(pkts))
			}
			c.send(&f, s, pkts)
			f.send(s, 30, s.f(20, 30, func(fb *packet.FStreamBuilder) {
				fb.Close(packet.FileClose{FileID: 8, Read: want.ReadBytes, Readv: want.ReadvBytes})
			}))
			f.tick(400)
			recs, _, _ := f.run(t, DefaultConfig())
			r, ok := byFile(recs)[8]
			if !ok || !r.HasIO || r.IO == nil {
				t.Fatalf("no profile: %+v", recs)
			}
			if r.IO.Partial != c.want || r.IO.Complete != (c.want == record.IOWhole) {
				t.Errorf("partial %q complete %v, want %q", r.IO.Partial, r.IO.Complete, c.want)
			}
			if c.want == record.IOWhole && *r.IO != want {
				t.Errorf("profile:\n got %+v\nwant %+v", *r.IO, want)
			}
		})
	}
}
