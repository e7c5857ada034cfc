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
// g-streams, 0..999) sequence counter. Bit i of seen says whether number
// next-1-i arrived, bit i of known whether that position belongs to the
// stream as far as the tracker knows (it is not before the earliest packet
// seen), for the last seqHorizon (64) positions. A number that is skipped
// is a hole; it is counted lost only when it falls out of the horizon
// unfilled (or when the stream ends), so a packet that arrives up to 64
// positions late fills its hole and is not loss.
//
// Loss does not depend on the order in which the packets of the horizon
// arrive: a packet older than the earliest one seen so far extends the
// stream back to it, and the positions between them that have not arrived
// become holes, as they would have been had it come first (the real
// capture's Pelican server sends 176 before 125: the 44 numbers missing
// between them are loss either way). Positions before the earliest packet
// ever seen are not known: if they never come they are not loss (the
// tracker cannot tell).
//
// A sequence number is not an identity: it wraps, restarts with the
// server, and a bus interleaves and delays packets. So nothing is dropped
// on its number alone: hashes keeps a fingerprint (CRC-32C) of the
// datagram of each of the last w positions (the reorder window), and a
// packet whose number was seen there is a duplicate only when its bytes
// are the same; otherwise it is applied (seqCollision). A number seen
// further back than w cannot be compared and is applied as stale.
//
// With modulus M, a number s relative to the expected next n is "ahead"
// (in order, or after a gap) when (s-n) mod M < M - M/4, and "behind"
// otherwise; behind by at most the horizon it is a duplicate or a late
// arrival, further behind it is stale (applied: counted lost when its
// position left the horizon). So up to M - M/4 - 1 (191 for 8 bits)
// consecutive lost packets are counted exactly.
type seqTracker struct {
	seen   uint64
	known  uint64
	next   uint16
	init   bool
	head   uint8    // hashes index of position next-1
	hashes []uint32 // ring of w fingerprints; position next-1-i at (head-i) mod w
}

// seqHorizon is how many positions back a hole waits for its packet: the
// bits of seen and known, and the "behind" range of an 8-bit counter
// (M/4).
const seqHorizon = 64

// horizon is the horizon of a counter of modulus mod: seqHorizon, or M/4
// when that is smaller.
func horizon(mod uint16) uint8 { return uint8(min(uint16(seqHorizon), mod/4)) }

// observe records number s of a datagram with fingerprint h and returns its
// classification and the number of packets that became lost (fell out of
// the horizon unfilled).
func (t *seqTracker) observe(s uint16, mod uint16, w uint8, h uint32) (seqResult, uint64) {
	if !t.init || len(t.hashes) != int(w) {
		t.reset(s, mod, w, h)
		return seqNew, 0
	}
	hz := horizon(mod)
	d := (s + mod - t.next) % mod
	if d < mod-mod/4 {
		k := uint64(d) + 1
		var lost uint64
		if k >= uint64(hz) {
			lost = uint64(bits.OnesCount64(t.known&^t.seen&mask(hz))) + k - uint64(hz)
			t.seen, t.known = 1, mask(hz)
		} else {
			lost = uint64(bits.OnesCount64((t.known &^ t.seen) >> (uint64(hz) - k) & mask(uint8(k))))
			t.seen = (t.seen<<k | 1) & mask(hz)
			t.known = (t.known<<k | mask(uint8(k))) & mask(hz)
		}
		if k >= uint64(w) {
			clear(t.hashes)
		} else {
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
	if b > uint16(hz) {
		return seqStale, 0
	}
	bit := uint64(1) << (b - 1)
	inWin := b <= uint16(w)
	slot := (int(t.head) - int(b-1) + int(w)) % int(w)
	if t.seen&bit != 0 {
		if !inWin {
			return seqStale, 0 // too old to compare: applied
		}
		if t.hashes[slot] == h {
			return seqDuplicate, 0
		}
		t.hashes[slot] = h
		return seqCollision, 0
	}
	if t.known&bit == 0 {
		// Older than the earliest packet seen: the stream reaches back to
		// it, and the positions in between are holes until they come.
		t.known |= mask(uint8(b))
	}
	t.seen |= bit
	if inWin {
		t.hashes[slot] = h
	}
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

// holes returns the number of unfilled positions in the horizon of a
// counter of modulus mod: packets known to be missing (a later one
// arrived) that could still arrive late. At the end of a stream they are
// counted lost.
func (t *seqTracker) holes(mod uint16) uint64 {
	if !t.init {
		return 0
	}
	return uint64(bits.OnesCount64(t.known &^ t.seen & mask(horizon(mod))))
}

func mask(w uint8) uint64 {
	if w >= 64 {
		return ^uint64(0)
	}
	return 1<<w - 1
}
