package backoff

import (
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, 2 * time.Second
	// Upper bounds of successive delays; each is in [want/2, want).
	wants := []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second, 2 * time.Second,
	}
	for range 50 {
		b := Backoff{Min: lo, Max: hi}
		for round := range 2 {
			for i, want := range wants {
				if d := b.Next(); d < want/2 || d >= want {
					t.Fatalf("round %d, call %d: Next() = %s, want in [%s, %s)", round, i+1, d, want/2, want)
				}
			}
			b.Reset() // the second round starts over at Min
		}
	}
}

func TestNextEdges(t *testing.T) {
	for _, tc := range []struct {
		name     string
		min, max time.Duration
		want     []time.Duration // upper bounds, as in TestNext
	}{
		{"max below min", time.Second, time.Millisecond, []time.Duration{time.Second, time.Second}},
		{"max equals min", time.Second, time.Second, []time.Duration{time.Second, time.Second}},
		{"max not a power of two", 3 * time.Second, 10 * time.Second,
			[]time.Duration{3 * time.Second, 6 * time.Second, 10 * time.Second, 10 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Backoff{Min: tc.min, Max: tc.max}
			for i, want := range tc.want {
				if d := b.Next(); d < want/2 || d >= want {
					t.Fatalf("call %d: Next() = %s, want in [%s, %s)", i+1, d, want/2, want)
				}
			}
		})
	}
}

func TestJitter(t *testing.T) {
	for _, tc := range []struct {
		d      time.Duration
		lo, hi time.Duration // result in [lo, hi]
	}{
		{0, 0, 0},
		{1, 1, 1},
		{2, 1, 1},
		{3, 1, 2},
		{time.Second, time.Second / 2, time.Second - 1},
	} {
		for range 100 {
			if got := Jitter(tc.d); got < tc.lo || got > tc.hi {
				t.Fatalf("Jitter(%s) = %s, want in [%s, %s]", tc.d, got, tc.lo, tc.hi)
			}
		}
	}
}
