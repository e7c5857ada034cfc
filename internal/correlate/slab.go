package correlate

// slab is a table of the shard (its files, sessions and traces), its
// items addressed by int32 and kept in chunks of slabChunk: it grows
// without copying what it holds (at 25,000 logins a second a shard holds
// hundreds of thousands of sessions; doubling an array of them copies
// tens of megabytes and keeps the old array until the next collection),
// and holds at most one chunk more than it has ever used at once. Freed
// slots are given out again first.
type slab[T any] struct {
	chunks []*[slabChunk]T
	n      int32   // slots given out, freed ones included
	free   []int32 // freed slots, the last freed given out first
}

const (
	slabShift = 10
	slabChunk = 1 << slabShift
)

// at returns slot i.
func (s *slab[T]) at(i int32) *T { return &s.chunks[uint32(i)>>slabShift][uint32(i)%slabChunk] }

// len returns the number of slots given out, freed ones included: every
// i < len is a valid slot.
func (s *slab[T]) len() int { return int(s.n) }

// alloc returns a slot for a new item, zero unless it was freed (the
// caller sets it).
func (s *slab[T]) alloc() int32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return i
	}
	if int(s.n) == len(s.chunks)*slabChunk {
		s.chunks = append(s.chunks, new([slabChunk]T))
	}
	s.n++
	return s.n - 1
}

// release makes slot i free to be given out again.
func (s *slab[T]) release(i int32) { s.free = append(s.free, i) }

// reset empties s and gives out n zero slots, 0 to n-1.
func (s *slab[T]) reset(n int) {
	*s = slab[T]{}
	for range (n + slabChunk - 1) / slabChunk {
		s.chunks = append(s.chunks, new([slabChunk]T))
	}
	s.n = int32(n)
}
