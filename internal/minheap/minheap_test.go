package minheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type item struct{ key, seq int }

func (a *item) Less(b *item) bool { return a.key < b.key || a.key == b.key && a.seq < b.seq }

// TestOrder pushes and pops at random and checks every pop against a
// sorted model, ties broken as Less says.
func TestOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h []item
	var model []item
	for i := range 20000 {
		if rng.IntN(3) > 0 || len(h) == 0 {
			x := item{key: rng.IntN(50), seq: i}
			h = Push(h, x)
			model = append(model, x)
			continue
		}
		var got item
		h, got = Pop(h)
		slices.SortFunc(model, func(a, b item) int {
			if a.Less(&b) {
				return -1
			}
			return 1
		})
		if got != model[0] {
			t.Fatalf("pop %d: got %+v, want %+v", i, got, model[0])
		}
		model = model[1:]
		if len(h) != len(model) {
			t.Fatalf("len %d, want %d", len(h), len(model))
		}
	}
}

// TestSortedIsHeap: a sorted slice pops in order, as the linker's
// compaction relies on.
func TestSortedIsHeap(t *testing.T) {
	h := []item{{1, 0}, {2, 0}, {2, 1}, {5, 0}, {7, 0}, {9, 0}}
	for _, want := range slices.Clone(h) {
		var got item
		h, got = Pop(h)
		if got != want {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
}

// TestAllocs: with room in the slice, Push and Pop do not allocate.
func TestAllocs(t *testing.T) {
	h := make([]item, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		for i := range 32 {
			h = Push(h, item{key: 31 - i})
		}
		for len(h) > 0 {
			h, _ = Pop(h)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run, want 0", allocs)
	}
}

// BenchmarkPushPop keeps a heap of 4,096 elements (the linker's decision
// queue in a redirect-heavy commit is of this order) and pushes and pops
// one element per operation.
func BenchmarkPushPop(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	h := make([]item, 0, 4097)
	for i := range 4096 {
		h = Push(h, item{key: rng.IntN(1 << 20), seq: i})
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var x item
		h, x = Pop(h)
		h = Push(h, item{key: x.key + rng.IntN(1<<10), seq: i})
	}
}
