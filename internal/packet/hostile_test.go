package packet

import (
	"errors"
	"testing"
)

// mutate returns a copy of b changed by f.
func mutate(b []byte, f func(b []byte) []byte) []byte {
	return f(append([]byte(nil), b...))
}

// TestHostileInput: each defect is rejected with its exact reason, by
// Validate and by the kind's own Decode function, without panicking.
func TestHostileInput(t *testing.T) {
	fs := fstreamPacket()
	const rec1 = HeaderSize + TimeSize // offset of the first record after isTime
	tr := tracePacket()
	rd := redirPacket()
	gs := gstreamPacket()
	u := mapPkt(CodeUser, 1, "xroot/u.1:2@h\n&I=4")
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		// header
		{"empty datagram", nil, ErrShort},
		{"7 bytes", []byte("u\x01\x00\x07abc"), ErrShort},
		{"plen larger than datagram (truncated)", u[:len(u)-3], ErrLength},
		{"plen smaller than datagram (padding)", append(append([]byte(nil), u...), 0, 0, 0), ErrLength},
		{"plen zero", mutate(u, func(b []byte) []byte { b[2], b[3] = 0, 0; return b }), ErrLength},
		{"unknown code", setPlen([]byte("Zxxxxxxxxxxx")), ErrUnknownCode},
		{"garbage text", []byte("hello world"), ErrUnknownCode},
		// map records
		{"map: header only", setPlen([]byte("u\x01\x00\x00\x00\x00\x00\x01")), ErrShort},
		{"map: 11 bytes", setPlen([]byte("u\x01\x00\x00\x00\x00\x00\x01\x00\x00\x01")), ErrShort},
		{"map: zero-length info", mapPkt(CodeUser, 1, ""), ErrEmptyText},
		{"map: info only NULs", mapPkt(CodePath, 1, "\x00\x00\x00"), ErrEmptyText},
		{"map: non-UTF-8 info", mapPkt(CodeUser, 1, "xroot/\xc3\x28.1:2@h"), ErrNotUTF8},
		{"map: non-UTF-8 path", mapPkt(CodePath, 1, "xroot/u.1:2@h\n/p/\xff"), ErrNotUTF8},
		{"ident: port not a number", mapPkt(CodeIdent, 0, "=/x.1:2@h\n&site=&port=abc"), ErrSyntax},
		{"ident: port out of range", mapPkt(CodeIdent, 0, "=/x.1:2@h\n&port=65536"), ErrSyntax},
		{"token: no Uc", mapPkt(CodeToken, 2, "xroot/u.1:2@h\n&s=sub&n=x"), ErrSyntax},
		{"token: Uc not a number", mapPkt(CodeToken, 2, "xroot/u.1:2@h\n&Uc=12a&s=sub"), ErrSyntax},
		{"token: Uc over 32 bits", mapPkt(CodeToken, 2, "xroot/u.1:2@h\n&Uc=4294967296"), ErrSyntax},
		{"token: no payload", mapPkt(CodeToken, 2, "xroot/u.1:2@h"), ErrSyntax},
		{"ueac: missing Ac", mapPkt(CodeUEAC, 2, "xroot/u.1:2@h\n&Uc=1&Ec=2"), ErrSyntax},
		{"ueac: negative Ec", mapPkt(CodeUEAC, 2, "xroot/u.1:2@h\n&Uc=1&Ec=-2&Ac=1"), ErrSyntax},
		{"purge: one line", mapPkt(CodePurge, 0, "frm_purged:1@localhost"), ErrSyntax},
		{"xfer: one line", mapPkt(CodeXfer, 0, "u.1:2@h"), ErrSyntax},
		{"xfer: op out of range", mapPkt(CodeXfer, 0, "u.1:2@h\n/f\n&tod=1&op=7"), ErrSyntax},
		// f-stream
		{"f: no room for isTime", setPlen(append([]byte(nil), fs[:HeaderSize+8]...)), ErrShort},
		{"f: first record not isTime", mutate(fs, func(b []byte) []byte { b[8] = byte(RecOpen); return b }), ErrRecordType},
		{"f: isTime recSize 20", mutate(fs, func(b []byte) []byte { b[11] = 20; return b }), ErrRecordSize},
		{"f: isTime recSize 24 past end", setPlen(mutate(fs[:HeaderSize+TimeSizeOld], func(b []byte) []byte { b[11] = 24; return b })), ErrRecordSize},
		{"f: recSize 0", mutate(fs, func(b []byte) []byte { b[rec1+2], b[rec1+3] = 0, 0; return b }), ErrRecordSize},
		{"f: recSize 4", mutate(fs, func(b []byte) []byte { b[rec1+2], b[rec1+3] = 0, 4; return b }), ErrRecordSize},
		{"f: recSize past end", mutate(fs, func(b []byte) []byte { b[rec1+2], b[rec1+3] = 0xff, 0xf0; return b }), ErrRecordSize},
		{"f: recSize odd, misaligning the walk", mutate(fs, func(b []byte) []byte { b[rec1+3]++; return b }), ErrRecordSize},
		{"f: trailing partial record header", setPlen(append(append([]byte(nil), fs...), 0, 0, 0)), ErrRecordSize},
		{"f: close shorter than 32", setPlen(append(mutate(fs[:rec1], func(b []byte) []byte { b[rec1-1] = 1; return b }),
			hexb(t, "00 00 0010 00000001 0000000000000001")...)), ErrRecordSize},
		{"f: open with LFN flag shorter than 20", setPlen(append(mutate(fs[:rec1], func(b []byte) []byte { b[rec1-1] = 1; return b }),
			hexb(t, "01 01 0010 00000001 0000000000000001")...)), ErrRecordSize},
		{"f: xfr shorter than 32", setPlen(append(mutate(fs[:rec1], func(b []byte) []byte { b[rec1-1], b[rec1-3] = 1, 1; return b }),
			hexb(t, "03 00 0010 00000001 0000000000000001")...)), ErrRecordSize},
		{"f: nRecs too large", mutate(fs, func(b []byte) []byte { b[HeaderSize+7]++; return b }), ErrRecordCount},
		{"f: nRecs too small", mutate(fs, func(b []byte) []byte { b[HeaderSize+7]--; return b }), ErrRecordCount},
		{"f: nRecs negative", mutate(fs, func(b []byte) []byte { b[HeaderSize+6] = 0xff; return b }), ErrRecordCount},
		{"f: nXfr lies", mutate(fs, func(b []byte) []byte { b[HeaderSize+5] = 3; return b }), ErrRecordCount},
		{"f: unknown recType", mutate(fs, func(b []byte) []byte { b[rec1] = 5; return b }), ErrRecordType},
		{"f: second isTime", mutate(fs, func(b []byte) []byte { b[rec1] = byte(RecTime); return b }), ErrRecordType},
		// t-stream
		{"t: no entries", setPlen(append([]byte(nil), tr[:HeaderSize]...)), ErrShort},
		{"t: partial entry", setPlen(append([]byte(nil), tr[:HeaderSize+20]...)), ErrRecordSize},
		{"t: unknown entry kind", mutate(tr, func(b []byte) []byte { b[HeaderSize+16] = 0x85; return b }), ErrRecordType},
		// r-stream
		{"r: no server id slot", setPlen(append([]byte(nil), rd[:12]...)), ErrShort},
		{"r: bad server id mark", mutate(rd, func(b []byte) []byte { b[8] = 0xE0; return b }), ErrRecordType},
		{"r: partial slot", setPlen(append(append([]byte(nil), rd...), 0, 0, 0)), ErrRecordSize},
		{"r: Dent zero", mutate(rd, func(b []byte) []byte { b[redirFixed+8+1] = 0; return b }), ErrRecordSize},
		{"r: Dent past end", mutate(rd, func(b []byte) []byte { b[redirFixed+8+1] = 250; return b }), ErrRecordSize},
		{"r: timing mark with low bits", mutate(rd, func(b []byte) []byte { b[redirFixed] = 0x03; return b }), ErrRecordType},
		{"r: unknown slot kind", mutate(rd, func(b []byte) []byte { b[redirFixed+8] = 0xA1; return b }), ErrRecordType},
		// g-stream
		{"g: short header", setPlen(append([]byte(nil), gs[:20]...)), ErrShort},
		{"g: no records", setPlen(append([]byte(nil), gs[:GStreamHeaderSize]...)), ErrEmptyText},
		{"g: only separators", setPlen(append(append([]byte(nil), gs[:GStreamHeaderSize]...), '\n', '\n', 0)), ErrEmptyText},
		// text g-streams
		{"json g: bad code field", []byte(`{"code":g,"pseq":1}`), ErrSyntax},
		{"json g: unknown code", []byte(`{"code":"x","pseq":1,"stod":1,"sid":1}`), ErrUnknownCode},
		{"json g: pseq over 999", []byte(`{"code":"=","pseq":1000,"stod":1,"sid":1}`), ErrSyntax},
		{"json g: no stod", []byte(`{"code":"=","pseq":1,"sid":1}`), ErrSyntax},
		{"json g: no records", []byte(`{"code":"g","pseq":  1,"stod":1,"sid":1,"gs":{"type":"C","tbeg":1,"tend":2}}`), ErrEmptyText},
		{"json g: no type", []byte("{\"code\":\"g\",\"pseq\":  1,\"stod\":1,\"sid\":1,\"gs\":{\"tbeg\":1,\"tend\":2}}\n{}\x00"), ErrSyntax},
		{"json dict: no did", []byte(`{"code":"d","pseq":1,"stod":1,"sid":1,"gs":{"type":"C"},"data":"x"}`), ErrSyntax},
		{"cgi g: no gs.tend", []byte("code=g&pseq=++1&stod=1&sid=1&gs.type=C\n{}\x00"), ErrSyntax},
		{"cgi: code cut short", []byte("code="), ErrSyntax},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Validate(tc.b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Validate: %v, want %v", err, tc.want)
			}
			if ReasonOf(err) != ReasonOf(tc.want) {
				t.Fatalf("ReasonOf = %v", ReasonOf(err))
			}
			// The kind's own decoder agrees (map payload errors come from
			// the payload parsers, so only the record layer is checked).
			var derr error
			switch Classify(tc.b) {
			case KindFStream:
				_, derr = DecodeFStream(tc.b)
			case KindTrace:
				_, derr = DecodeTrace(tc.b)
			case KindRedir:
				_, derr = DecodeRedir(tc.b)
			case KindGStream:
				_, derr = DecodeGStream(tc.b)
			case KindTextGStream, KindCGIGStream:
				_, derr = DecodeTextGStream(tc.b)
			default:
				return
			}
			if derr != tc.want {
				t.Fatalf("Decode: %v, want %v", derr, tc.want)
			}
		})
	}
}

