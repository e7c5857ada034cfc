package packet

import (
	"encoding/hex"
	"strings"
	"testing"
)

// hexb decodes a hand-written hex literal; spaces, newlines and '|' (used
// to mark field boundaries) are ignored.
func hexb(t testing.TB, s string) []byte {
	t.Helper()
	s = strings.NewReplacer(" ", "", "\n", "", "\t", "", "|", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex literal: %v", err)
	}
	return b
}

var testHdr = Header{Pseq: 7, Stod: 1700000000}

const testSID = 258305997245184

// mapPkt builds a map record with the encoder.
func mapPkt(code byte, dictID uint32, info string) []byte {
	h := testHdr
	h.Code = code
	return AppendMap(nil, h, dictID, []byte(info))
}

// setPlen rewrites plen to match len(b).
func setPlen(b []byte) []byte {
	b[2], b[3] = byte(len(b)>>8), byte(len(b))
	return b
}

type namedPacket struct {
	name string
	data []byte
}

// fstreamPacket builds an f-stream with every record form.
func fstreamPacket() []byte {
	var fb FStreamBuilder
	fb.Reset(nil, testHdr, 1700000000, 1700000060, testSID, true)
	fb.Open(FileOpen{FileID: 10, FileSize: 1 << 33, HasLFN: true, User: 3, LFN: []byte("/store/data/f.root")})
	fb.Open(FileOpen{FileID: 11, FileSize: 5, RW: true, HasLFN: true, User: 3, LFN: []byte("/w")})
	fb.Open(FileOpen{FileID: 12, FileSize: 7})
	fb.Xfr(FileXfr{FileID: 10, Read: 100, Readv: 200, Write: 0})
	fb.Close(FileClose{FileID: 12, Read: 1, Readv: 2, Write: 3})
	fb.Close(FileClose{FileID: 11, Forced: true, Write: 5, HasOps: true, Ops: Ops{Write: 1, WrMin: 5, WrMax: 5}})
	fb.Close(FileClose{FileID: 10, Read: 100, Readv: 200, HasOps: true, HasSSQ: true,
		Ops: Ops{Read: 1, Readv: 1, RsMin: 2, RsMax: 2, Rsegs: 2, RdMin: 100, RdMax: 100, RvMin: 200, RvMax: 200},
		SSQ: SSQ{Read: 1e4, Readv: 4e4, ReadvSegs: 4, Write: 0}})
	fb.Disc(3)
	return fb.Finish(1700000060)
}

func tracePacket() []byte {
	var tb TraceBuilder
	h := testHdr
	tb.Reset(nil, h)
	tb.Window(testSID, 1700000000, 1700000000)
	tb.Open(10, 1<<40)
	tb.IO(10, 4096, 1024)
	tb.IO(10, 1<<40, -512)
	tb.Readv(10, 9, 16, 65536, false)
	tb.Readv(10, 10, 2, 100, true)
	tb.AppID([]byte("cmsRun"))
	tb.Close(10, 5<<32+7, 123)
	tb.Disc(3, TraceDiscForced|TraceDiscBound, 3600)
	tb.Window(testSID, 1700000060, 1700000060)
	return tb.Finish()
}

func redirPacket() []byte {
	var rb RedirBuilder
	rb.Reset(nil, testHdr, testSID)
	rb.Mark(60, 1700000000)
	rb.Redirect(RedirEntry{Op: 5, Port: 1094, User: 3, Host: []byte("data.example.org"), Path: []byte("/store/a")})
	rb.Redirect(RedirEntry{Xrootd: true, Op: 0x0d, Port: 1095, User: 0, Host: []byte("[2001:db8::1]"), Path: []byte("/b")})
	rb.Redirect(RedirEntry{Op: 2, Path: []byte("/only/path")})
	rb.Mark(60, 1700000060)
	return rb.Finish()
}

