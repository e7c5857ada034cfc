package rollup

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"

	"github.com/axiomhq/hyperloglog"
	"github.com/cespare/xxhash/v2"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/hashmix"
	"github.com/xrdmon/xrdmon/internal/record"
)

// Agg is the value of one series in one bucket: sums, a distinct-count
// sketch and two distributions, all mergeable, so that a bucket is the
// merge of its parts and an hour could be built from its minutes.
type Agg struct {
	ReadBytes  int64
	ReadvBytes int64
	WriteBytes int64
	// Transfers counts the complete records that ended in the bucket,
	// Partial the partial ones, PartialBy those by reason (in the order of
	// record.Reasons).
	Transfers  int64
	Partial    int64
	PartialBy  [numReasons]int64
	Users      Users
	Duration   Hist      // transfer time, milliseconds
	Size       Hist      // bytes moved per transfer
	DurationMS int64     // transfer time of the records, summed, milliseconds
	_          [0]func() // not comparable
}

// reset empties a, keeping the room of its users and distributions.
func (a *Agg) reset() {
	users, dur, size := a.Users.small[:0], a.Duration.b[:0], a.Size.b[:0]
	*a = Agg{}
	a.Users.small, a.Duration.b, a.Size.b = users, dur, size
}

// clone returns a copy of a that shares nothing with it.
func (a *Agg) clone() *Agg {
	c := &Agg{ReadBytes: a.ReadBytes, ReadvBytes: a.ReadvBytes, WriteBytes: a.WriteBytes, Transfers: a.Transfers,
		Partial: a.Partial, PartialBy: a.PartialBy, DurationMS: a.DurationMS}
	c.Users.small = slices.Clone(a.Users.small)
	if a.Users.hll != nil {
		c.Users.hll = a.Users.hll.Clone()
	}
	c.Duration.b, c.Duration.has = slices.Clone(a.Duration.b), a.Duration.has
	c.Size.b, c.Size.has = slices.Clone(a.Size.b), a.Size.has
	return c
}

// Bytes returns the bytes moved, read (including vector reads) and written.
func (a *Agg) Bytes() int64 { return a.ReadBytes + a.ReadvBytes + a.WriteBytes }

// Merge adds b to a.
func (a *Agg) Merge(b *Agg) {
	a.ReadBytes += b.ReadBytes
	a.ReadvBytes += b.ReadvBytes
	a.WriteBytes += b.WriteBytes
	a.Transfers += b.Transfers
	a.Partial += b.Partial
	a.DurationMS += b.DurationMS
	for i := range a.PartialBy {
		a.PartialBy[i] += b.PartialBy[i]
	}
	a.Users.Merge(&b.Users)
	a.Duration.Merge(&b.Duration)
	a.Size.Merge(&b.Size)
}

// apply adds d to a and returns the bytes a grew by in memory.
func (a *Agg) apply(d *delta) int64 {
	a.ReadBytes += d.read
	a.ReadvBytes += d.readv
	a.WriteBytes += d.write
	if !d.closed {
		return 0
	}
	if d.reason < 0 {
		a.Transfers++
	} else {
		a.Partial++
		a.PartialBy[d.reason]++
	}
	a.DurationMS += d.ms
	grew := a.Users.add(d.user) + a.Duration.add(d.dur, 1) + a.Size.add(d.size, 1)
	return int64(grew)
}

// size estimates the bytes a holds in memory.
func (a *Agg) size() int {
	return 160 + 4*len(a.Users.small) + 12*(len(a.Duration.b)+len(a.Size.b)) + a.Users.hllBytes()
}

// Users counts distinct identities: exactly up to smallUsers of them, by
// 32-bit hashes (4 KiB at most: a collision among a thousand users has a
// chance of one in 8,000), then with a dense HyperLogLog sketch of
// precision 12 (4 KiB, about 1.6 % standard error). Dense because
// inserting into a sparse sketch costs ten times more, and a series past
// smallUsers distinct users in one bucket is rare. The exact set is as
// large as the sketch: of a busy minute's total (a few hundred users) it
// stores a fraction of a sketch's bytes.
type Users struct {
	small []uint32 // sorted hashes, while at most smallUsers
	hll   *hyperloglog.Sketch
}

const (
	smallUsers   = 1024
	hllPrecision = 12
)

func newSketch() *hyperloglog.Sketch {
	sk, _ := hyperloglog.NewSketch(hllPrecision, false) // a valid precision: cannot fail
	return sk
}

// Add counts the identity with hash h (hashIdentity).
func (u *Users) Add(h uint32) { u.add(h) }

