package correlate

import "math/bits"

// Domain is a pseq counter domain (§7.4): packets of one domain share one
// sequence counter on the server, so gaps are only meaningful within it.
type Domain uint8

// The counter domains.
const (
	DomainMain Domain = iota // = d i T u U t r of an xrootd server
	DomainF                  // f-stream
	DomainG                  // g-stream, one counter per provider
	DomainFRM                // = p x of an FRM daemon
	NumDomains
)

var domainNames = [NumDomains]string{"main", "fstream", "gstream", "frm"}

// String returns the domain's metric label value.
func (d Domain) String() string {
	if d < NumDomains {
		return domainNames[d]
	}
	return "invalid"
}

// seqResult is what one sequence number tells.
type seqResult uint8

const (
	seqNew       seqResult = iota // first packet, in order, or after a gap
	seqReordered                  // late, but within the window: fills a hole
	seqDuplicate                  // seen before (within the window)
	seqStale                      // behind the window: too old to tell
)

// seqTracker detects loss in one 8-bit (or, for text g-streams, 0..999)
// sequence counter with a sliding window. Bit i of seen says whether
// sequence next-1-i arrived. A sequence number that is skipped is counted
// lost only when it falls out of the window unfilled, so packets reordered
// by less than the window are not loss, and a late arrival within the
// window fills its hole.
//
// With modulus M and window W, a number s relative to the expected next n
// is "ahead" (in order, or after a gap) when (s-n) mod M < M - M/4, and
// "behind" otherwise; behind by at most W it is a duplicate or a late
// arrival, further behind it is stale (already counted lost, or a
// duplicate too old to recognise). So up to M - M/4 - 1 (191 for 8 bits)
// consecutive lost packets are counted exactly.
type seqTracker struct {
	seen uint64
	next uint16
	init bool
}

// observe records sequence s and returns its classification and the number
// of packets that became lost (fell out of the window unfilled).
func (t *seqTracker) observe(s uint16, mod uint16, w uint8) (seqResult, uint64) {
	if !t.init {
		t.init = true
		t.next = (s + 1) % mod
		t.seen = mask(w) // nothing before the first packet is loss
		return seqNew, 0
	}
	d := (s + mod - t.next) % mod
	if d < mod-mod/4 {
		k := uint64(d) + 1
		var lost uint64
		if k >= uint64(w) {
			lost = uint64(w) - uint64(bits.OnesCount64(t.seen&mask(w))) + k - uint64(w)
			t.seen = 1
		} else {
			out := (t.seen >> (uint64(w) - k)) & mask(uint8(k))
			lost = k - uint64(bits.OnesCount64(out))
			t.seen = (t.seen<<k | 1) & mask(w)
		}
		t.next = (s + 1) % mod
		return seqNew, lost
	}
	b := mod - d // behind by b >= 1
	if b > uint16(w) {
		return seqStale, 0
	}
	bit := uint64(1) << (b - 1)
	if t.seen&bit != 0 {
		return seqDuplicate, 0
	}
	t.seen |= bit
	return seqReordered, 0
}

// holes returns the number of unfilled positions in the window: packets
// known to be missing (a later one arrived) that could still arrive late.
// At the end of a stream they are counted lost.
func (t *seqTracker) holes(w uint8) uint64 {
	if !t.init {
		return 0
	}
	return uint64(w) - uint64(bits.OnesCount64(t.seen&mask(w)))
}

func mask(w uint8) uint64 {
	if w >= 64 {
		return ^uint64(0)
	}
	return 1<<w - 1
}
