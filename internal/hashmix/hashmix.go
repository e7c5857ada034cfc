// Package hashmix holds the finalizer of MurmurHash3, shared by the
// correlator's shard hash and the rollups' user sketches.
package hashmix

// Fmix64 is MurmurHash3's fmix64: a bijection of the 64-bit values that
// spreads every input bit over every output bit.
func Fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
