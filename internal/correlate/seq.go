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
// on its number alone: hashes keeps, for each number of the counter, the
// fingerprint (CRC-32C) of the last datagram seen with it, and a packet
// is a duplicate only when its bytes are those seen with its number. A
// number seen in the last w positions (the reorder window) with other
// bytes is applied (seqCollision); one seen further back is applied as
// stale.
//
// The fingerprints cover the whole counter, not only the window: after a
// restore from a checkpoint, the broker redelivers what was applied and
// checkpointed but not yet acknowledged, up to seconds of a server's
// packets, far more than the window (or the horizon) behind. Each of them
// still has its fingerprint under its number, so it is recognised and not
// applied twice, whichever way its distance reads: behind, or (more than
// the horizon back) seemingly ahead, up to M-1 numbers back. The packet
// expected next, the normal case, is never compared with the fingerprint
// of the number's previous turn: only one after a jump is (rare outside a
// redelivery or loss), so a genuine packet is dropped only if its CRC
// matches the one the same number had a whole turn earlier (1 in 2^32),
// and only after a jump.
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
	hashes []uint32 // by number (len M): fingerprint of the last datagram seen with it; 0 none
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
// the horizon unfilled). w is the reorder window.
func (t *seqTracker) observe(s uint16, mod uint16, w uint8, h uint32) (seqResult, uint64) {
	if !t.init || len(t.hashes) != int(mod) {
		t.reset(s, mod, h)
		return seqNew, 0
	}
	hz := horizon(mod)
	d := (s + mod - t.next) % mod
	same := h != 0 && t.hashes[s] == h
	if d < mod-mod/4 {
		if same && d > 0 {
			// Seen already, more than the horizon back (a redelivery);
			// not the expected next number, which is never compared.
			return seqDuplicate, 0
		}
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
		for i := t.next; i != s; i = (i + 1) % mod { // the skipped positions
			t.hashes[i] = 0
		}
		t.hashes[s] = h
		t.next = (s + 1) % mod
		return seqNew, lost
	}
	b := mod - d // behind by b >= 1
	if same {
		return seqDuplicate, 0
	}
	if b > uint16(hz) {
		return seqStale, 0
	}
	bit := uint64(1) << (b - 1)
	if t.seen&bit != 0 {
		if b > uint16(w) {
			return seqStale, 0 // too old to tell a collision: applied
		}
		t.hashes[s] = h
		return seqCollision, 0
	}
	if t.known&bit == 0 {
		// Older than the earliest packet seen: the stream reaches back to
		// it, and the positions in between are holes until they come.
		t.known |= mask(uint8(b))
	}
	t.seen |= bit
	t.hashes[s] = h
	return seqReordered, 0
}

// reset starts the window at number s (the first packet seen).
func (t *seqTracker) reset(s, mod uint16, h uint32) {
	t.init = true
	t.next = (s + 1) % mod
	t.seen, t.known = 1, 1
	if len(t.hashes) != int(mod) {
		t.hashes = make([]uint32, mod)
	} else {
		clear(t.hashes)
	}
	t.hashes[s] = h
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
