package packet

import (
	"bytes"
	"fmt"
	"math"
	"testing"
)

// same compares decoded values by their printed form, so that a nil and an
// empty []byte (absent vs empty value) compare equal.
func same(a, b any) bool { return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b) }

func TestMapRoundTrip(t *testing.T) {
	uid := UserID{Prot: []byte("xroot"), User: []byte("alice"), PID: []byte("42"), SID: []byte("258305997245184"), Host: []byte("[2001:db8::7]")}
	frmUID := UserID{User: []byte("stage"), PID: []byte("9"), SID: []byte("1"), Host: []byte("client.example")}
	login := Login{AuthProt: []byte("ztn"), Name: []byte("/DC=org/CN=a=b:c"), Host: []byte("h.example"), Org: []byte("cms cms"), Role: []byte("NULL"), Groups: []byte("/cms /cms/uscms"), MonInfo: []byte(""), Release: []byte("v5.6.3"), App: []byte("python3"), Info: []byte("x y"), IPv: 6, HasAuth: true}
	tests := []struct {
		name    string
		code    byte
		dictID  uint32
		uid     UserID
		payload []byte
		parse   func(p []byte) (any, error)
		want    any
	}{
		{"ident", CodeIdent, 0, UserID{Prot: []byte("="), User: []byte("xrootd"), PID: []byte("1"), SID: []byte("258305997245184"), Host: []byte("srv")},
			AppendServerIdent(nil, ServerIdent{Site: []byte("T2_US_X"), Port: 1094, Inst: []byte("anon"), Program: []byte("xrootd"), Version: []byte("v5.7.0")}),
			func(p []byte) (any, error) { return ParseServerIdent(p) },
			ServerIdent{Site: []byte("T2_US_X"), Port: 1094, Inst: []byte("anon"), Program: []byte("xrootd"), Version: []byte("v5.7.0")}},
		{"user-auth", CodeUser, 5, uid, AppendLogin(nil, login),
			func(p []byte) (any, error) { return ParseLogin(p), nil }, login},
		{"user-client", CodeUser, 6, uid, AppendLogin(nil, Login{Release: []byte("unknown"), App: []byte("cmsRun"), IPv: 4}),
			func(p []byte) (any, error) { return ParseLogin(p), nil }, Login{Release: []byte("unknown"), App: []byte("cmsRun"), Info: []byte{}, IPv: 4}},
		{"user-bare", CodeUser, 7, uid, nil,
			func(p []byte) (any, error) { return ParseLogin(p), nil }, Login{}},
		{"token", CodeToken, 8, uid, AppendToken(nil, Token{UserDictID: 5, Subject: []byte("sub"), Name: []byte("n"), Org: []byte("https://osdf.igwn.org/cit"), Role: []byte("r"), Groups: []byte("g1,g2")}),
			func(p []byte) (any, error) { return ParseToken(p) },
			Token{UserDictID: 5, Subject: []byte("sub"), Name: []byte("n"), Org: []byte("https://osdf.igwn.org/cit"), Role: []byte("r"), Groups: []byte("g1,g2")}},
		{"ueac", CodeUEAC, 9, uid, AppendUEAC(nil, UEAC{UserDictID: 5, Experiment: 2, Activity: 3}),
			func(p []byte) (any, error) { return ParseUEAC(p) }, UEAC{UserDictID: 5, Experiment: 2, Activity: 3}},
		{"purge", CodePurge, 0, UserID{User: []byte("frm_purged:1@localhost"), Raw: true},
			AppendPurge(nil, Purge{Name: []byte("/pfn/x"), Tod: 1700000000, Size: 1 << 40, Atime: 1, Ctime: 2, Mtime: 3, Physical: true}),
			func(p []byte) (any, error) { return ParsePurge(p) },
			Purge{Name: []byte("/pfn/x"), Tod: 1700000000, Size: 1 << 40, Atime: 1, Ctime: 2, Mtime: 3, Physical: true}},
		{"xfer", CodeXfer, 0, frmUID,
			AppendFRMXfer(nil, FRMXfer{LFN: []byte("/store/x"), Tod: 1700000000, Size: 99, QueueTime: 4, XferTime: 1, Op: XferMigratePurge, RC: 2, Detail: []byte("why")}),
			func(p []byte) (any, error) { return ParseFRMXfer(p) },
			FRMXfer{LFN: []byte("/store/x"), Tod: 1700000000, Size: 99, QueueTime: 4, XferTime: 1, Op: XferMigratePurge, RC: 2, Detail: []byte("why")}},
		{"path", CodePath, 10, uid, []byte("/store/a b/ü.root"), nil, nil},
		{"info", CodeInfo, 11, uid, []byte("xrdcl-pelican/1.2.1"), nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info := AppendUserID(nil, tc.uid)
			if tc.payload != nil {
				info = append(append(info, '\n'), tc.payload...)
			}
			h := Header{Code: tc.code, Pseq: 200, Stod: 1700000000}
			pkt := AppendMap(nil, h, tc.dictID, info)
			m, err := DecodeMap(pkt)
			if err != nil {
				t.Fatal(err)
			}
			h.Plen = uint16(len(pkt))
			if m.Header != h || m.DictID != tc.dictID || !bytes.Equal(m.Info, info) {
				t.Fatalf("got %+v dictid %d info %q", m.Header, m.DictID, m.Info)
			}
			u, p := m.Split()
			gotUID := ParseUserID(u, tc.code != CodePurge && tc.code != CodeXfer)
			if !same(gotUID, tc.uid) {
				t.Errorf("user id %+v, want %+v", gotUID, tc.uid)
			}
			if !bytes.Equal(p, tc.payload) {
				t.Errorf("payload %q, want %q", p, tc.payload)
			}
			if tc.parse != nil {
				got, err := tc.parse(p)
				if err != nil {
					t.Fatal(err)
				}
				if !same(got, tc.want) {
					t.Errorf("payload parsed as\n%+v, want\n%+v", got, tc.want)
				}
			}
			if k, err := Validate(pkt); k != KindMap || err != nil {
				t.Errorf("Validate = %v, %v", k, err)
			}
		})
	}
}