// add counts the identity with hash h and returns the bytes u grew by.
func (u *Users) add(h uint32) int {
	if u.hll != nil {
		u.hll.InsertHash(spread(h))
		return 0
	}
	i, found := searchUsers(u.small, h)
	if found {
		return 0
	}
	if len(u.small) < smallUsers {
		u.small = slices.Insert(u.small, i, h)
		return 4
	}
	u.promote()
	u.hll.InsertHash(spread(h))
	return u.hllBytes() - 4*smallUsers
}

// spread returns a 64-bit hash of the 32-bit hash h for the sketch, whose
// registers take the top bits: the finalizer of MurmurHash3, a bijection.
func spread(h uint32) uint64 {
	return hashmix.Fmix64(uint64(h))
}

// searchUsers is slices.BinarySearch, made for sets of hashes. Short sets
// (most series' sets hold a user or two) are scanned. A longer one is
// entered where h would be if the hashes were evenly spread (they are
// hashes: they nearly are) and scanned from there, a few steps in one or
// two cache lines, where a binary search of a few hundred hashes waits
// for a load from memory at each of its steps; a set whose hashes are not
// spread out (only tests make those) ends in the binary search.
func searchUsers(small []uint32, h uint32) (int, bool) {
	n := len(small)
	if n <= 16 {
		for i, x := range small {
			if x >= h {
				return i, x == h
			}
		}
		return n, false
	}
	i := int(uint64(h) * uint64(n) >> 32)
	for range 32 {
		switch {
		case small[i] < h:
			if i++; i == n || small[i] >= h {
				return i, i < n && small[i] == h
			}
		case i > 0 && small[i-1] >= h:
			i--
		default:
			return i, small[i] == h
		}
	}
	return slices.BinarySearch(small, h)
}

func (u *Users) promote() {
	u.hll = newSketch()
	for _, x := range u.small {
		u.hll.InsertHash(spread(x))
	}
	u.small = nil
}

// Merge adds the identities of v.
func (u *Users) Merge(v *Users) {
	if v.hll != nil {
		if u.hll == nil {
			u.promote()
		}
		_ = u.hll.Merge(v.hll) // same precision: cannot fail
		return
	}
	if u.hll != nil || len(u.small)+len(v.small) > smallUsers && union(u.small, v.small) > smallUsers {
		for _, h := range v.small {
			u.add(h)
		}
		return
	}
	u.small = mergeSorted(u.small, v.small)
}

// union returns the number of distinct hashes of sorted a and b.
func union(a, b []uint32) int {
	n, i, j := 0, 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			i++
		case a[i] > b[j]:
			j++
		default:
			i++
			j++
		}
		n++
	}
	return n + len(a) - i + len(b) - j
}

// mergeSorted returns the union of sorted a and b, in a's array when it
// has room: one pass from the back, where adding them one at a time
// would search and shift a for each.
func mergeSorted(a, b []uint32) []uint32 {
	if len(b) <= fewUsers && len(a) >= 4*len(b) {
		return mergeFew(a, b)
	}
	n := union(a, b)
	if n == len(a) {
		return a
	}
	x := len(a) - 1
	a = slices.Grow(a, n-len(a))[:n]
	for y, k := len(b)-1, n-1; y >= 0; k-- { // a[k] is never one not yet read: k >= x
		switch {
		case x >= 0 && a[x] > b[y]:
			a[k] = a[x]
			x--
		case x >= 0 && a[x] == b[y]:
			a[k] = a[x]
			x--
			y--
		default:
			a[k] = b[y]
			y--
		}
	}
	return a
}

// fewUsers is the most users of a set that mergeSorted merges into a
// set four times its size or more by searching, not by a pass over both:
// a minute's user or two into an hour of hundreds, in a flush of a
// stream whose time runs fast.
const fewUsers = 8

// mergeFew is mergeSorted for a short b: each of b is searched for in a,
// and a's hashes after the first one missing move once, by copy.
func mergeFew(a, b []uint32) []uint32 {
	var at [fewUsers]int // where b[j] goes in a; -1: a has it
	missing := 0
	for j, h := range b {
		i, found := slices.BinarySearch(a, h)
		if found {
			i = -1
		} else {
			missing++
		}
		at[j] = i
	}
	if missing == 0 {
		return a
	}
	end := len(a)
	a = slices.Grow(a, missing)[:len(a)+missing]
	k := len(a) // a[k:] is in place
	for j := len(b) - 1; j >= 0; j-- {
		p := at[j]
		if p < 0 {
			continue
		}
		k -= end - p
		copy(a[k:], a[p:end])
		k--
		a[k] = b[j]
		end = p
	}
	return a
}

