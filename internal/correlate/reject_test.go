package correlate

import (
	"net/netip"
	"testing"

	"github.com/xrdmon/xrdmon/internal/packet"
)

func TestRejectsAndRouting(t *testing.T) {
	s := NewShard(DefaultConfig())
	sv := newSrv("192.0.2.40:1", t0, 3)
	good := sv.f(0, 1, func(fb *packet.FStreamBuilder) { fb.Disc(1) })
	bad := append([]byte(nil), good...)
	bad[2] = 0xFF // plen mismatch
	for _, d := range [][]byte{good, bad, []byte("<statistics/>"), []byte(`{"pgm":"xrootd"}`), {0xFF, 1, 2}} {
		s.Handle(d, sv.addr, at(0))
	}
	st := s.Stats()
	if st.Packets != 5 || st.Accounted != 1 || st.Rejected[packet.ReasonLength] != 1 ||
		st.Rejected[RejectSummaryHeader] != 2 || st.Rejected[packet.ReasonUnknownCode] != 1 || st.TotalRejected() != 4 {
		t.Errorf("stats: %+v", st)
	}
	if RejectSummary.String() != "summary_bad_xml" || RejectSummaryBounds.String() != "summary_too_large" || RejectReason(packet.ReasonLength).String() != "length_mismatch" ||
		len(RejectReasons()) != int(NumRejectReasons)-1 {
		t.Error("reason names")
	}
	a := netip.MustParseAddr("192.0.2.40")
	if ShardOf(a, 4) != ShardOf(netip.MustParseAddr("::ffff:192.0.2.40"), 4) || ShardOf(a, 1) != 0 {
		t.Error("routing")
	}
	seen := map[int]bool{}
	for i := 0; i < 64; i++ {
		seen[ShardOf(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 4)] = true
	}
	if len(seen) != 4 {
		t.Errorf("shards used: %v", seen)
	}
}
