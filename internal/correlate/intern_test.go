package correlate

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

func TestInternerShares(t *testing.T) {
	in := newInterner(1024, 1<<20)
	a := in.bytes([]byte("https"))
	b := in.bytes([]byte("https"))
	if a != "https" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("a repeated text is not shared: %q %p, %q %p", a, unsafe.StringData(a), b, unsafe.StringData(b))
	}
	if c := in.str("https"); unsafe.StringData(c) != unsafe.StringData(a) {
		t.Error("str does not return the text bytes interned")
	}
	if got := in.bytes(nil); got != "" {
		t.Errorf("empty: %q", got)
	}
}

func TestInternerInvalidUTF8(t *testing.T) {
	in := newInterner(1024, 1<<20)
	for range 2 {
		if got := in.bytes([]byte("a\xffb")); got != "a\uFFFDb" {
			t.Fatalf("invalid UTF-8: %q, want %q", got, "a\uFFFDb")
		}
		if got := in.str("c\xfe"); got != "c\uFFFD" {
			t.Fatalf("invalid UTF-8: %q, want %q", got, "c\uFFFD")
		}
	}
}

// A cache of a few slots given many texts forgets, never mixes them up,
// and keeps its bytes bounded.
func TestInternerBounded(t *testing.T) {
	const maxBytes = 512
	in := newInterner(8, maxBytes)
	if len(in.w.slots) != 0 || in.w.sets != 4 {
		t.Fatalf("sets %d, slots %d before use: want 4, none", in.w.sets, len(in.w.slots))
	}
	for round := range 3 {
		for i := range 1000 {
			want := fmt.Sprintf("user-%d-%0*d", i, i%200, 0)
			if got := in.bytes([]byte(want)); got != want {
				t.Fatalf("round %d: %q for %q", round, got, want)
			}
			if in.size > maxBytes {
				t.Fatalf("round %d, text %d: %d bytes held, bound %d", round, i, in.size, maxBytes)
			}
		}
	}
	var held int64
	for _, s := range in.w.slots {
		held += int64(len(s.s))
	}
	if fixed := int64(len(in.w.slots)) * int64(unsafe.Sizeof(internSlot{})); in.size != fixed+held {
		t.Errorf("size %d, want slots %d + texts %d", in.size, fixed, held)
	}
}

func BenchmarkInterner(b *testing.B) {
	in := newInterner(100_000, 100<<20)
	texts := make([][]byte, 4096)
	for i := range texts {
		texts[i] = fmt.Appendf(nil, "/DC=org/DC=cilogon/C=US/O=University/CN=user %d", i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		in.bytes(texts[i%len(texts)])
	}
}

// The login cache returns what it was given for a hash it holds, forgets
// the older of a set, and keeps within its bytes.
func TestLoginCache(t *testing.T) {
	c := newLoginCache(1 << 20)
	if c.get(1) != nil {
		t.Fatal("an empty cache holds a login")
	}
	a, b, d := &loginInfo{dn: "/CN=a"}, &loginInfo{dn: "/CN=b"}, &loginInfo{dn: "/CN=d"}
	same := func(h uint64) uint64 { return h + loginSlots/2 } // the same set
	c.put(7, a)
	c.put(same(7), b)
	if c.get(7) != a || c.get(same(7)) != b {
		t.Fatal("a set does not hold its two logins")
	}
	c.put(same(same(7)), d)
	if c.get(7) != nil || c.get(same(7)) != b || c.get(same(same(7))) != d {
		t.Error("a third login of a set did not push the older out")
	}
	if want := loginCost(b) + loginCost(d); c.size != want {
		t.Errorf("size %d, want %d", c.size, want)
	}
	small := newLoginCache(loginCost(a))
	small.put(1, a)
	small.put(2, b)
	if small.get(1) != a || small.get(2) != nil || small.size > loginCost(a) {
		t.Errorf("over its bytes the cache took a login: size %d", small.size)
	}
}

// The shared tokens are bounded in bytes as well as in number: tokens of
// long, ever new fields (an attacker's) keep them within an eighth of the
// interning budget, counted in InternBytes.
func TestTokensBoundedInBytes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxStateBytes = 8 << 20
	s := NewShard(cfg)
	bound := cfg.budget(shareIntern) / 8
	long := strings.Repeat("x", 4096)
	for i := range 2000 {
		tok := &tokenInfo{subject: fmt.Sprint(i, long), name: long, org: "org"}
		if got := s.shareToken(tok); got != tok {
			t.Fatalf("token %d: a new token was not shared as itself", i)
		}
		if s.tokenBytes > bound {
			t.Fatalf("token %d: %d bytes held, bound %d", i, s.tokenBytes, bound)
		}
	}
	if s.Stats().InternBytes < s.tokenBytes || len(s.tokens) == 0 {
		t.Fatalf("InternBytes %d, tokens %d (%d bytes)", s.Stats().InternBytes, len(s.tokens), s.tokenBytes)
	}
}