// Count returns the number of distinct identities (estimated past
// smallUsers).
func (u *Users) Count() int64 {
	if u.hll != nil {
		return int64(u.hll.Estimate())
	}
	return int64(len(u.small))
}

func (u *Users) hllBytes() int {
	if u.hll == nil {
		return 0
	}
	return 1<<hllPrecision + 64
}

// Hist is a distribution over positive values in logarithmic buckets, four
// per power of two (each bucket spans 19 %), kept sparse: mergeable by
// adding counts, with quantiles within half a bucket (about 9 %).
type Hist struct {
	b []hbucket // by index
	// has marks the indexes below 256 that b holds (every value up to
	// 2^63 has one): a bucket's place in b is the count of marks below
	// its index, found without a search.
	has [4]uint64
}

type hbucket struct {
	i int16
	n int64
}

// histIndex returns v's bucket: 0 holds v <= 1, bucket i > 0 holds
// (2^((i-1)/4), 2^(i/4)].
//
// It is ceil(4·log2 v), found from v's exponent and a comparison of its
// significand with the quarter-octave bounds 2^(1/4), 2^(1/2), 2^(3/4)
// (the logarithm was a few percent of a record's sums). A
// significand within 1e-9 of a bound (1 included, short of an exact power
// of two) takes the logarithm: its rounding, not this comparison, decides
// those, so both ways give every value the same bucket (TestHistIndex).
func histIndex(v float64) int16 {
	if v <= 1 {
		return 0
	}
	frac, exp := math.Frexp(v) // v = frac · 2^exp, frac in [0.5, 1)
	m := 2 * frac              // in [1, 2): v = m · 2^(exp-1)
	i := int16(4 * (exp - 1))
	if m-1 < 1e-9 {
		if m == 1 {
			return i
		}
		return histIndexLog(v)
	}
	for k, bound := range quarterOctave {
		if math.Abs(m-bound) < 1e-9 {
			return histIndexLog(v)
		}
		if m < bound {
			return i + int16(k) + 1
		}
	}
	return i + 4
}

// quarterOctave is 2^(1/4), 2^(2/4), 2^(3/4): the bounds of histIndex's
// buckets within an octave.
var quarterOctave = [3]float64{math.Pow(2, 0.25), math.Sqrt2, math.Pow(2, 0.75)}

// histIndexLog is histIndex by its definition, ceil(4·log2 v) for v > 1.
func histIndexLog(v float64) int16 { return int16(math.Ceil(4 * math.Log2(v))) }

// Observe adds one value.
func (h *Hist) Observe(v float64) { h.add(histIndex(v), 1) }

