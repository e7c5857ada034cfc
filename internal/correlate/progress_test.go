package correlate

import (
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
)

// TestProgressSnapshots: an open file reports its bytes at isXfr updates
// of a later minute than its open, one snapshot per file and minute (a
// later one in the same minute replaces the earlier); a file that closes
// before its snapshots are taken has them dropped (its record carries all
// its bytes), and only its own: the other files' snapshots stay.
func TestProgressSnapshots(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReportProgress = true
	sh := NewShard(cfg)
	s := newSrv("192.0.2.61:1094", t0, 91)
	now := time.Unix(t0+10, 0)
	const files = 50
	sh.Handle(s.f(0, 5, func(fb *packet.FStreamBuilder) {
		for id := uint32(1); id <= files; id++ {
			fb.Open(openLFN(id, 0, "/progress/f", 1<<30))
		}
	}), s.addr, now)
	xfr := func(tBeg, tEnd int32, read int64) {
		sh.Handle(s.f(tBeg, tEnd, func(fb *packet.FStreamBuilder) {
			for id := uint32(1); id <= files; id++ {
				fb.Xfr(packet.FileXfr{FileID: id, Read: read * int64(id)})
			}
		}), s.addr, now)
	}
	m := int32(60 - t0%60) // t0+m starts a minute; the opens are in the one before
	xfr(m-15, m-5, 1)      // the open's minute: nothing to report
	xfr(m+1, m+10, 2)      // the next minute
	xfr(m+20, m+30, 3)     // the same minute again: replaces
	xfr(m+61, m+70, 4)     // the minute after
	// Odd files close before the snapshots are taken.
	sh.Handle(s.f(m+70, m+75, func(fb *packet.FStreamBuilder) {
		for id := uint32(1); id <= files; id += 2 {
			fb.Close(packet.FileClose{FileID: id, Read: 5 * int64(id)})
		}
	}), s.addr, now)
	var o Output
	recs, _ := take(sh, &o, nil, nil)
	prog := o.Progress
	got := map[uint32][]int64{}
	for _, p := range prog {
		if p.FileID%2 == 1 {
			t.Fatalf("snapshot of closed file %d kept", p.FileID)
		}
		got[p.FileID] = append(got[p.FileID], p.ReadBytes)
	}
	for id := uint32(2); id <= files; id += 2 {
		want := []int64{3 * int64(id), 4 * int64(id)}
		if g := got[id]; len(g) != 2 || g[0] != want[0] || g[1] != want[1] {
			t.Fatalf("file %d: snapshots of read bytes %v, want %v", id, g, want)
		}
	}
	if len(prog) != files {
		t.Fatalf("%d snapshots, want %d", len(prog), files)
	}
	if len(recs) != files/2 {
		t.Fatalf("%d records, want %d", len(recs), files/2)
	}
	// Next generation: a snapshot taken, then the file closes: the close
	// must not reach back into the taken list, and new snapshots count.
	xfr(m+130, m+140, 6)
	sh.Handle(s.f(m+140, m+150, func(fb *packet.FStreamBuilder) {
		fb.Close(packet.FileClose{FileID: 2, Read: 7 * 2})
	}), s.addr, now)
	take(sh, &o, nil, nil)
	prog = o.Progress
	if len(prog) != files/2-1 {
		t.Fatalf("second generation: %d snapshots, want %d", len(prog), files/2-1)
	}
	for _, p := range prog {
		if p.FileID == 2 || p.ReadBytes != 6*int64(p.FileID) || p.End != time.Unix(t0+int64(m)+140, 0).UTC() {
			t.Fatalf("second generation: snapshot %d read %d end %v", p.FileID, p.ReadBytes, p.End)
		}
	}
}
