package correlate

import (
	"bytes"
	"testing"

	"github.com/xrdmon/xrdmon/internal/packet"
)

// TestUserText: a session keeps its userid text as its parts when they
// spell it exactly, and as a string otherwise; either way the text is
// found again, byte for byte, through the byText index and after a
// snapshot.
func TestUserText(t *testing.T) {
	cases := []struct {
		text string
		raw  bool // kept as a string
	}{
		{"xroot/cmsuser.12345:678@wn1.example.org", false},
		{"https/u.0:0@[2001:db8::1]", false},
		{"user.1:2@host", false}, // no prot
		{"xroot/user.007:2@host", true},
		{"xroot/user.7:0002@host", true},
		{"xroot/user.7:12345678901234567890@host", true}, // 20 digits
		{"/user.1:2@host", true},                         // empty prot
		{"xroot/rawlinkid", true},                        // not user.pid:sid@host
		{"xroot/a.b.1:2@h", true},                        // user up to the first '.'
		{"xroot/user.1:2@h@x", false},                    // the host is the rest
	}
	s := NewShard(DefaultConfig())
	sv := newSrv("192.0.2.40:1094", t0, 1)
	for i, c := range cases {
		s.Handle(sv.login(uint32(i+1), []byte(c.text), gsiLogin), sv.addr, at(0))
	}
	check := func(s *Shard, when string) {
		t.Helper()
		for i, c := range cases {
			var j int32
			ok := false
			for _, inc := range s.incList { // the text's sid picks the incarnation
				if j, ok = s.sessionOfText(inc, []byte(c.text)); ok {
					break
				}
			}
			if !ok {
				t.Errorf("%s: %q: no session", when, c.text)
				continue
			}
			ss := s.sess.at(j)
			if ss.dictID != uint32(i+1) {
				t.Errorf("%s: %q: session %d, want %d", when, c.text, ss.dictID, i+1)
			}
			if got := appendText(nil, ss); string(got) != c.text {
				t.Errorf("%s: text %q, want %q", when, got, c.text)
			}
			if (ss.textRaw != "") != c.raw {
				t.Errorf("%s: %q kept as a string: %v, want %v", when, c.text, ss.textRaw != "", c.raw)
			}
			if _, ok := s.sessionOfText(s.incOf(ss.inc), []byte(c.text+"x")); ok {
				t.Errorf("%s: %q+x found a session", when, c.text)
			}
		}
	}
	check(s, "live")
	var b bytes.Buffer
	if err := s.Snapshot(&b); err != nil {
		t.Fatal(err)
	}
	r, err := RestoreShard(DefaultConfig(), &b)
	if err != nil {
		t.Fatal(err)
	}
	check(r, "restored")
}

// FuzzSameText: a session whose userid text is text (kept as its parts or
// as a string) matches other exactly when other is text.
func FuzzSameText(f *testing.F) {
	for _, c := range [][2]string{
		{"xroot/cmsuser.12345:678@wn1.example.org", "xroot/cmsuser.12345:0678@wn1.example.org"},
		{"xroot/u.1:2@h", "xroot/u.1:2@h@"},
		{"u.1:2@h", "/u.1:2@h"},
		{"xroot/u.0:0@h", "xroot/u.00:0@h"},
		{"xroot/u.18446744073709551615:1@h", "xroot/u.18446744073709551615:1@h"},
		{"https/u.1:2@[::1]", "https/u.1:2@[::1"},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, text, other string) {
		if text == "" {
			return
		}
		s := NewShard(DefaultConfig())
		var ss session
		uid := []byte(text)
		u := packet.ParseUserID(uid, true)
		ss.prot, ss.user, ss.host = s.names.bytes(u.Prot), s.names.bytes(u.User), s.names.bytes(u.Host)
		s.setText(&ss, uid, u)
		if got := string(appendText(nil, &ss)); got != text {
			t.Fatalf("text %q kept as %q", text, got)
		}
		if got := sameText(&ss, []byte(other)); got != (other == text) {
			t.Fatalf("text %q (raw %v): sameText(%q) = %v", text, ss.textRaw != "", other, got)
		}
		if !sameText(&ss, uid) {
			t.Fatalf("text %q does not match itself", text)
		}
	})
}
