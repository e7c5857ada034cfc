package packet

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The fixtures here are written byte by byte from the struct layouts in the
// protocol reference (§3, §4, §5, §6.5), not produced by the encoder.

func TestRealFStream(t *testing.T) {
	pkt := hexb(t, `
		66 2a 00e0 6553f100
		02 01 0018 | 0001 | 0004 | 6553f100 | 6553f13c | 1234eaed8d358b00
		01 01 0028 | 0000000a | 0000000200000000 | 00000003 | 2f73746f72652f662e726f6f74 00000000000000
		03 00 0020 | 0000000a | 0000000000000064 | 00000000000000c8 | 0000000000000000
		00 06 0070 | 0000000a | 0000000000000064 | 00000000000000c8 | 0000000000000000
		   00000001 00000001 00000000 | 0002 0002 | 0000000000000002 | 00000064 00000064 | 000000c8 000000c8 | 00000000 00000000
		   40c3880000000000 40e3880000000000 4010000000000000 0000000000000000
		04 00 0008 | 00000003`)
	f, err := DecodeFStream(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if f.Code != 'f' || f.Pseq != 0x2a || f.Plen != 224 || f.Stod != 1700000000 ||
		f.TBeg != 1700000000 || f.TEnd != 1700000060 || !f.HasSID || f.SID != testSID || f.NXfr != 1 || f.NRecs != 4 {
		t.Fatalf("header/isTime: %+v", f)
	}
	it := f.Records()
	var types []RecType
	for it.Next() {
		r := it.Rec()
		types = append(types, r.Type)
		switch r.Type {
		case RecOpen:
			o := r.Open()
			if o.FileID != 10 || o.FileSize != 1<<33 || !o.HasLFN || o.RW || o.User != 3 || string(o.LFN) != "/store/f.root" || r.Size() != 40 {
				t.Errorf("open: %+v", o)
			}
		case RecXfr:
			if x := r.Xfr(); x != (FileXfr{FileID: 10, Read: 100, Readv: 200}) {
				t.Errorf("xfr: %+v", x)
			}
		case RecClose:
			c := r.Close()
			wantOps := Ops{Read: 1, Readv: 1, RsMin: 2, RsMax: 2, Rsegs: 2, RdMin: 100, RdMax: 100, RvMin: 200, RvMax: 200}
			if c.FileID != 10 || c.Forced || c.Read != 100 || c.Readv != 200 || c.Write != 0 || !c.HasOps || c.Ops != wantOps ||
				!c.HasSSQ || c.SSQ != (SSQ{Read: 1e4, Readv: 4e4, ReadvSegs: 4}) {
				t.Errorf("close: %+v", c)
			}
		case RecDisc:
			if r.ID != 3 || r.Size() != DiscSize {
				t.Errorf("disc: %+v", r)
			}
		}
	}
	if !same(types, []RecType{RecOpen, RecXfr, RecClose, RecDisc}) {
		t.Errorf("record types %v", types)
	}

	// A pre-v4.4 server: 16-byte isTime, open without LFN, 32-byte forced
	// close.
	old := hexb(t, `
		66 00 0048 6553f100
		02 00 0010 | 0000 | 0002 | 6553f100 | 6553f13c
		01 02 0010 | 00000005 | 0000000000001000
		00 01 0020 | 00000005 | 0000000000000001 | 0000000000000000 | 0000000000000fff`)
	f, err = DecodeFStream(old)
	if err != nil {
		t.Fatal(err)
	}
	it = f.Records()
	it.Next()
	o := it.Rec().Open()
	it.Next()
	c := it.Rec().Close()
	if f.HasSID || f.SID != 0 || !same(o, FileOpen{FileID: 5, FileSize: 4096, RW: true}) || !c.Forced || c.Write != 4095 || c.HasOps {
		t.Errorf("old f-stream: %+v %+v %+v", f, o, c)
	}
}

func TestRealTrace(t *testing.T) {
	pkt := hexb(t, `
		74 01 0088 6553f100
		e0 00eaed8d358b00 | 6553f100 | 6553f100
		80 00000200000000 | 00000000 | 0000000a
		00 00000000001000 | 00000400 | 0000000a
		00 00000000002000 | fffffe00 | 0000000a
		90 07 0010 00000000 | 00010000 | 0000000a
		c0 03 00 00 a0000000 | 0000007b | 0000000a
		d0 01 0000 deadbeef | 00000e10 | 00000003
		e0 00eaed8d358b00 | 6553f13c | 6553f13c`)
	tr, err := DecodeTrace(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Len() != 8 {
		t.Fatalf("Len %d", tr.Len())
	}
	sid, a1, a2 := tr.Entry(0).Window()
	size := tr.Entry(1).OpenSize()
	roff, rlen := tr.Entry(2).IO()
	woff, wlen := tr.Entry(3).IO()
	seq, segs, tot := tr.Entry(4).Readv()
	rt, wt := tr.Entry(5).CloseTotals()
	fl, secs := tr.Entry(6).Disc()
	got := []any{sid, a1, a2, size, roff, rlen, woff, wlen, seq, segs, tot, rt, wt, fl, secs, tr.Entry(6).DictID(), tr.Entry(5).DictID()}
	want := []any{uint64(testSID), int32(1700000000), int32(1700000000), int64(1 << 33), int64(4096), int32(1024), int64(8192), int32(-512),
		uint8(7), int16(16), int32(65536), uint64(0x500000000), uint64(123), uint8(1), uint32(3600), uint32(3), uint32(10)}
	if !same(got, want) {
		t.Errorf("entries\n%v\nwant\n%v", got, want)
	}
}

func TestRealRedir(t *testing.T) {
	pkt := hexb(t, `
		72 02 0058 6553f100
		f0 00eaed8d358b00
		00 00003c 6553f100
		85 04 0446 00000003 | 646174612e6578616d706c652e6f72673a2f73746f72652f61 00000000000000
		9d 01 0447 00000000 | 3a2f78 0000000000
		00 00003c 6553f13c`)
	r, err := DecodeRedir(pkt)
	if err != nil {
		t.Fatal(err)
	}
	var got []RedirEntry
	it := r.Entries()
	for it.Next() {
		got = append(got, it.Entry())
	}
	want := []RedirEntry{
		{Mark: true, Window: 60, Time: 1700000000},
		{Op: 5, Port: 1094, User: 3, Host: []byte("data.example.org"), Path: []byte("/store/a")},
		{Xrootd: true, Op: 0x0d, Port: 1095, Host: []byte{}, Path: []byte("/x")},
		{Mark: true, Window: 60, Time: 1700000060},
	}
	if r.SID != testSID || !same(got, want) {
		t.Errorf("sid %d entries\n%+v\nwant\n%+v", r.SID, got, want)
	}
}

const tpcLine = `{"TPC":"xroot","Client":"u.1:2@h.example","Xeq":{"Beg":"2024-01-01T00:00:00.5000Z","End":"2024-01-01T00:00:09.123Z","RC":0,"Strm":1,"Type":"pull","IPv":6},"Src":"xroot://a:1094//data/f","Dst":"xroot://localhost:1094//data/f","Size":1024}`

func TestRealGStream(t *testing.T) {
	body := tpcLine + "\n" + `{"TPC":"http","Src":"/bad "quote"/path"}` + "\x00"
	pkt := append(hexb(t, "67 01 0000 6553f100 | 6553f100 | 6553f10a | 50 00eaed8d358b00"), body...)
	g, err := DecodeGStream(setPlen(pkt))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	it := g.Lines()
	for it.Next() {
		lines = append(lines, string(it.Line()))
	}
	if g.Provider != ProviderTPC || g.SID != testSID || g.TBeg != 1700000000 || g.TEnd != 1700000010 ||
		!same(lines, []string{tpcLine, `{"TPC":"http","Src":"/bad "quote"/path"}`}) {
		t.Errorf("%+v %q", g, lines)
	}
	var v struct {
		TPC string
		Xeq struct{ IPv int }
	}
	if err := json.Unmarshal([]byte(lines[0]), &v); err != nil || v.TPC != "xroot" || v.Xeq.IPv != 6 {
		t.Errorf("first line is not the TPC JSON: %v %+v", err, v)
	}
}

func TestRealTextGStream(t *testing.T) {
	rec := `{"event":"file_close","lfn":"/a"}`
	tests := []struct {
		name string
		in   string
		want TextGStream
		recs int
	}{
		{"json g with src",
			`{"code":"g","pseq":  7,"stod":1700000000,"sid":258305997245184,"src":{"site":"T2_XX","host":"h"},"gs":{"type":"C","tbeg":1700000000,"tend":1700000005}}` + "\n" + rec + "\n" + rec + "\x00",
			TextGStream{Code: 'g', Pseq: 7, Stod: 1700000000, SID: testSID, Provider: 'C', TBeg: 1700000000, TEnd: 1700000005, Src: []byte(`{"site":"T2_XX","host":"h"}`)}, 2},
		// Default CGI header: a stray newline before &gs.type, and an
		// undefined tail after the gs.tend value.
		{"cgi g default header",
			"code=g&pseq=++7&stod=1700000000&sid=258305997245184\n&gs.type=R&gs.tbeg=1700000000&gs.tend=1700000005(null)\n" + rec + "\x00",
			TextGStream{CGI: true, Code: 'g', Pseq: 7, Stod: 1700000000, SID: testSID, Provider: 'R', TBeg: 1700000000, TEnd: 1700000005}, 1},
		{"cgi g sitehdr",
			"code=g&pseq=999&stod=1700000000&sid=258305997245184&site=T2&gs.type=O&gs.tbeg=+++++++123&gs.tend=+++++++124\n" + rec + "\x00",
			TextGStream{CGI: true, Code: 'g', Pseq: 999, Stod: 1700000000, SID: testSID, Provider: 'O', TBeg: 123, TEnd: 124, Src: []byte("&site=T2")}, 1},
		{"json dict, data not escaped",
			`{"code":"d","pseq":4,"stod":1700000000,"sid":258305997245184,"gs":{"type":"C"},"did":77,"data":"/store/"quoted".root"}` + "\x00",
			TextGStream{Code: 'd', Pseq: 4, Stod: 1700000000, SID: testSID, Provider: 'C', DictID: 77, Data: []byte(`/store/"quoted".root`)}, 0},
		{"cgi dict default header",
			"code=i&pseq=5&stod=1700000000&sid=258305997245184\n&gs.type=P&did=78&data=a&b=c",
			TextGStream{CGI: true, Code: 'i', Pseq: 5, Stod: 1700000000, SID: testSID, Provider: 'P', DictID: 78, Data: []byte("a&b=c")}, 0},
		{"cgi ident",
			"code==&pseq=2&stod=1700000000&sid=258305997245184&site=T2&host=h&port=1094&inst=anon&pgm=xrootd&ver=v5.7.0\x00",
			TextGStream{CGI: true, Code: '=', Pseq: 2, Stod: 1700000000, SID: testSID, Src: []byte("&site=T2&host=h&port=1094&inst=anon&pgm=xrootd&ver=v5.7.0")}, 0},
		{"json ident",
			`{"code":"=","pseq":2,"stod":1700000000,"sid":258305997245184,"src":{"site":"T2","pgm":"xrootd"}}` + "\x00",
			TextGStream{Code: '=', Pseq: 2, Stod: 1700000000, SID: testSID, Src: []byte(`{"site":"T2","pgm":"xrootd"}`)}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeTextGStream([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			it := got.Lines()
			for it.Next() {
				if string(it.Line()) != rec {
					t.Errorf("line %q", it.Line())
				}
				n++
			}
			got.Header, got.body = nil, nil
			if !same(got, tc.want) || n != tc.recs {
				t.Errorf("got\n%+v (%d records)\nwant\n%+v", got, n, tc.want)
			}
		})
	}
}

// realPacketsPath finds shared/data/real-packets.jsonl above the package
// directory.
func realPacketsPath() string {
	dir, _ := os.Getwd()
	for {
		p := filepath.Join(dir, "shared", "data", "real-packets.jsonl")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func TestRealPacketsFile(t *testing.T) {
	path := realPacketsPath()
	if path == "" {
		t.Skip("shared/data/real-packets.jsonl not found")
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var pkts [][]byte
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var env struct{ Data, Remote, Version string }
		if err := json.Unmarshal(sc.Bytes(), &env); err != nil {
			t.Fatal(err)
		}
		b, err := base64.StdEncoding.DecodeString(env.Data)
		if err != nil {
			t.Fatal(err)
		}
		if k, err := Validate(b); k != KindMap || err != nil {
			t.Errorf("packet %d: %v %v", len(pkts), k, err)
		}
		pkts = append(pkts, b)
	}
	if len(pkts) < 11 {
		t.Fatalf("%d packets, want at least 11", len(pkts))
	}
	dec := func(i int) (Map, UserID, []byte) {
		m, err := DecodeMap(pkts[i])
		if err != nil {
			t.Fatal(err)
		}
		u, p := m.Split()
		return m, ParseUserID(u, true), p
	}

	// Pelican https login: bracketed IPv6 host, empty auth values.
	m, u, p := dec(0)
	l := ParseLogin(p)
	if m.Code != CodeUser || m.Pseq != 238 || m.Stod != 1748891940 || m.DictID != 8471254 ||
		!same(u, UserID{Prot: []byte("https"), User: []byte("unknown"), PID: []byte("324183"), SID: []byte("258305997245184"), Host: []byte("[::198.124.239.10]")}) ||
		!same(l, Login{AuthProt: []byte("https"), Name: []byte{}, Host: []byte("[::ffff:198.124.239.10]"), Org: []byte{}, Role: []byte{}, Groups: []byte{}, MonInfo: []byte{}, IPv: 4, HasAuth: true}) {
		t.Errorf("packet 0: %+v %+v %+v", m, u, l)
	}
	if sid, ok := u.SIDValue(); !ok || sid != testSID {
		t.Errorf("packet 0 sid %d", sid)
	}
	// i record: client identification.
	if m, _, p := dec(1); m.Code != CodeInfo || m.DictID != 8471255 || string(p) != "xrdcl-pelican/1.2.1" {
		t.Errorf("packet 1: %+v %q", m, p)
	}
	// d record: a long path.
	if m, u, p := dec(4); m.Code != CodePath || m.DictID != 8471258 || string(u.PID) != "324184" || len(p) != 268-12-len("https/unknown.324184:258305997245184@[::198.124.239.10]\n") ||
		string(p[:18]) != "/ncar/rda/d651007/" || string(p[len(p)-3:]) != ".nc" {
		t.Errorf("packet 4: %+v %q", m, p)
	}
	// The cmsplt01 login: auth form with &I= twice.
	m, u, p = dec(6)
	l = ParseLogin(p)
	if m.Stod != 1748458787 || m.DictID != 4808642 ||
		!same(u, UserID{Prot: []byte("xroot"), User: []byte("cmsplt01"), PID: []byte("2705723"), SID: []byte("202129656347755"), Host: []byte("b9p20p7281.cern.ch")}) ||
		!same(l, Login{AuthProt: []byte("gsi"), Name: []byte("cmsuxxxx"), Host: []byte("b9p20p7281.cern.ch"), Org: []byte("cms cms"), Role: []byte("NULL NULL"),
			Groups: []byte("/cms /cms/uscms"), MonInfo: []byte{}, Release: []byte("unknown"), App: []byte("python3"), Info: []byte{}, IPv: 6, HasAuth: true}) {
		t.Errorf("packet 6 (cmsplt01): %+v\n%+v\n%+v", m, u, l)
	}
	if string(p[len(p)-8:]) != "&I=6&I=6" {
		t.Errorf("packet 6 payload ends %q", p[len(p)-8:])
	}
	// A user name without a domain in the host.
	if _, u, p := dec(7); string(u.User) != "cmsu0725" || string(u.Host) != "t2bat0445" || string(ParseLogin(p).App) != "cmsRun" || ParseLogin(p).IPv != 4 {
		t.Errorf("packet 7: %+v", u)
	}
	// The token record refers to the u record of packet 8 by &Uc=.
	um, _, _ := dec(8)
	m, u, p = dec(10)
	tok, err := ParseToken(p)
	if err != nil {
		t.Fatal(err)
	}
	if m.Code != CodeToken || m.DictID != 1995249 || tok.UserDictID != 1995247 || tok.UserDictID != um.DictID ||
		!same(tok, Token{UserDictID: 1995247, Subject: []byte("jacob.lange"), Name: []byte{}, Org: []byte("https://osdf.igwn.org/cit"), Role: []byte{}, Groups: []byte{}}) ||
		string(u.Host) != "[::198.202.100.135]" {
		t.Errorf("packet 10 (token): %+v %+v %+v", m, u, tok)
	}
}

// TestRealFRM decodes FRM records written from the texts in §2.8 and §2.9,
// with headers written byte by byte.
func TestRealFRM(t *testing.T) {
	ptext := "frm_purged:258305997245185@localhost\n/data/pfn/f.root\n&tod=1700000000&sz=1048576&at=1690000000&ct=1680000000&mt=1680000001&fn=p"
	p := append(hexb(t, "70 01 0000 6553f000 00000000"), ptext...)
	m, err := DecodeMap(setPlen(p))
	if err != nil {
		t.Fatal(err)
	}
	u, payload := m.Split()
	pu, err := ParsePurge(payload)
	if err != nil {
		t.Fatal(err)
	}
	if m.DictID != 0 || m.Stod != 0x6553f000 || string(u) != "frm_purged:258305997245185@localhost" ||
		!same(pu, Purge{Name: []byte("/data/pfn/f.root"), Tod: 1700000000, Size: 1048576, Atime: 1690000000, Ctime: 1680000000, Mtime: 1680000001, Physical: true}) {
		t.Errorf("p record: %+v %q %+v", m.Header, u, pu)
	}

	xtext := "cmsprod.4711:258305997245185@client.example.org\n/store/in.root\n&tod=1700000000&sz=2048&qt=5&tm=9&op=6&rc=0"
	x := append(hexb(t, "78 02 0000 6553f000 00000000"), xtext...)
	if k, err := Validate(setPlen(x)); k != KindMap || err != nil {
		t.Fatalf("Validate x: %v %v", k, err)
	}
	m, _ = DecodeMap(x)
	u, payload = m.Split()
	xu, err := ParseFRMXfer(payload)
	if err != nil {
		t.Fatal(err)
	}
	uid := ParseUserID(u, false)
	if string(uid.User) != "cmsprod" || string(uid.PID) != "4711" || string(uid.Host) != "client.example.org" || len(uid.Prot) != 0 ||
		!same(xu, FRMXfer{LFN: []byte("/store/in.root"), Tod: 1700000000, Size: 2048, QueueTime: 5, XferTime: 9, Op: XferStage}) {
		t.Errorf("x record: %+v %+v", uid, xu)
	}
}
