package correlate

import (
	"math/rand/v2"
	"testing"
)

func TestSeqTracker(t *testing.T) {
	type want struct{ lost, dup, reord, stale, holes uint64 }
	cases := map[string]struct {
		seqs []uint16
		mod  uint16
		w    uint8
		want want
	}{
		"in order":                     {[]uint16{0, 1, 2, 3}, 256, 16, want{}},
		"wrap":                         {[]uint16{254, 255, 0, 1}, 256, 16, want{}},
		"swapped pair":                 {[]uint16{1, 3, 2, 4}, 256, 16, want{reord: 1}},
		"duplicate":                    {[]uint16{1, 2, 2, 3}, 256, 16, want{dup: 1}},
		"duplicate of first":           {[]uint16{7, 7}, 256, 16, want{dup: 1}},
		"gap still in window":          {[]uint16{1, 4}, 256, 16, want{holes: 2}},
		"gap within the horizon":       {append([]uint16{1, 4}, seqRange(5, 30)...), 256, 16, want{holes: 2}},
		"gap out of the horizon":       {append([]uint16{1, 4}, seqRange(5, 80)...), 256, 16, want{lost: 2}},
		"late fill of a gap":           {append([]uint16{1, 4}, append(seqRange(5, 10), 2, 3)...), 256, 16, want{reord: 2}},
		"big gap":                      {[]uint16{10, 110}, 256, 16, want{lost: 36, holes: 63}},
		"big gap across wrap":          {[]uint16{250, 20}, 256, 16, want{holes: 25}},
		"repeat beyond the window":     {append(seqRange(0, 40), 5), 256, 16, want{dup: 1}},
		"repeat beyond the horizon":    {append(seqRange(0, 200), 150, 100, 10), 256, 16, want{dup: 3}},
		"repeat 230 back":              {append(seqRange(0, 250), 20), 256, 16, want{dup: 1}},
		"repeat a whole turn back":     {append(seqRange(0, 256), 0), 256, 16, want{lost: 0, holes: 0}},
		"window 1: a swap fills":       {[]uint16{1, 3, 2}, 256, 1, want{reord: 1}},
		"text stream mod 1000":         {[]uint16{998, 999, 0, 2}, 1000, 16, want{holes: 1}},
		"jump back 40 extends":         {[]uint16{100, 101, 62}, 256, 16, want{reord: 1, holes: 37}},
		"jump back 101 reads as a gap": {[]uint16{100, 101, 1}, 256, 16, want{lost: 92, holes: 63}},
		// Older packets that arrive after the first one extend the stream
		// back to them: the numbers between that never come are holes,
		// as they would be had the older ones come first.
		"first then older":         {[]uint16{50, 49, 45, 40, 30}, 256, 16, want{reord: 4, holes: 16}},
		"first then older, wrap":   {[]uint16{2, 1, 0, 255, 250}, 256, 16, want{reord: 4, holes: 4}},
		"first then older, filled": {append([]uint16{20, 18}, seqRange(21, 40)...), 256, 16, want{reord: 1, holes: 1}},
		"older then its duplicate": {[]uint16{50, 45, 45}, 256, 16, want{reord: 1, dup: 1, holes: 4}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var tr seqTracker
			var got want
			for _, s := range c.seqs {
				res, lost := tr.observe(s, c.mod, c.w, uint32(s)+1) // same number, same content
				got.lost += lost
				switch res {
				case seqDuplicate:
					got.dup++
				case seqReordered:
					got.reord++
				case seqStale:
					got.stale++
				}
			}
			got.holes = tr.holes(c.mod)
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func seqRange(from, to uint16) []uint16 {
	var s []uint16
	for i := from; i < to; i++ {
		s = append(s, i%256)
	}
	return s
}

// TestSeqTrackerFirstThenOlder: after the first packet of a server, 1 to 40
// older ones arrive: every one is applied (none a duplicate), none is lost,
// and no hole is left for the end of the stream to count.
func TestSeqTrackerFirstThenOlder(t *testing.T) {
	for n := 1; n <= 40; n++ {
		var tr seqTracker
		first := uint16(200)
		if res, _ := tr.observe(first, 256, 16, 1); res != seqNew {
			t.Fatalf("first: %v", res)
		}
		for i := 1; i <= n; i++ {
			s := first - uint16(i)
			res, lost := tr.observe(s, 256, 16, uint32(s)+1)
			if res == seqDuplicate || lost != 0 {
				t.Fatalf("n=%d: packet %d: %v, %d lost", n, s, res, lost)
			}
		}
		var lost uint64
		for s := first + 1; s < first+30; s++ {
			_, l := tr.observe(s, 256, 16, uint32(s)+1)
			lost += l
		}
		if lost != 0 || tr.holes(256) != 0 {
			t.Errorf("n=%d: %d lost, %d holes; want none", n, lost, tr.holes(256))
		}
	}
}

// TestSeqTrackerContent: a number seen in the window is a duplicate only
// when the datagram is the same; other content (a wrap, a restart, a bus
// interleaving) is applied and reported as a collision, and a true
// duplicate of it is recognised after.
func TestSeqTrackerContent(t *testing.T) {
	var tr seqTracker
	steps := []struct {
		seq  uint16
		hash uint32
		want seqResult
	}{
		{10, 0xa, seqNew},
		{11, 0xb, seqNew},
		{11, 0xb, seqDuplicate}, // the same datagram twice
		{11, 0xc, seqCollision}, // same number, other bytes
		{11, 0xc, seqDuplicate}, // that one again
		{10, 0xa2, seqCollision},
		{12, 0xd, seqNew},
		{9, 0x9, seqReordered}, // before the first: applied
		{9, 0x9, seqDuplicate},
	}
	for i, st := range steps {
		if got, _ := tr.observe(st.seq, 256, 16, st.hash); got != st.want {
			t.Errorf("step %d (seq %d, hash %x): %v, want %v", i, st.seq, st.hash, got, st.want)
		}
	}
}

// TestSeqTrackerOrderIndependent: the packets of a stream with gaps,
// delivered in any order within the horizon, give the same loss (lost
// now plus holes at the end) as in sequence order: the numbers missing
// between the first and the last. The real capture's Pelican order
// (176 first, 125 fifth) is one of them.
func TestSeqTrackerOrderIndependent(t *testing.T) {
	run := func(seqs []uint16, mod uint16) uint64 {
		var tr seqTracker
		var lost uint64
		for _, s := range seqs {
			_, l := tr.observe(s, mod, 16, uint32(s)+1)
			lost += l
		}
		return lost + tr.holes(mod)
	}
	if got := run([]uint16{176, 140, 141, 151, 125, 126, 150, 175}, 256); got != 44 {
		t.Errorf("capture order: %d lost, want 44", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		mod := uint16(256)
		if i%4 == 3 {
			mod = 1000
		}
		first := uint16(rng.IntN(int(mod)))
		span := 2 + rng.IntN(seqHorizon-1) // from first to last: at most the horizon
		var seqs []uint16
		for j := 0; j < span; j++ {
			if j == 0 || j == span-1 || rng.IntN(3) > 0 {
				seqs = append(seqs, (first+uint16(j))%mod)
			}
		}
		want := uint64(span - len(seqs))
		if got := run(seqs, mod); got != want {
			t.Fatalf("in order %v: %d lost, want %d", seqs, got, want)
		}
		rng.Shuffle(len(seqs), func(a, b int) { seqs[a], seqs[b] = seqs[b], seqs[a] })
		if got := run(seqs, mod); got != want {
			t.Fatalf("order %v (mod %d): %d lost, want %d", seqs, mod, got, want)
		}
	}
}
