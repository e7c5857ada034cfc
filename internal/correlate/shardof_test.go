package correlate

import (
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xrdmon/xrdmon/internal/hashmix"
)

// TestShardOfStable pins ShardOf: checkpoints are restored by shard index,
// so the routing must be the same in every process (and every release).
func TestShardOfStable(t *testing.T) {
	cases := []struct {
		addr string
		hash uint64
		n2   int
		n4   int
		n7   int
	}{
		{"192.0.2.10", 0x88df820af59a1c04, 0, 0, 0},
		{"::ffff:192.0.2.10", 0x88df820af59a1c04, 0, 0, 0}, // IPv4-mapped is the IPv4 server
		{"10.0.0.1", 0x942f19187936f36c, 0, 0, 1},
		{"2001:db8::1", 0x8dec2b2d0b0e530f, 1, 3, 3},
		{"0.0.0.0", 0xe6495528e0ac24b2, 0, 2, 1},
	}
	for _, c := range cases {
		a := netip.MustParseAddr(c.addr)
		if h := addrHash(a); h != c.hash {
			t.Errorf("%s: hash %#x, want %#x", c.addr, h, c.hash)
		}
		if got := [3]int{ShardOf(a, 2), ShardOf(a, 4), ShardOf(a, 7)}; got != [3]int{c.n2, c.n4, c.n7} {
			t.Errorf("%s: shards %v, want %v", c.addr, got, [3]int{c.n2, c.n4, c.n7})
		}
		// the first stage is standard FNV-1a over the 16-byte form
		b := a.Unmap().As16()
		f := fnv.New64a()
		f.Write(b[:])
		if hashmix.Fmix64(f.Sum64()) != c.hash { // hashmix_test checks Fmix64 against known values
			t.Errorf("%s: not fmix64(FNV-1a)", c.addr)
		}
	}
}

// TestShardOfIsFNV: the hash of any address, IPv4 (whose common 12-byte
// prefix addrHash does not hash again) or IPv6, is fmix64 of standard
// FNV-1a over its 16-byte form.
func TestShardOfIsFNV(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 10000 {
		var b [16]byte
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		a := netip.AddrFrom16(b)
		if i%2 == 0 {
			a = netip.AddrFrom4([4]byte(b[:4]))
		}
		u := a.As16()
		f := fnv.New64a()
		f.Write(u[:])
		if got, want := addrHash(a), hashmix.Fmix64(f.Sum64()); got != want {
			t.Fatalf("%s: hash %#x, want %#x", a, got, want)
		}
	}
}

// TestShardOfSpread: consecutive addresses spread over the shards.
func TestShardOfSpread(t *testing.T) {
	for _, n := range []int{2, 3, 4, 8} {
		count := make([]int, n)
		for i := 0; i < 1024; i++ {
			count[ShardOf(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), n)]++
		}
		for sh, c := range count {
			if c < 1024/n/2 || c > 1024/n*3/2 {
				t.Errorf("n=%d: shard %d got %d of 1024", n, sh, c)
			}
		}
	}
}

// BenchmarkShardOf is the routing of one packet (each shard routes every
// packet of a batch), from an IPv4 sender and from an IPv6 one.
func BenchmarkShardOf(b *testing.B) {
	for _, c := range []struct{ name, addr string }{{"v4", "192.0.2.10"}, {"v6", "2001:db8::1"}} {
		a := netip.MustParseAddr(c.addr)
		b.Run(c.name, func(b *testing.B) {
			n := 0
			for range b.N {
				n += ShardOf(a, 2)
			}
			if n < 0 {
				b.Fatal(n)
			}
		})
	}
}
