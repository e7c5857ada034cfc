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
	seqDuplicate                  // the same datagram again (same number, same content)
	seqCollision                  // a number seen in the window, but other content
	seqStale                      // behind the window: too old to tell
)

// seqTracker detects loss and duplicates in one 8-bit (or, for text
// g-streams, 0..999) sequence counter with a sliding window of w numbers.
// Bit i of seen says whether number next-1-i arrived, bit i of known
// whether that position belongs to the stream as far as the tracker knows
// (it is not before the first packet seen). A number that is skipped is
// counted lost only when it falls out of the window unfilled, so packets
// reordered by less than the window are not loss, and a late arrival
// within the window fills its hole. Positions before the first packet are
// not known: a packet arriving there later is applied as reordered, and
// if it never comes it is not loss (the tracker cannot tell).
//
// A sequence number is not an identity: it wraps, restarts with the
// server, and a bus interleaves and delays packets. So nothing is dropped
// on its number alone: hashes keeps a fingerprint (CRC-32C) of the
// datagram of each position, and a packet whose number was seen is a
// duplicate only when its bytes are the same; otherwise it is applied
// (seqCollision).
//
// With modulus M and window W, a number s relative to the expected next n
// is "ahead" (in order, or after a gap) when (s-n) mod M < M - M/4, and
// "behind" otherwise; behind by at most W it is a duplicate or a late
// arrival, further behind it is stale (applied: a duplicate that old cannot
// be told from a packet late past the window, which was counted lost). So
// up to M - M/4 - 1 (191 for 8 bits) consecutive lost packets are counted
// exactly.
type seqTracker struct {
	seen   uint64
	known  uint64
	next   uint16
	init   bool
	head   uint8    // hashes index of position next-1
	hashes []uint32 // ring of w fingerprints; position next-1-i at (head-i) mod w
}

// observe records number s of a datagram with fingerprint h and returns its
// classification and the number of packets that became lost (fell out of
// the window unfilled).
func (t *seqTracker) observe(s uint16, mod uint16, w uint8, h uint32) (seqResult, uint64) {
	if !t.init || len(t.hashes) != int(w) {
		t.reset(s, mod, w, h)
		return seqNew, 0
	}
	d := (s + mod - t.next) % mod
	if d < mod-mod/4 {
		k := uint64(d) + 1
		var lost uint64
		if k >= uint64(w) {
			lost = uint64(bits.OnesCount64(t.known&^t.seen&mask(w))) + k - uint64(w)
			t.seen, t.known = 1, mask(w)
			clear(t.hashes)
		} else {
			lost = uint64(bits.OnesCount64((t.known &^ t.seen) >> (uint64(w) - k) & mask(uint8(k))))
			t.seen = (t.seen<<k | 1) & mask(w)
			t.known = (t.known<<k | mask(uint8(k))) & mask(w)
			for i := uint64(1); i < k; i++ { // the skipped positions
				t.hashes[(uint64(t.head)+i)%uint64(w)] = 0
			}
		}
		t.head = uint8((uint64(t.head) + k) % uint64(w))
		t.hashes[t.head] = h
		t.next = (s + 1) % mod
		return seqNew, lost
	}
	b := mod - d // behind by b >= 1
	if b > uint16(w) {
		return seqStale, 0
	}
	bit := uint64(1) << (b - 1)
	slot := (int(t.head) - int(b-1) + int(w)) % int(w)
	if t.seen&bit != 0 {
		if t.hashes[slot] == h {
			return seqDuplicate, 0
		}
		t.hashes[slot] = h
		return seqCollision, 0
	}
	t.seen |= bit
	t.known |= bit
	t.hashes[slot] = h
	return seqReordered, 0
}

// reset starts the window at number s (the first packet seen).
func (t *seqTracker) reset(s, mod uint16, w uint8, h uint32) {
	t.init = true
	t.next = (s + 1) % mod
	t.seen, t.known = 1, 1
	if len(t.hashes) != int(w) {
		t.hashes = make([]uint32, w)
	} else {
		clear(t.hashes)
	}
	t.head = 0
	t.hashes[0] = h
}

// holes returns the number of unfilled positions in the window: packets
// known to be missing (a later one arrived) that could still arrive late.
// At the end of a stream they are counted lost.
func (t *seqTracker) holes(w uint8) uint64 {
	if !t.init {
		return 0
	}
	return uint64(bits.OnesCount64(t.known &^ t.seen & mask(w)))
}

func mask(w uint8) uint64 {
	if w >= 64 {
		return ^uint64(0)
	}
	return 1<<w - 1
}
