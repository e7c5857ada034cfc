package correlate

import "testing"

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
		"gap out of window":            {append([]uint16{1, 4}, seqRange(5, 30)...), 256, 16, want{lost: 2}},
		"late fill of a gap":           {append([]uint16{1, 4}, append(seqRange(5, 10), 2, 3)...), 256, 16, want{reord: 2}},
		"big gap":                      {[]uint16{10, 110}, 256, 16, want{lost: 84, holes: 15}},
		"big gap across wrap":          {[]uint16{250, 20}, 256, 16, want{lost: 10, holes: 15}},
		"too late":                     {append(seqRange(0, 40), 5), 256, 16, want{stale: 1}},
		"window 1 swap is loss?":       {[]uint16{1, 3, 2}, 256, 1, want{lost: 1, stale: 1}},
		"text stream mod 1000":         {[]uint16{998, 999, 0, 2}, 1000, 16, want{holes: 1}},
		"jump back 40 is stale":        {[]uint16{100, 101, 62}, 256, 16, want{stale: 1}},
		"jump back 101 reads as a gap": {[]uint16{100, 101, 1}, 256, 16, want{lost: 140, holes: 15}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var tr seqTracker
			var got want
			for _, s := range c.seqs {
				res, lost := tr.observe(s, c.mod, c.w)
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
			got.holes = tr.holes(c.w)
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
