package correlate

import (
	"strconv"
	"testing"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// TestPendingQueueBounded: d records resolved by their opens leave no
// lasting trace in the expiry queue (it is compacted), while the few that
// stay unresolved still expire after PendingTTL, and a path waiting across
// many compactions still reaches its file.
func TestPendingQueueBounded(t *testing.T) {
	s := NewShard(DefaultConfig())
	sv := newSrv("192.0.2.40:1094", t0, 1)
	uid := sv.uid("xroot", "a", 1, "h")
	s.Handle(sv.login(1, uid, gsiLogin), sv.addr, at(0))
	// File 2's path waits for an open that comes at the end; every 1000th
	// file (>= 1000) never opens.
	s.Handle(sv.path(2, uid, "/store/late"), sv.addr, at(0))
	const n = 20_000
	var recs []record.Record
	var o Output
	maxQueue := 0
	for id := uint32(3); id < n; id++ {
		p := "/store/f" + strconv.Itoa(int(id))
		s.Handle(sv.path(id, uid, p), sv.addr, at(1))
		if id%1000 != 0 {
			s.Handle(sv.f(0, 1, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(id, 1, p, 10)) }), sv.addr, at(1))
			s.Handle(sv.f(0, 2, func(fb *packet.FStreamBuilder) { fb.Close(packet.FileClose{FileID: id, Read: 10}) }), sv.addr, at(1))
		}
		maxQueue = max(maxQueue, s.pending.len())
		recs, _ = take(s, &o, recs, nil)
	}
	if maxQueue > 2*minCompact {
		t.Errorf("expiry queue reached %d entries for %d unresolved references", maxQueue, s.Stats().PendingRefs)
	}
	for _, r := range recs {
		if want := "/store/f" + strconv.Itoa(int(r.FileID)); r.Path != want || r.Reason != record.Complete || r.User != "a" {
			t.Fatalf("record %d: path %q reason %s user %q", r.FileID, r.Path, r.Reason, r.User)
		}
	}
	if len(recs) != n-3-n/1000+1 {
		t.Errorf("%d records", len(recs))
	}
	s.Handle(sv.f(0, 3, func(fb *packet.FStreamBuilder) { fb.Open(packet.FileOpen{FileID: 2, FileSize: 1}) }), sv.addr, at(2))
	if st := s.Stats(); st.PendingRefs != n/1000-1 {
		t.Errorf("pending references %d, want %d", st.PendingRefs, n/1000-1)
	}
	s.Tick(at(1 + int64(DefaultConfig().PendingTTL.Seconds())))
	if st := s.Stats(); st.PendingRefs != 0 || st.PendingDropped != n/1000-1 {
		t.Errorf("after PendingTTL: pending %d, dropped %d", st.PendingRefs, st.PendingDropped)
	}
	s.Flush(at(400))
	recs, _ = take(s, &o, recs[:0], nil)
	if len(recs) != 1 || recs[0].FileID != 2 || recs[0].Path != "/store/late" {
		t.Fatalf("late file: %+v", recs)
	}
}
