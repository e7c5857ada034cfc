package correlate

import (
	"bytes"
	"testing"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
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

// TestLoginAllocs: the login of a new session, with a userid text the
// index does not hold, and its token cost no allocation in steady state:
// the text is kept as its parts, and the login payload's and the token's
// parsed forms and names are shared.
func TestLoginAllocs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSessions = 64
	s := NewShard(cfg)
	sv := newSrv("192.0.2.41:1094", t0, 1)
	s.Handle(sv.ident("SITE"), sv.addr, at(0))
	logins := make([][]byte, 0, 256) // twice the sessions kept: each login is a new session
	seq := sv.mainSeq
	for i := range 128 {
		uid := sv.uid("xroot", "cmsuser", 1000+i, "wn1.example.org")
		logins = append(logins, sv.login(uint32(i+1), uid, gsiLogin), sv.token(uint32(1000+i), uid, packet.Token{
			UserDictID: uint32(i + 1), Subject: []byte("a1b2-c3d4"), Name: []byte("cmsuser"), Org: []byte("cms"),
			Role: []byte("production"), Groups: []byte("/cms")}))
	}
	sv.mainSeq = seq
	cycle := func() {
		for _, p := range logins {
			p[1] = sv.mainSeq
			sv.mainSeq++
			s.Handle(p, sv.addr, at(1))
		}
	}
	for range 3 {
		cycle()
	}
	if n := testing.AllocsPerRun(50, cycle); n != 0 {
		t.Errorf("allocations per %d logins and tokens: %v", len(logins)/2, n)
	}
	if st := s.Stats(); st.TotalLost() != 0 || st.Duplicates != 0 {
		t.Errorf("stats: %+v", st)
	}
	j, ok := s.sessionOfText(s.incList[0], sv.uid("xroot", "cmsuser", 1000+127, "wn1.example.org"))
	if !ok || s.sess.at(j).dictID != 128 {
		t.Fatalf("the last login's text: session %d, %v", j, ok)
	}
	k, _ := s.sessionOfText(s.incList[0], sv.uid("xroot", "cmsuser", 1000+126, "wn1.example.org"))
	tj, tk := s.sess.at(j).token, s.sess.at(k).token
	if tj == nil || tj != tk || tj.subject != "a1b2-c3d4" || tj.groups != "/cms" {
		t.Errorf("two sessions' tokens: %+v and %+v, want one shared", tj, tk)
	}
}

// TestGStreamAllocs: g-stream packets of a known server cost no
// allocation per packet or per line in steady state: the events' ids and
// raw lines are written into the shard's arena (one allocation per
// arenaChunk bytes).
func TestGStreamAllocs(t *testing.T) {
	s := NewShard(DefaultConfig())
	sv := newSrv("192.0.2.42:1094", t0, 1)
	s.Handle(sv.ident("SITE"), sv.addr, at(0))
	line := `{"event":"file_close","lfn":"/store/data/f.root","size":1048576,"blk_size":1048576,"n_blks":1,"n_blks_done":1,"access_cnt":1,"attach_t":1750000000,"detach_t":1750000010,"remotes":[],"b_hit":0,"b_miss":1048576,"b_bypass":0}`
	p := sv.g('C', 0, 1, line, line, line, line)
	seq := byte(2)
	var o Output
	const packets = 64
	cycle := func() {
		for range packets {
			p[1] = seq
			seq++
			s.Handle(p, sv.addr, at(1))
		}
		o.Events = o.Events[:0]
		s.Drain(&o)
		if len(o.Events) != 4*packets {
			t.Fatalf("%d events, want %d", len(o.Events), 4*packets)
		}
	}
	for range 3 {
		cycle()
	}
	// 256 events of about 250 bytes (id and line): four chunks.
	if n := testing.AllocsPerRun(50, cycle); n > 5 {
		t.Errorf("%v allocations per %d g-stream packets of 4 lines", n, packets)
	}
	e := o.Events[len(o.Events)-1]
	want := record.EventID(e.ServerIP, e.ServerStod, e.ServerID, 'C', seq-1, t0+1, 3, []byte(line))
	if string(e.Raw) != line || e.EventID != want || cap(e.Raw) != len(e.Raw) {
		t.Errorf("event: id %q (want %q), raw %q (cap %d)", e.EventID, want, e.Raw, cap(e.Raw))
	}
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
		u := packetUserID(uid)
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

func packetUserID(uid []byte) packet.UserID { return packet.ParseUserID(uid, true) }