func TestFStreamRoundTrip(t *testing.T) {
	opens := []FileOpen{
		{FileID: 10, FileSize: 1 << 33, HasLFN: true, User: 3, LFN: []byte("/store/data/f.root")},
		{FileID: 11, FileSize: 5, RW: true, HasLFN: true, User: 3, LFN: []byte("/w")},
		{FileID: 12, FileSize: 7},
		{FileID: 13, FileSize: 0, HasLFN: true, LFN: []byte{}}, // an lfn of only NULs
	}
	xfr := FileXfr{FileID: 10, Read: 100, Readv: 200, Write: 1}
	closes := []FileClose{
		{FileID: 12, Read: 1, Readv: 2, Write: 3},
		{FileID: 11, Forced: true, Write: 5, HasOps: true, Ops: Ops{Write: 1, WrMin: 5, WrMax: 5}},
		{FileID: 10, Read: 100, Readv: 200, HasOps: true, HasSSQ: true,
			Ops: Ops{Read: 1, Readv: 1, RsMin: 2, RsMax: 2, Rsegs: 2, RdMin: 100, RdMax: 100, RvMin: 200, RvMax: 200},
			SSQ: SSQ{Read: 1e4, Readv: 4e4, ReadvSegs: 4, Write: math.Inf(1)}},
	}
	for _, hasSID := range []bool{true, false} {
		t.Run(fmt.Sprintf("sid=%v", hasSID), func(t *testing.T) {
			var fb FStreamBuilder
			fb.Reset([]byte("prefix"), testHdr, 1700000000, 0, testSID|0xABCD<<48, hasSID)
			for _, o := range opens {
				fb.Open(o)
			}
			fb.Xfr(xfr)
			for _, c := range closes {
				fb.Close(c)
			}
			fb.Disc(3)
			if fb.Records() != 9 {
				t.Errorf("Records() = %d", fb.Records())
			}
			out := fb.Finish(1700000060)
			if string(out[:6]) != "prefix" {
				t.Fatal("builder overwrote dst")
			}
			f, err := DecodeFStream(out[6:])
			if err != nil {
				t.Fatal(err)
			}
			wantSize := TimeSizeOld
			if hasSID {
				wantSize = TimeSize
			}
			if f.TBeg != 1700000000 || f.TEnd != 1700000060 || f.HasSID != hasSID || f.NRecs != 9 || f.NXfr != 1 ||
				(hasSID && f.SID != testSID) || (!hasSID && f.SID != 0) || len(out)-6-HeaderSize-wantSize != len(f.recs) {
				t.Fatalf("isTime decoded as %+v", f)
			}
			it := f.Records()
			var got []any
			for it.Next() {
				r := it.Rec()
				switch r.Type {
				case RecOpen:
					got = append(got, r.Open())
				case RecXfr:
					got = append(got, r.Xfr())
				case RecClose:
					got = append(got, r.Close())
				case RecDisc:
					got = append(got, r.ID)
				}
			}
			want := []any{opens[0], opens[1], opens[2], opens[3], xfr, closes[0], closes[1], closes[2], uint32(3)}
			if !same(got, want) {
				t.Fatalf("records\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// TestFStreamFlagSizeDisagreement: optional close blocks are read only
// when flagged and within recSize (§9.5), and open flags are tested as bits
// (§9.6).
func TestFStreamFlagSizeDisagreement(t *testing.T) {
	pkt := hexb(t, `
		66 00 00a8 6553f100
		02 01 0018 0000 0003 6553f100 6553f13c 0000eaed00000001
		00 06 0050 00000001 0000000000000010 0000000000000020 0000000000000030
		   00000001 00000002 00000003 0004 0005 0000000000000006 00000007 00000008 00000009 0000000a 0000000b 0000000c
		00 02 0020 00000002 0000000000000001 0000000000000002 0000000000000003
		01 03 0018 00000003 0000000000000400 00000009 2f7800 00`)
	f, err := DecodeFStream(pkt)
	if err != nil {
		t.Fatal(err)
	}
	it := f.Records()
	it.Next()
	c := it.Rec().Close() // SSQ flagged, recSize 80: OPS only
	if !c.HasOps || c.HasSSQ || c.Ops.Rsegs != 6 || c.Ops.WrMax != 12 || c.Read != 16 {
		t.Errorf("close with SSQ flag and recSize 80: %+v", c)
	}
	it.Next()
	c = it.Rec().Close() // OPS flagged, recSize 32: no OPS
	if c.HasOps || c.HasSSQ || c.Write != 3 {
		t.Errorf("close with OPS flag and recSize 32: %+v", c)
	}
	it.Next()
	o := it.Rec().Open()
	if !o.RW || !o.HasLFN || o.User != 9 || string(o.LFN) != "/x" || o.FileSize != 1024 {
		t.Errorf("open with flags 3: %+v", o)
	}
	if it.Next() {
		t.Error("more records than present")
	}
}

func TestTraceRoundTrip(t *testing.T) {
	var tb TraceBuilder
	tb.Reset(nil, testHdr)
	tb.Open(1, 2)
	tb.Disc(1, 0, 0)
	if tb.Entries() != 2 || tb.Len() != HeaderSize+2*TraceEntrySize {
		t.Errorf("builder: %d entries, %d bytes", tb.Entries(), tb.Len())
	}
	tr, err := DecodeTrace(tracePacket())
	if err != nil {
		t.Fatal(err)
	}
	if tr.Len() != 10 {
		t.Fatalf("Len %d", tr.Len())
	}
	kinds := []TraceKind{TraceWindow, TraceOpen, TraceIO, TraceIO, TraceReadv, TraceReadu, TraceAppID, TraceClose, TraceDisc, TraceWindow}
	for i, k := range kinds {
		if got := tr.Entry(i).Kind(); got != k {
			t.Errorf("entry %d kind %#x, want %#x", i, got, k)
		}
	}
	check := func(name string, got, want any) {
		t.Helper()
		if !same(got, want) {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
	sid, prev, next := tr.Entry(0).Window()
	check("window", []any{sid, prev, next}, []any{uint64(testSID), int32(1700000000), int32(1700000000)})
	check("open", []any{tr.Entry(1).OpenSize(), tr.Entry(1).DictID()}, []any{int64(1 << 40), uint32(10)})
	off, n := tr.Entry(2).IO()
	check("read", []any{off, n, tr.Entry(2).DictID()}, []any{int64(4096), int32(1024), uint32(10)})
	off, n = tr.Entry(3).IO()
	check("write", []any{off, n}, []any{int64(1 << 40), int32(-512)})
	seq, segs, total := tr.Entry(4).Readv()
	check("readv", []any{seq, segs, total}, []any{uint8(9), int16(16), int32(65536)})
	seq, segs, total = tr.Entry(5).Readv()
	check("readu", []any{seq, segs, total}, []any{uint8(10), int16(2), int32(100)})
	check("appid", string(tr.Entry(6).AppID()), "cmsRun")
	r, w := tr.Entry(7).CloseTotals()
	// 5<<32+7 needs 35 bits: shifted by 3, the low 3 bits (7) are lost.
	check("close", []any{r, w, tr.Entry(7).DictID()}, []any{uint64(5 << 32), uint64(123), uint32(10)})
	fl, secs := tr.Entry(8).Disc()
	check("disc", []any{fl, secs, tr.Entry(8).DictID()}, []any{TraceDiscForced | TraceDiscBound, uint32(3600), uint32(3)})
	_, prev, next = tr.Entry(9).Window()
	check("last window", []any{prev, next}, []any{int32(1700000060), int32(1700000060)})
}

func TestRedirRoundTrip(t *testing.T) {
	r, err := DecodeRedir(redirPacket())
	if err != nil {
		t.Fatal(err)
	}
	if r.SID != testSID {
		t.Errorf("SID %d", r.SID)
	}
	var got []RedirEntry
	it := r.Entries()
	for it.Next() {
		got = append(got, it.Entry())
	}
	want := []RedirEntry{
		{Mark: true, Window: 60, Time: 1700000000},
		{Op: 5, Port: 1094, User: 3, Host: []byte("data.example.org"), Path: []byte("/store/a")},
		{Xrootd: true, Op: 0x0d, Port: 1095, Host: []byte("[2001:db8::1]"), Path: []byte("/b")},
		{Op: 2, Path: []byte("/only/path")},
		{Mark: true, Window: 60, Time: 1700000060},
	}
	if !same(got, want) {
		t.Errorf("entries\n%+v\nwant\n%+v", got, want)
	}

	// Text that exactly fills its slots still gets a NUL slot; an over-long
	// text is cut to 255 slots.
	var rb RedirBuilder
	rb.Reset(nil, testHdr, 1)
	rb.Redirect(RedirEntry{Host: []byte("abc"), Path: []byte("/efg")}) // 8 bytes
	rb.Redirect(RedirEntry{Host: []byte("h"), Path: bytes.Repeat([]byte("/p"), 2000)})
	r, err = DecodeRedir(rb.Finish())
	if err != nil {
		t.Fatal(err)
	}
	it = r.Entries()
	it.Next()
	if e := it.Entry(); string(e.Host) != "abc" || string(e.Path) != "/efg" {
		t.Errorf("full slot: %+v", e)
	}
	it.Next()
	if e := it.Entry(); string(e.Host) != "h" || len(e.Path) != maxRedirText-2 {
		t.Errorf("long text: host %q path len %d", e.Host, len(e.Path))
	}
}

func TestGStreamRoundTrip(t *testing.T) {
	pkt := gstreamPacket()
	if pkt[len(pkt)-1] != 0 || bytes.Count(pkt[GStreamHeaderSize:], []byte("\n")) != len(gLines)-1 {
		t.Fatalf("records not framed as the producer frames them: %q", pkt[GStreamHeaderSize:])
	}
	g, err := DecodeGStream(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if g.TBeg != 1700000000 || g.TEnd != 1700000010 || g.Provider != ProviderCache || g.SID != testSID || g.Code != CodeGStream {
		t.Errorf("header %+v", g)
	}
	var lines [][]byte
	it := g.Lines()
	for it.Next() {
		lines = append(lines, it.Line())
	}
	if !same(lines, gLines) {
		t.Errorf("lines %q", lines)
	}
}

func TestTextGStreamRoundTrip(t *testing.T) {
	jsonSrc := []byte(`{"site":"T2","host":"h.example","port":1094,"inst":"anon","pgm":"xrootd","ver":"v5.7.0"}`)
	cgiSrc := []byte("&site=T2&host=h.example&port=1094&inst=anon&pgm=xrootd&ver=v5.7.0")
	base := TextGStream{Pseq: 7, Stod: 1700000000, SID: testSID}
	var cases []TextGStream
	for _, cgi := range []bool{false, true} {
		for _, withSrc := range []bool{false, true} {
			src := []byte(nil)
			if withSrc {
				src = jsonSrc
				if cgi {
					src = cgiSrc
				}
			}
			g := base
			g.CGI, g.Src, g.Code, g.Provider, g.TBeg, g.TEnd = cgi, src, 'g', ProviderTPC, 1700000000, 1700000009
			id := base
			id.CGI, id.Src, id.Code, id.Pseq = cgi, src, '=', 999
			d := base
			d.CGI, d.Src, d.Code, d.Provider, d.DictID, d.Data = cgi, src, 'd', ProviderCache, 4242, []byte(`/store/"odd"&name=1`)
			i := d
			i.Code, i.Data = 'i', []byte("some info")
			cases = append(cases, g, id, d, i)
		}
	}
	for _, want := range cases {
		name := fmt.Sprintf("cgi=%v/code=%c/src=%v", want.CGI, want.Code, want.Src != nil)
		t.Run(name, func(t *testing.T) {
			var lines [][]byte
			if want.Code == 'g' {
				lines = gLines
			}
			pkt := AppendTextGStream(nil, want, lines)
			got, err := DecodeTextGStream(pkt)
			if err != nil {
				t.Fatalf("%v: %q", err, pkt)
			}
			var gotLines [][]byte
			it := got.Lines()
			for it.Next() {
				gotLines = append(gotLines, it.Line())
			}
			got.Header, got.body = nil, nil
			if !same(got, want) || !same(gotLines, lines) {
				t.Errorf("decoded\n%+v\nwant\n%+v\nfrom %q", got, want, pkt)
			}
			wantKind := KindTextGStream
			if want.CGI {
				wantKind = KindCGIGStream
			}
			if k, err := Validate(pkt); k != wantKind || err != nil {
				t.Errorf("Validate = %v, %v", k, err)
			}
		})
	}
}
