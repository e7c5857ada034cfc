package correlate

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkForgedIdentity: the cost of a forged '=' packet from a flooding
// address does not grow with the flood (it churns that address's slots).
func BenchmarkForgedIdentity(b *testing.B) {
	sh := NewShard(DefaultConfig())
	rng := rand.New(rand.NewPCG(1, 2))
	attacker := netip.MustParseAddrPort("198.51.100.66:1094")
	pkts := make([][]byte, 4096)
	for i := range pkts {
		pkts[i] = newSrv(attacker.String(), rng.Uint32(), rng.Uint64()&sidMask).ident("EVIL")
	}
	now := time.Unix(t0, 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sh.Handle(pkts[i%len(pkts)], attacker, now)
	}
}