var gLines = [][]byte{
	[]byte(`{"event":"file_close","lfn":"/a","size":1,"blk_size":4,"n_blks":1,"n_blks_done":1,"access_cnt":1,"attach_t":1,"detach_t":2,"remotes":[],"b_hit":1,"b_miss":0,"b_bypass":0,"b_todisk":0,"b_prefetch":0,"n_cks_errs":0}`),
	[]byte(`{"event":"throttle_update","io_wait":1.5,"io_active":2,"io_total":3}`),
}

func gstreamPacket() []byte {
	return AppendGStream(nil, testHdr, 1700000000, 1700000010, ProviderCache, testSID, gLines)
}

// seedPackets are the datagrams of the committed fuzz corpus: every kind,
// valid and hostile.
func seedPackets(t testing.TB) []namedPacket {
	long := strings.Repeat("x", 40)
	trunc := mapPkt(CodePath, 9, "xroot/u.1:2@h\n/long/"+long)
	trunc[len(trunc)-20] = 0 // NUL, then garbage up to plen
	copy(trunc[len(trunc)-19:], "\xff\xfe garbage \x00\x01")

	fs := fstreamPacket()
	fsRecSize0 := append([]byte(nil), fs...)
	fsRecSize0[8+24+2], fsRecSize0[8+24+3] = 0, 0
	fsPastEnd := append([]byte(nil), fs...)
	fsPastEnd[8+24+2], fsPastEnd[8+24+3] = 0x7f, 0xff
	fsNRecs := append([]byte(nil), fs...)
	fsNRecs[8+7]++
	fsType := append([]byte(nil), fs...)
	fsType[8+24] = 9

	tr := tracePacket()
	trBad := append([]byte(nil), tr...)
	trBad[8+16] = 0xB0

	rd := redirPacket()
	rdDent := append([]byte(nil), rd...)
	rdDent[16+8+1] = 200

	return []namedPacket{
		{"map-ident", mapPkt(CodeIdent, 0, "=/xrootd.1234:"+"258305997245184@srv.example.org\n&site=T2_XX&port=1094&inst=anon&pgm=xrootd&ver=v5.7.0")},
		{"map-ident-frm", mapPkt(CodeIdent, 0, "frm.99:258305997245185@srv\n&site=&port=0&inst=anon&pgm=frm_xfrd")},
		{"map-user-auth", mapPkt(CodeUser, 5, "xroot/cmsplt01.2705723:202129656347755@b9p20p7281.cern.ch\n&p=gsi&n=cmsuxxxx&h=b9p20p7281.cern.ch&o=cms cms&r=NULL NULL&g=/cms /cms/uscms&m=&R=unknown&x=python3&y=&I=6&I=6")},
		{"map-user-bare", mapPkt(CodeUser, 6, "https/unknown.324183:258305997245184@[::198.124.239.10]")},
		{"map-user-raw", mapPkt(CodeUser, 7, "xroot/rawlinkid\n")},
		{"map-path", mapPkt(CodePath, 8, "xroot/u.1:258305997245184@h\n/store/data/f.root")},
		{"map-info", mapPkt(CodeInfo, 9, "https/u.1:258305997245184@h\nxrdcl-pelican/1.2.1")},
		{"map-token", mapPkt(CodeToken, 10, "https/unknown.496632:247508873605395@[::198.202.100.135]\n&Uc=1995247&s=jacob.lange&n=&o=https://osdf.igwn.org/cit&r=&g=")},
		{"map-ueac", mapPkt(CodeUEAC, 11, "xroot/u.1:2@h\n&Uc=5&Ec=2&Ac=7")},
		{"map-purge", mapPkt(CodePurge, 0, "frm_purged:258305997245185@localhost\n/store/old.root\n&tod=1700000000&sz=1024&at=1&ct=2&mt=3&fn=l")},
		{"map-xfer", mapPkt(CodeXfer, 0, "user.12:258305997245185@client\n/store/in.root\n&tod=1700000000&sz=2048&qt=5&tm=9&op=6&rc=0&pd=tape")},
		{"map-truncated-nul-garbage", trunc},
		{"map-empty-info", mapPkt(CodeUser, 1, "")},
		{"map-not-utf8", mapPkt(CodeUser, 1, "xroot/\xff\xfe.1:2@h")},
		{"map-token-no-uc", mapPkt(CodeToken, 1, "xroot/u.1:2@h\n&s=x")},
		{"map-short", setPlen([]byte{'u', 1, 0, 0, 0, 0, 0, 1, 0, 0, 1})},
		{"hdr-short", []byte{'f', 1, 0, 7, 0, 0, 0}},
		{"plen-mismatch", append(mapPkt(CodePath, 8, "xroot/u.1:2@h\n/p"), 0, 0)},
		{"unknown-code", setPlen([]byte{'Z', 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})},
		{"fstream", fs},
		{"fstream-old-time", hexb(t, "66 01 0018 00000001 | 02 00 0010 0000 0000 65a0bc00 65a0bc3c")},
		{"fstream-recsize-0", fsRecSize0},
		{"fstream-recsize-past-end", fsPastEnd},
		{"fstream-nrecs-lies", fsNRecs},
		{"fstream-unknown-rectype", fsType},
		{"trace", tr},
		{"trace-unknown-kind", trBad},
		{"trace-partial-entry", setPlen(append(append([]byte(nil), tr...), 1, 2, 3))},
		{"redir", rd},
		{"redir-dent-past-end", rdDent},
		{"gstream", gstreamPacket()},
		{"gstream-empty", AppendGStream(nil, testHdr, 1, 2, ProviderTPC, testSID, nil)},
		{"text-json-g", AppendTextGStream(nil, TextGStream{Code: 'g', Pseq: 1, Stod: 1700000000, SID: testSID, Provider: 'C', TBeg: 1700000000, TEnd: 1700000005, Src: []byte(`{"site":"T2","host":"h"}`)}, gLines)},
		{"text-cgi-g", AppendTextGStream(nil, TextGStream{CGI: true, Code: 'g', Pseq: 12, Stod: 1700000000, SID: testSID, Provider: 'R', TBeg: 1700000000, TEnd: 1700000005}, gLines)},
		{"text-json-ident", AppendTextGStream(nil, TextGStream{Code: '=', Pseq: 3, Stod: 1700000000, SID: testSID, Src: []byte(`{"site":"T2","host":"h","port":1094,"inst":"anon","pgm":"xrootd","ver":"v5.7.0"}`)}, nil)},
		{"text-cgi-dict", AppendTextGStream(nil, TextGStream{CGI: true, Code: 'd', Pseq: 4, Stod: 1700000000, SID: testSID, Provider: 'C', DictID: 77, Data: []byte("/store/a&b=c")}, nil)},
		{"text-json-dict", AppendTextGStream(nil, TextGStream{Code: 'i', Pseq: 5, Stod: 1700000000, SID: testSID, Provider: 'P', DictID: 78, Data: []byte(`some "info"`)}, nil)},
		{"text-cgi-g-undefined-tail", []byte("code=g&pseq=++7&stod=1700000000&sid=258305997245184\n&gs.type=R&gs.tend=1700000005(null)&gs.tbeg=1700000000\n{\"event\":\"throttle_update\"}\x00")},
		{"text-cgi-dict-dflthdr", []byte("code=i&pseq=5&stod=1700000000&sid=258305997245184\n&gs.type=P&did=78&data=a&b=c")},
		{"fstream-ssq-flag-recsize-80", hexb(t, `
			66 00 0070 6553f100
			02 01 0018 0000 0001 6553f100 6553f13c 0000eaed8d358b00
			00 06 0050 00000001 0000000000000010 0000000000000020 0000000000000030
			00000001 00000002 00000003 0004 0005 0000000000000006 00000007 00000008 00000009 0000000a 0000000b 0000000c`)},
		{"xml-summary", []byte(`<statistics tod="1700000000" ver="v5.7.0"><stats id="info"/></statistics>`)},
		{"json-summary", []byte(`{"statistics":{"tod":1700000000}}`)},
		{"garbage", []byte("GET / HTTP/1.1\r\n\r\n")},
	}
}
