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
	const files = 50
	sh, s, now, xfr := progressFiles("192.0.2.61:1094", 91, files)
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

// TestShedProgress: while shed, isXfr updates make no snapshot and are
// counted; a snapshot taken before stays; once shedding stops, the next
// update reports the file's bytes so far (what was shed included), and the
// records are those of a shard that never shed.
func TestShedProgress(t *testing.T) {
	const files = 8
	sh, s, now, xfr := progressFiles("192.0.2.62:1094", 92, files)
	m := int32(60 - t0%60)
	xfr(m+1, m+10, 2) // taken before shedding
	sh.ShedProgress(true)
	xfr(m+61, m+70, 3)   // shed
	xfr(m+121, m+130, 4) // shed
	if got := sh.Stats().ProgressShed; got != 2*files {
		t.Fatalf("ProgressShed = %d, want %d", got, 2*files)
	}
	var o Output
	take(sh, &o, nil, nil)
	if len(o.Progress) != files {
		t.Fatalf("%d snapshots while shedding, want the %d taken before", len(o.Progress), files)
	}
	for _, p := range o.Progress {
		if p.ReadBytes != 2*int64(p.FileID) {
			t.Fatalf("file %d: snapshot of %d bytes, want the one taken before shedding", p.FileID, p.ReadBytes)
		}
	}
	sh.ShedProgress(false)
	xfr(m+181, m+190, 5)
	sh.Handle(s.f(m+190, m+200, func(fb *packet.FStreamBuilder) {
		for id := uint32(1); id <= files; id++ {
			fb.Close(packet.FileClose{FileID: id, Read: 6 * int64(id)})
		}
	}), s.addr, now)
	recs, _ := take(sh, &o, nil, nil)
	if len(o.Progress) != 0 {
		t.Fatalf("%d snapshots of files closed in the same commit, want them dropped", len(o.Progress))
	}
	if len(recs) != files {
		t.Fatalf("%d records, want %d", len(recs), files)
	}
	for _, r := range recs {
		if r.ReadBytes != 6*int64(r.FileID) {
			t.Fatalf("file %d: record of %d bytes, want %d", r.FileID, r.ReadBytes, 6*int64(r.FileID))
		}
	}
	// After shedding, a snapshot reports the bytes so far.
	sh.Handle(s.f(m+200, m+205, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(100, 0, "/shed/g", 1<<30))
	}), s.addr, now)
	sh.Handle(s.f(m+261, m+270, func(fb *packet.FStreamBuilder) {
		fb.Xfr(packet.FileXfr{FileID: 100, Read: 1000})
	}), s.addr, now)
	take(sh, &o, nil, nil)
	if len(o.Progress) != 1 || o.Progress[0].ReadBytes != 1000 {
		t.Fatalf("after shedding: snapshots %v, want one of 1000 bytes", o.Progress)
	}
}

// progressFiles returns a shard that reports progress, server addr (id
// sid) with files 1..n opened at the start of its clock, the time the
// packets are received, and a func that sends, between tBeg and tEnd, an
// isXfr of each file with read × its id bytes read.
func progressFiles(addr string, sid uint64, n uint32) (*Shard, *srv, time.Time, func(tBeg, tEnd int32, read int64)) {
	cfg := DefaultConfig()
	cfg.ReportProgress = true
	sh := NewShard(cfg)
	s := newSrv(addr, t0, sid)
	now := time.Unix(t0+10, 0)
	sh.Handle(s.f(0, 5, func(fb *packet.FStreamBuilder) {
		for id := uint32(1); id <= n; id++ {
			fb.Open(openLFN(id, 0, "/progress/f", 1<<30))
		}
	}), s.addr, now)
	xfr := func(tBeg, tEnd int32, read int64) {
		sh.Handle(s.f(tBeg, tEnd, func(fb *packet.FStreamBuilder) {
			for id := uint32(1); id <= n; id++ {
				fb.Xfr(packet.FileXfr{FileID: id, Read: read * int64(id)})
			}
		}), s.addr, now)
	}
	return sh, s, now, xfr
}
