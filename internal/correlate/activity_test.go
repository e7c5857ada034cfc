package correlate

import (
	"testing"

	"github.com/xrdmon/xrdmon/internal/packet"
)

// TestTakeActivity: each server's streams are heard at the time of their
// last datagram, a stream never sent is 0, and open files are counted.
func TestTakeActivity(t *testing.T) {
	s := NewShard(DefaultConfig())
	a, b := newSrv("192.0.2.1:1094", 100, 7), newSrv("192.0.2.2:1094", 200, 8)
	s.Handle(a.ident("SITE_A"), a.addr, at(10))
	s.Handle(a.f(10, 11, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(1, 0, "/store/x", 10)) }), a.addr, at(12))
	s.Handle(b.g('C', 20, 21, `{"event":"file_close","lfn":"/x","size":1,"b_hit":1,"b_miss":0}`), b.addr, at(25))
	s.Handle(a.f(30, 31, func(fb *packet.FStreamBuilder) {}), a.addr, at(31))

	got := s.TakeActivity(nil)
	if len(got) != 2 {
		t.Fatalf("%d servers, want 2: %+v", len(got), got)
	}
	byIP := map[string]ServerActivity{}
	for _, g := range got {
		byIP[g.ServerIP] = g
	}
	sa, sb := byIP["192.0.2.1"], byIP["192.0.2.2"]
	if sa.Heard[StreamMap] != at(10).Unix() || sa.Heard[StreamF] != at(31).Unix() || sa.Heard[StreamG] != 0 {
		t.Errorf("server a heard %v", sa.Heard)
	}
	if sa.Site != "SITE_A" || sa.OpenFiles != 1 {
		t.Errorf("server a: site %q, %d open files; want SITE_A, 1", sa.Site, sa.OpenFiles)
	}
	if sb.Heard[StreamG] != at(25).Unix() || sb.Heard[StreamMap] != 0 || sb.OpenFiles != 0 {
		t.Errorf("server b: %+v", sb)
	}
	if n := testing.AllocsPerRun(100, func() { got = s.TakeActivity(got[:0]) }); n != 0 {
		t.Errorf("TakeActivity allocates %v times into a slice with room", n)
	}
}
