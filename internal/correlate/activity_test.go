package correlate

import (
	"testing"

	"github.com/xrdmon/xrdmon/internal/packet"
)

// TestDrainActivity: each server's streams are heard at the time of their
// last datagram, a stream never sent is 0, and open files are counted.
func TestDrainActivity(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReportActivity = true
	s := NewShard(cfg)
	a, b := newSrv("192.0.2.1:1094", 100, 7), newSrv("192.0.2.2:1094", 200, 8)
	s.Handle(a.ident("SITE_A"), a.addr, at(10))
	s.Handle(a.f(10, 11, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(1, 0, "/store/x", 10)) }), a.addr, at(12))
	s.Handle(b.g('C', 20, 21, `{"event":"file_close","lfn":"/x","size":1,"b_hit":1,"b_miss":0}`), b.addr, at(25))
	s.Handle(a.f(30, 31, func(fb *packet.FStreamBuilder) {}), a.addr, at(31))

	var o Output
	s.Drain(&o)
	got := o.Activity
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
	if n := testing.AllocsPerRun(100, func() {
		o.Activity = o.Activity[:0]
		s.Drain(&o)
	}); n != 0 {
		t.Errorf("Drain allocates %v times into an Output with room", n)
	}
	if len(o.Activity) != 2 {
		t.Errorf("%d servers on a later drain, want 2", len(o.Activity))
	}
	s = NewShard(DefaultConfig())
	s.Handle(a.ident("SITE_A"), a.addr, at(40))
	if s.Drain(&o); len(o.Activity) != 2 {
		t.Errorf("without ReportActivity: %d servers appended, want none", len(o.Activity)-2)
	}
}
