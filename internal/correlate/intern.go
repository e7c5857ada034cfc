package correlate

import (
	"hash/maphash"
	"math/bits"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// twoWay is the array of a two-way set-associative cache: sets of two
// slots chosen by a hash, the newer slot first, allocated at first use.
// The interner and the login cache are two.
type twoWay[T any] struct {
	slots []T
	sets  int // a power of two
}

// newTwoWay returns a cache of entries slots, rounded up to a power of two.
func newTwoWay[T any](entries int) twoWay[T] {
	return twoWay[T]{sets: 1 << bits.Len(uint(max(entries, 2)-1)) / 2}
}

// set returns the two slots of hash h.
func (w *twoWay[T]) set(h uint64) []T {
	if w.slots == nil {
		w.slots = make([]T, 2*w.sets)
	}
	i := 2 * int(h&uint64(w.sets-1))
	return w.slots[i : i+2 : i+2]
}

// slotBytes is the heap bytes of the slots.
func (w *twoWay[T]) slotBytes() int64 {
	var t T
	return int64(2*w.sets) * int64(unsafe.Sizeof(t))
}

// push makes x the newer of set's two, forgetting the older.
func push[T any](set []T, x T) { set[0], set[1] = x, set[0] }

// interner returns one shared string per distinct byte sequence that
// recurs (protocols, user, host and organisation names, paths), so that
// the sessions and files holding them share one copy. It is a cache, not
// a table of every text seen: a two-way set-associative array of strings
// indexed by a hash of the text, the newer of a set's two kept. A lookup
// is a hash and one set, where a map of 100,000 texts missed the CPU's
// cache at every probe and was reset whole when full; a text met once (a
// unique file name, a client's port) takes a slot until two newer texts of
// its set push it out, and is never looked for again. Invalid UTF-8 gets
// U+FFFD and is not cached. Strings handed out stay valid whatever the
// cache forgets.
type interner struct {
	seed     maphash.Seed
	w        twoWay[internSlot]
	size     int64 // estimated heap bytes: slots and the texts they hold
	maxBytes int64 // texts beyond it are handed out, not cached
}

// internSlot is a text the interner holds and its hash: a lookup compares
// the hashes first, so that a miss (a new path, most of them) reads
// neither slot's text, which is cold in memory.
type internSlot struct {
	h uint64
	s string
}

// newInterner returns an interner of entries slots (Config.InternMax,
// rounded up to a power of two) and maxBytes.
func newInterner(entries int, maxBytes int64) interner {
	return interner{seed: maphash.MakeSeed(), w: newTwoWay[internSlot](entries), maxBytes: maxBytes}
}

// set returns the two slots of hash h, counting the slots' bytes when
// they are allocated.
func (in *interner) set(h uint64) []internSlot {
	if in.w.slots == nil {
		in.size += in.w.slotBytes()
	}
	return in.w.set(h)
}

// bytes returns b as a string, shared with the earlier calls that gave the
// same bytes while the cache kept them.
func (in *interner) bytes(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	h := maphash.Bytes(in.seed, b)
	set := in.set(h)
	if set[0].h == h && set[0].s == string(b) {
		return set[0].s
	}
	if set[1].h == h && set[1].s == string(b) {
		return set[1].s
	}
	if !utf8.Valid(b) {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	s := string(b)
	in.put(set, internSlot{h, s})
	return s
}

// str is bytes for a string the caller gives up (a snapshot's).
func (in *interner) str(s string) string {
	if s == "" {
		return ""
	}
	h := maphash.String(in.seed, s)
	set := in.set(h)
	if set[0].h == h && set[0].s == s {
		return set[0].s
	}
	if set[1].h == h && set[1].s == s {
		return set[1].s
	}
	if !utf8.ValidString(s) {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	in.put(set, internSlot{h, s})
	return s
}

// put makes x the newer of set's two unless the texts held would pass
// maxBytes.
func (in *interner) put(set []internSlot, x internSlot) {
	grow := int64(len(x.s)) - int64(len(set[1].s))
	if in.size+grow > in.maxBytes {
		return
	}
	in.size += grow
	push(set, x)
}

// loginCache shares the parsed form of a login payload that recurs (a
// user logging in again from the same host with the same client), by a
// hash of the payload (seeded per shard, so that no sender can aim at a
// collision; an accidental one among the slots has a chance of about 1
// in 10^15): a payload is kept in no copy of its own. Like the
// interner it is a two-way set-associative cache, and a small one: the
// logins it holds stay in memory after their sessions are gone, and where
// nearly every payload is new (at 25,000 logins a second, a map of
// 100,000 reset when full held 18 MB of them for nothing) it holds
// loginSlots of them, 2.9 MB, at the most.
type loginCache struct {
	seed     maphash.Seed
	w        twoWay[loginSlot]
	size     int64 // loginCost of the logins held
	maxBytes int64 // logins beyond it are not cached
}

type loginSlot struct {
	h    uint64
	li   *loginInfo
	cost int64 // loginCost(li), kept so that evicting li does not read it
}

// loginSlots is the number of the login cache's slots.
const loginSlots = 1 << 14

func newLoginCache(maxBytes int64) loginCache {
	return loginCache{seed: maphash.MakeSeed(), w: newTwoWay[loginSlot](loginSlots), maxBytes: maxBytes}
}

// hash returns the key of payload.
func (c *loginCache) hash(payload []byte) uint64 { return maphash.Bytes(c.seed, payload) }

// get returns the login of hash h, nil when the cache does not hold it.
func (c *loginCache) get(h uint64) *loginInfo {
	set := c.w.set(h)
	switch {
	case set[0].li != nil && set[0].h == h:
		return set[0].li
	case set[1].li != nil && set[1].h == h:
		return set[1].li
	}
	return nil
}

// put makes li the newer login of h's set, forgetting the older, unless
// the logins held would pass maxBytes.
func (c *loginCache) put(h uint64, li *loginInfo) {
	set := c.w.set(h)
	cost := loginCost(li)
	grow := cost - set[1].cost
	if c.size+grow > c.maxBytes {
		return
	}
	c.size += grow
	push(set, loginSlot{h, li, cost})
}
