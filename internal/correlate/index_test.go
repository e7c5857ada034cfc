package correlate

import (
	"maps"
	"math/rand/v2"
	"testing"
)

// TestIndexIsAMap runs random puts, gets and deletes against a Go map,
// with keys of the shape the shard uses (few incarnations, dictionary ids
// that repeat across them, and 0).
func TestIndexIsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := newIndex[int32](indexSeed(), 0)
	want := map[uint64]int32{}
	for i := range 200_000 {
		k := dictKey(rng.Uint32N(4), rng.Uint32N(5000))
		if i%1000 == 0 {
			k = 0
		}
		switch rng.IntN(3) {
		case 0:
			x.put(k, int32(i))
			want[k] = int32(i)
		case 1:
			x.del(k)
			delete(want, k)
		}
		v, ok := x.get(k)
		if w, wok := want[k]; ok != wok || v != w || x.has(k) != wok {
			t.Fatalf("op %d key %#x: got %d %v, want %d %v", i, k, v, ok, w, wok)
		}
	}
	if x.len() != len(want) {
		t.Fatalf("len %d, want %d", x.len(), len(want))
	}
	if got := maps.Collect(x.all()); !maps.Equal(got, want) {
		t.Fatalf("all gives %d keys, not the %d put (or other keys)", len(got), len(want))
	}
	x.clear()
	if x.len() != 0 || x.has(dictKey(1, 1)) {
		t.Fatal("clear left keys")
	}
}

// TestIndexMixSpreadsChosenKeys: keys a sender can choose (one dictionary
// id at many incarnations, or ids that differ only in their high bits)
// land in distinct slots of a small table, where intmap's own hash of the
// unmixed keys would put them all in one run.
func TestIndexMixSpreadsChosenKeys(t *testing.T) {
	x := newIndex[int32](indexSeed(), 0)
	if inverse64(mixMul)*mixMul != 1 {
		t.Fatal("mixInv is not the inverse of mixMul")
	}
	const slots = 1 << 10
	for name, key := range map[string]func(i uint64) uint64{
		"one id, many incarnations": func(i uint64) uint64 { return dictKey(uint32(i), 7) },
		"ids apart by 2^16":         func(i uint64) uint64 { return dictKey(1, uint32(i)<<16) },
	} {
		used := map[uint64]bool{}
		for i := range uint64(512) {
			k := key(i)
			if x.unmix(x.mix(k)) != k {
				t.Fatalf("%s: unmix(mix(%#x)) differs", name, k)
			}
			used[uint64(startIndex(int(x.mix(k)), slots))] = true
		}
		// 512 keys thrown at random into 1,024 slots fill about 400.
		if len(used) < 300 {
			t.Errorf("%s: 512 keys in %d of %d slots", name, len(used), slots)
		}
	}
}

// startIndex is intmap's slot of a key in a table of n slots.
func startIndex(key, n int) int {
	h := int64(key) * int64(0x9E3779B9)
	return int(h^(h>>16)) & (n - 1)
}
