package correlate

import (
	"iter"
	"math/rand/v2"

	"github.com/kamstrup/intmap"
)

// index maps 64-bit keys (dictKey: an incarnation and one of its
// dictionary ids; or a seeded hash of a text) to V. It is the shard's
// table of files, sessions and traces, probed for nearly every record of
// every packet, and of its pending paths and users and each incarnation's
// userid texts: an open-addressing table with linear probing (intmap),
// whose key and value share a slot, so that a probe of a large table
// waits on one cache line where a Go map's control word and slot are two.
//
// intmap places a key by a multiplicative hash of its low bits, and a
// sender chooses its dictionary ids: keys are first mixed with the
// shard's random seed by a bijection (xor, an odd multiplier, a fold of
// the high half into the low), so that the low bits depend on every bit
// of the key and a sender cannot aim many keys at one run of slots.
// Distinct keys stay distinct, and all gives them back unmixed. The
// userid texts' keys are seeded hashes already; they are mixed again
// (one multiply) so that one type serves every index.
type index[V any] struct {
	seed uint64
	m    *intmap.Map[uint64, V]
}

// mixMul is the odd multiplier of the key mix (2^64 over the golden
// ratio); mixInv is its inverse modulo 2^64, which undoes it.
const mixMul = 0x9E3779B97F4A7C15

var mixInv = inverse64(mixMul)

// inverse64 returns the inverse of odd a modulo 2^64 (Newton's iteration:
// each step doubles the correct low bits, from 3 of x = a).
func inverse64(a uint64) uint64 {
	x := a
	for range 5 {
		x *= 2 - a*x
	}
	return x
}

// indexSeed returns a random seed for a shard's indexes.
func indexSeed() uint64 { return rand.Uint64() }

// newIndex returns an empty index with room for n keys before it grows.
func newIndex[V any](seed uint64, n int) index[V] {
	return index[V]{seed: seed, m: intmap.New[uint64, V](n)}
}

func (x index[V]) mix(k uint64) uint64 {
	k = (k ^ x.seed) * mixMul
	return k ^ k>>32
}

func (x index[V]) unmix(h uint64) uint64 {
	h ^= h >> 32 // a fold of the high half is its own inverse
	return h*mixInv ^ x.seed
}

// get returns the value of k and whether k is in the index.
func (x index[V]) get(k uint64) (V, bool) { return x.m.Get(x.mix(k)) }

// has reports whether k is in the index.
func (x index[V]) has(k uint64) bool { return x.m.Has(x.mix(k)) }

// put sets the value of k.
func (x index[V]) put(k uint64, v V) { x.m.Put(x.mix(k), v) }

// del removes k, if present.
func (x index[V]) del(k uint64) { x.m.Del(x.mix(k)) }

// len returns the number of keys.
func (x index[V]) len() int { return x.m.Len() }

// clear removes every key, keeping the table's room.
func (x index[V]) clear() { x.m.Clear() }

// all returns the keys and values, in no particular order.
func (x index[V]) all() iter.Seq2[uint64, V] {
	return func(yield func(uint64, V) bool) {
		for h, v := range x.m.All() {
			if !yield(x.unmix(h), v) {
				return
			}
		}
	}
}

// values returns the values, in no particular order.
func (x index[V]) values() iter.Seq[V] { return x.m.Values() }