// TestDecodeWrongCode: each Decode function rejects another kind's packet.
func TestDecodeWrongCode(t *testing.T) {
	fs, tr := fstreamPacket(), tracePacket()
	if _, err := DecodeMap(fs); err != ErrUnknownCode {
		t.Errorf("DecodeMap(f): %v", err)
	}
	if _, err := DecodeFStream(tr); err != ErrUnknownCode {
		t.Errorf("DecodeFStream(t): %v", err)
	}
	if _, err := DecodeTrace(fs); err != ErrUnknownCode {
		t.Errorf("DecodeTrace(f): %v", err)
	}
	if _, err := DecodeRedir(fs); err != ErrUnknownCode {
		t.Errorf("DecodeRedir(f): %v", err)
	}
	if _, err := DecodeGStream(fs); err != ErrUnknownCode {
		t.Errorf("DecodeGStream(f): %v", err)
	}
	if _, err := DecodeTextGStream(fs); err != ErrUnknownCode {
		t.Errorf("DecodeTextGStream(f): %v", err)
	}
}

func TestReasons(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons() {
		s := r.String()
		if s == "invalid" || seen[s] {
			t.Errorf("reason %d has label %q", r, s)
		}
		seen[s] = true
	}
	if len(seen) != int(numReasons)-1 || Reason(0).String() != "invalid" || ReasonOf(errors.New("x")) != 0 {
		t.Error("reason set is not closed")
	}
	if ErrRecordSize.Error() != "decode packet: bad_record_size" {
		t.Errorf("message %q", ErrRecordSize.Error())
	}
}

// TestTruncatedMapRecord: a payload cut at the server's buffer is
// NUL-terminated and followed by garbage up to plen (§2).
func TestTruncatedMapRecord(t *testing.T) {
	b := hexb(t, "64 01 0020 6553f100 00000009") // 'd', plen 32, dictid 9
	b = append(b, "xroot/u.1:2@h\n/a/b"...)      // 18 bytes of text
	b = append(b, 0, 0xff)                       // NUL, then garbage (not UTF-8)
	m, err := DecodeMap(b)
	if err != nil {
		t.Fatal(err)
	}
	u, p := m.Split()
	if string(m.Info) != "xroot/u.1:2@h\n/a/b" || string(u) != "xroot/u.1:2@h" || string(p) != "/a/b" || m.DictID != 9 {
		t.Errorf("got info %q", m.Info)
	}
}
