package dnscache

import "testing"

// BenchmarkLookupHit measures the cache hit path:
//
//	go test ./internal/dnscache -run '^$' -bench LookupHit -benchmem
func BenchmarkLookupHit(b *testing.B) {
	c, addrs := warmCache(b, 10000)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			c.Lookup(addrs[i%len(addrs)])
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				c.Lookup(addrs[i%len(addrs)])
				i++
			}
		})
	})
}
