package packet

import (
	"testing"
)

func TestParseUserID(t *testing.T) {
	f := func(in string, hasProt bool, want UserID) {
		t.Helper()
		got := ParseUserID([]byte(in), hasProt)
		if !same(got, want) {
			t.Errorf("ParseUserID(%q, %v) =\n%+v, want\n%+v", in, hasProt, got, want)
		}
	}
	b := func(s string) []byte { return []byte(s) }
	f("xroot/cmsplt01.2705723:202129656347755@b9p20p7281.cern.ch", true,
		UserID{Prot: b("xroot"), User: b("cmsplt01"), PID: b("2705723"), SID: b("202129656347755"), Host: b("b9p20p7281.cern.ch")})
	// IPv6 host in brackets: the colons after '@' belong to the host.
	f("https/unknown.324183:258305997245184@[::198.124.239.10]", true,
		UserID{Prot: b("https"), User: b("unknown"), PID: b("324183"), SID: b("258305997245184"), Host: b("[::198.124.239.10]")})
	f("xroot/u.1:2@[2001:db8::1]", true, UserID{Prot: b("xroot"), User: b("u"), PID: b("1"), SID: b("2"), Host: b("[2001:db8::1]")})
	// Raw link id fallback: no '.', no ':' or no '@' after the user.
	f("xroot/rawlinkid", true, UserID{Prot: b("xroot"), User: b("rawlinkid"), Raw: true})
	f("xroot/a.b", true, UserID{Prot: b("xroot"), User: b("a.b"), Raw: true})
	f("xroot/a.b:c", true, UserID{Prot: b("xroot"), User: b("a.b:c"), Raw: true})
	f("http/", true, UserID{Prot: b("http"), User: b(""), Raw: true})
	// FRM: no prot; a '/' is then part of the user.
	f("stage.9:258305997245185@client.example", false, UserID{User: b("stage"), PID: b("9"), SID: b("258305997245185"), Host: b("client.example")})
	f("a/b.1:2@h", false, UserID{User: b("a/b"), PID: b("1"), SID: b("2"), Host: b("h")})
	f("frm_purged:258305997245185@localhost", false, UserID{User: b("frm_purged:258305997245185@localhost"), Raw: true})
	// Server ident: prot "=".
	f("=/xrootd.1234:258305997245184@srv", true, UserID{Prot: b("="), User: b("xrootd"), PID: b("1234"), SID: b("258305997245184"), Host: b("srv")})
	// The producer's split points: user to the first '.', pid to the next
	// ':', sid to the next '@'; the rest (even with '@') is the host.
	f("xroot/first.last.7:2@h@x", true, UserID{Prot: b("xroot"), User: b("first"), PID: b("last.7"), SID: b("2"), Host: b("h@x")})
	f("xroot/.:@", true, UserID{Prot: b("xroot"), User: b(""), PID: b(""), SID: b(""), Host: b("")})
	f("u.1:2@h", true, UserID{User: b("u"), PID: b("1"), SID: b("2"), Host: b("h")})

	if v, ok := ParseUserID([]byte("xroot/u.1:258305997245184@h"), true).SIDValue(); !ok || v != 258305997245184 {
		t.Errorf("SIDValue = %d, %v", v, ok)
	}
	if _, ok := ParseUserID([]byte("xroot/u.1:12x@h"), true).SIDValue(); ok {
		t.Error("SIDValue accepted 12x")
	}
	// AppendUserID is the inverse.
	for _, s := range []string{"xroot/u.1:2@[::1]", "xroot/rawid", "stage.9:1@c"} {
		hasProt := s != "stage.9:1@c"
		if got := string(AppendUserID(nil, ParseUserID([]byte(s), hasProt))); got != s {
			t.Errorf("AppendUserID(ParseUserID(%q)) = %q", s, got)
		}
	}
}

func TestKV(t *testing.T) {
	f := func(in string, want ...string) {
		t.Helper()
		var got []string
		kv := KV([]byte(in))
		for kv.Next() {
			got = append(got, string(kv.Key), string(kv.Value))
		}
		if !same(got, want) {
			t.Errorf("KV(%q) = %q, want %q", in, got, want)
		}
	}
	f("")
	f("&")
	f("&&a=1&&", "a", "1")
	f("&I=6&I=6", "I", "6", "I", "6")                                                         // repeated keys
	f("&n=&o=&r=", "n", "", "o", "", "r", "")                                                 // empty values
	f("&n=/DC=org/CN=a=b&h=[::ffff:1.2.3.4]", "n", "/DC=org/CN=a=b", "h", "[::ffff:1.2.3.4]") // '=' and ':' in values
	f("&o=https://osdf.igwn.org/cit", "o", "https://osdf.igwn.org/cit")
	f("&g=/cms /cms/uscms", "g", "/cms /cms/uscms") // spaces
	f("&flag&=v", "flag", "", "", "v")              // no '=', empty key
	f("a=1", "a", "1")                              // no leading '&'

	// ParseLogin keeps the last of repeated keys; unknown and long keys are
	// ignored; &I= must be 4 or 6.
	l := ParseLogin([]byte("&p=gsi&I=4&I=6&zz=1&Q=2"))
	if string(l.AuthProt) != "gsi" || !l.HasAuth || l.IPv != 6 {
		t.Errorf("ParseLogin: %+v", l)
	}
	if l := ParseLogin([]byte("&I=5&R=v5")); l.IPv != 0 || l.HasAuth || string(l.Release) != "v5" {
		t.Errorf("ParseLogin with I=5: %+v", l)
	}
	// A bridged login may have nothing after the newline.
	m, err := DecodeMap(mapPkt(CodeUser, 3, "https/u.1:2@h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if u, p := m.Split(); string(u) != "https/u.1:2@h" || len(p) != 0 || !same(ParseLogin(p), Login{}) {
		t.Errorf("empty login payload: %q %q", u, p)
	}
	// x records have two newlines: only the first separates the user id.
	m, err = DecodeMap(mapPkt(CodeXfer, 0, "u.1:2@h\n/f\n&tod=5&op=1"))
	if err != nil {
		t.Fatal(err)
	}
	u, p := m.Split()
	x, err := ParseFRMXfer(p)
	if err != nil || string(u) != "u.1:2@h" || string(x.LFN) != "/f" || x.Tod != 5 || x.Op != XferCopyIn {
		t.Errorf("x record: %q %+v %v", u, x, err)
	}
}

func TestParseNumbers(t *testing.T) {
	for _, tc := range []struct {
		in string
		v  uint64
		ok bool
	}{{"0", 0, true}, {"18446744073709551615", 1<<64 - 1, true}, {"18446744073709551616", 0, false}, {"", 0, false}, {"1a", 0, false}, {"+1", 0, false}} {
		if v, ok := parseUint([]byte(tc.in)); v != tc.v || ok != tc.ok {
			t.Errorf("parseUint(%q) = %d, %v", tc.in, v, ok)
		}
	}
	for _, tc := range []struct {
		in string
		v  int64
		ok bool
	}{{"-9223372036854775808", -1 << 63, true}, {"9223372036854775807", 1<<63 - 1, true}, {"9223372036854775808", 0, false}, {"+5", 5, true}, {"-", 0, false}} {
		if v, ok := parseInt([]byte(tc.in)); v != tc.v || ok != tc.ok {
			t.Errorf("parseInt(%q) = %d, %v", tc.in, v, ok)
		}
	}
}