// add counts n values in bucket i and returns the bytes h grew by.
func (h *Hist) add(i int16, n int64) int {
	if len(h.b) == 0 || h.b[len(h.b)-1].i < i { // in order: decoding, merging
		h.b = append(h.b, hbucket{i, n})
		h.mark(i)
		return 12
	}
	var k int
	if i >= 0 && i < 256 && h.b[0].i >= 0 {
		k = h.place(i)
		if h.has[i>>6]&(1<<(i&63)) != 0 {
			h.b[k].n += n
			return 0
		}
	} else {
		lo, hi := 0, len(h.b) // the first bucket >= i
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if h.b[m].i < i {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if h.b[lo].i == i {
			h.b[lo].n += n
			return 0
		}
		k = lo
	}
	h.b = slices.Insert(h.b, k, hbucket{i, n})
	h.mark(i)
	return 12
}

// mark notes that b holds index i.
func (h *Hist) mark(i int16) {
	if i >= 0 && i < 256 {
		h.has[i>>6] |= 1 << (i & 63)
	}
}

// Merge adds the counts of g.
func (h *Hist) Merge(g *Hist) {
	if len(g.b) == 0 {
		return
	}
	if len(h.b) == 0 {
		h.b = append(h.b, g.b...)
		h.has = g.has
		return
	}
	// When h has every bucket of g (the usual case once a few transfers
	// are in), add in place: with both fully marked, a bucket's place is
	// a count of marks.
	if h.marked() && g.marked() && h.has[0]|g.has[0] == h.has[0] && h.has[1]|g.has[1] == h.has[1] &&
		h.has[2]|g.has[2] == h.has[2] && h.has[3]|g.has[3] == h.has[3] {
		for _, b := range g.b {
			h.b[h.place(b.i)].n += b.n
		}
		return
	}
	// Else merge them, one pass from the back: in place when h has room
	// for the buckets g adds, into a larger slice (room to spare, as
	// append grows) when not.
	n := len(h.b) + len(g.b) // at most
	if h.marked() && g.marked() {
		n = len(h.b)
		for k := range h.has {
			n += bits.OnesCount64(g.has[k] &^ h.has[k])
		}
	}
	out := h.b[:cap(h.b)]
	if cap(h.b) < n {
		out = make([]hbucket, max(n, 2*cap(h.b)))
	}
	x, y, k := len(h.b)-1, len(g.b)-1, n-1
	for y >= 0 { // out[k] is never a bucket of h not yet read: k >= x
		switch {
		case x >= 0 && h.b[x].i > g.b[y].i:
			out[k] = h.b[x]
			x--
		case x >= 0 && h.b[x].i == g.b[y].i:
			out[k] = hbucket{h.b[x].i, h.b[x].n + g.b[y].n}
			x, y = x-1, y-1
		default:
			out[k] = g.b[y]
			y--
		}
		k--
	}
	first := k - x
	copy(out[first:k+1], h.b[:x+1]) // the rest of h (in place: already there unless n was only a bound)
	if first > 0 {
		h.b = append(out[:0], out[first:n]...)
	} else {
		h.b = out[:n]
	}
	for k := range h.has {
		h.has[k] |= g.has[k]
	}
}

// marked reports whether every bucket of h is marked in has (no index
// below 0 or above 255).
func (h *Hist) marked() bool {
	return len(h.b) == bits.OnesCount64(h.has[0])+bits.OnesCount64(h.has[1])+bits.OnesCount64(h.has[2])+bits.OnesCount64(h.has[3])
}

// place returns the position in b of marked index i: the marks below it.
func (h *Hist) place(i int16) int {
	w := int(i >> 6)
	k := bits.OnesCount64(h.has[w] & (1<<(i&63) - 1))
	for _, x := range h.has[:w] {
		k += bits.OnesCount64(x)
	}
	return k
}

// Count returns the number of values observed.
func (h *Hist) Count() int64 {
	var n int64
	for _, b := range h.b {
		n += b.n
	}
	return n
}

// Quantile returns the q-quantile (0 <= q <= 1), the geometric middle of
// its bucket; 0 when empty.
func (h *Hist) Quantile(q float64) float64 {
	total := h.Count()
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	rank = max(rank, 1)
	var seen int64
	for _, b := range h.b {
		if seen += b.n; seen >= rank {
			if b.i == 0 {
				return 1
			}
			return math.Exp2((float64(b.i) - 0.5) / 4)
		}
	}
	return math.Exp2((float64(h.b[len(h.b)-1].i) - 0.5) / 4)
}

// Encoding of an Agg (inside a part, after its series key):
//
//	uvarint  read, readv, write, transfers, partial
//	uvarint  n, then n pairs (reason index, count) of the non-zero PartialBy
//	byte     users kind: 0 exact (uvarint n, n × 4-byte hash), 1 HLL (uvarint len, sketch)
//	hist     duration, size: uvarint n, n × (varint index delta, uvarint count)
//	uvarint  duration sum, milliseconds

func appendAgg(b []byte, a *Agg) []byte {
	for _, v := range []int64{a.ReadBytes, a.ReadvBytes, a.WriteBytes, a.Transfers, a.Partial} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	n := 0
	for _, v := range a.PartialBy {
		if v != 0 {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for i, v := range a.PartialBy {
		if v != 0 {
			b = binary.AppendUvarint(b, uint64(i))
			b = binary.AppendUvarint(b, uint64(v))
		}
	}
	if a.Users.hll != nil {
		b = append(b, 1)
		sk, _ := a.Users.hll.MarshalBinary()
		b = codec.AppendBytes(b, sk)
	} else {
		b = append(b, 0)
		b = binary.AppendUvarint(b, uint64(len(a.Users.small)))
		for _, h := range a.Users.small {
			b = binary.LittleEndian.AppendUint32(b, h)
		}
	}
	b = appendHist(b, &a.Duration)
	b = appendHist(b, &a.Size)
	return binary.AppendUvarint(b, uint64(max(a.DurationMS, 0)))
}

func appendHist(b []byte, h *Hist) []byte {
	b = binary.AppendUvarint(b, uint64(len(h.b)))
	prev := int16(0)
	for _, x := range h.b {
		b = binary.AppendVarint(b, int64(x.i-prev))
		b = binary.AppendUvarint(b, uint64(x.n))
		prev = x.i
	}
	return b
}

// errCorrupt is returned for a part, a state or a key that does not
// decode: the binary cursor's error (codec.ErrCorrupt), so that every
// corrupt thing xrdmon reads is one error.
var errCorrupt = codec.ErrCorrupt

// decoder reads a part on the binary cursor (codec.Dec): after the first
// failure every read returns zero and Err says why.
type decoder struct {
	codec.Dec
}

// sums reads the leading sums of an Agg: bytes and transfers.
func (d *decoder) sums(a *Agg) {
	for _, p := range []*int64{&a.ReadBytes, &a.ReadvBytes, &a.WriteBytes, &a.Transfers, &a.Partial} {
		*p = int64(d.Uvarint())
	}
}

func (d *decoder) agg(a *Agg) {
	d.sums(a)
	for range d.Count(2) {
		i, v := d.Uvarint(), d.Uvarint()
		if i < uint64(len(a.PartialBy)) {
			a.PartialBy[i] = int64(v)
		}
	}
	switch d.Byte() {
	case 0:
		for range d.Count(4) {
			a.Users.small = append(a.Users.small, d.Uint32LE())
		}
		if d.Err() == nil && !slices.IsSorted(a.Users.small) {
			slices.Sort(a.Users.small)
			a.Users.small = slices.Compact(a.Users.small)
		}
	case 1:
		sk := d.UvarintBytes()
		if d.Err() == nil {
			a.Users.hll = newSketch()
			if err := a.Users.hll.UnmarshalBinary(sk); err != nil {
				d.Fail("users sketch: %v", err)
			}
		}
	default:
		d.Fail("unknown users kind")
	}
	d.hist(&a.Duration)
	d.hist(&a.Size)
	a.DurationMS = int64(d.Uvarint())
}

func (d *decoder) hist(h *Hist) {
	n := d.Count(2)
	prev := int64(0)
	for range n {
		prev += d.Varint()
		c := d.Uvarint()
		if d.Err() != nil {
			return
		}
		if prev < math.MinInt16 || prev > math.MaxInt16 {
			d.Fail("histogram index %d", prev)
			return
		}
		h.add(int16(prev), int64(c))
	}
}

// hashIdentity hashes an identity for Users.
func hashIdentity(s string) uint32 { return uint32(xxhash.Sum64String(s)) }

// numReasons is len(record.Reasons): the partial reasons PartialBy counts.
const numReasons = 6

// reasonIndex returns r's index in record.Reasons (-1 for Complete).
func reasonIndex(r record.Reason) int {
	if r == "" { // complete: most records
		return -1
	}
	return slices.Index(record.Reasons, r)
}

// Summary is an Agg as people and programs read it: the sums, the partial
// transfers by reason, the distinct users, and quantiles of the
// distributions.
type Summary struct {
	ReadBytes  int64            `json:"read_bytes"`
	ReadvBytes int64            `json:"readv_bytes"`
	WriteBytes int64            `json:"write_bytes"`
	Transfers  int64            `json:"transfers"`
	Partial    int64            `json:"partial"`
	PartialBy  map[string]int64 `json:"partial_by,omitempty"`
	// DurationMSSum is the transfer time of the records, summed: with the
	// bytes, the mean rate of a transfer.
	DurationMSSum int64     `json:"duration_ms_sum"`
	Users         int64     `json:"users"`
	DurationMS    Quantiles `json:"duration_ms"`
	SizeBytes     Quantiles `json:"size_bytes"`
}

// Quantiles of a distribution (0 when empty).
type Quantiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

func (h *Hist) quantiles() Quantiles {
	return Quantiles{P50: h.Quantile(0.5), P90: h.Quantile(0.9), P99: h.Quantile(0.99)}
}

// Summary returns a's Summary.
func (a *Agg) Summary() Summary {
	s := Summary{
		ReadBytes: a.ReadBytes, ReadvBytes: a.ReadvBytes, WriteBytes: a.WriteBytes,
		Transfers: a.Transfers, Partial: a.Partial, Users: a.Users.Count(), DurationMSSum: a.DurationMS,
		DurationMS: a.Duration.quantiles(), SizeBytes: a.Size.quantiles(),
	}
	for i, n := range a.PartialBy {
		if n != 0 {
			if s.PartialBy == nil {
				s.PartialBy = make(map[string]int64)
			}
			s.PartialBy[string(record.Reasons[i])] = n
		}
	}
	return s
}
