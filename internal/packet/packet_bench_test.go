package packet

import (
	"strings"
	"testing"
)

// Benchmarks of the hot path, one per packet kind. Each iteration decodes
// the datagram and every field of every record, as the correlator does.
//
//	go test -run='^$' -bench=BenchmarkDecode -benchmem -count=6 ./internal/packet | tee new.txt
//	benchstat old.txt new.txt

type decodeCase struct {
	name string
	pkt  []byte
	// decode decodes pkt fully and returns a value derived from every field
	// so that nothing is optimised away.
	decode func(b []byte) int
}

var sink int

// raceEnabled is set by race_test.go under -race.
var raceEnabled bool

// fstream1400 builds a ~1400-byte f-stream of 20 records: 5 opens with
// LFN, 5 xfr, 5 closes with OPS+SSQ, 4 plain closes and a disc.
func fstream1400() []byte {
	var fb FStreamBuilder
	fb.Reset(make([]byte, 0, 2048), testHdr, 1700000000, 1700000060, testSID, true)
	lfn := []byte("/store/mc/RunIISummer20UL18/TTToSemiLeptonic/AODSIM/106X_v16-v1/0000/ABCD.root")[:78]
	for i := range uint32(5) {
		fb.Open(FileOpen{FileID: 100 + i, FileSize: 1 << 30, HasLFN: true, User: 7, LFN: lfn})
	}
	for i := range uint32(5) {
		fb.Xfr(FileXfr{FileID: 100 + i, Read: 1 << 20, Readv: 1 << 21})
	}
	for i := range uint32(5) {
		fb.Close(FileClose{FileID: 100 + i, Read: 1 << 22, HasOps: true, HasSSQ: true, Ops: Ops{Read: 10, RdMin: 1, RdMax: 1 << 20}, SSQ: SSQ{Read: 1e12}})
	}
	for i := range uint32(4) {
		fb.Close(FileClose{FileID: 200 + i, Read: 1})
	}
	fb.Disc(7)
	return fb.Finish(1700000060)
}

func decodeFStreamAll(b []byte) int {
	f, err := DecodeFStream(b)
	if err != nil {
		panic(err)
	}
	n := int(f.SID)
	it := f.Records()
	for it.Next() {
		r := it.Rec()
		switch r.Type {
		case RecOpen:
			o := r.Open()
			n += int(o.FileSize) + len(o.LFN) + int(o.User)
		case RecClose:
			c := r.Close()
			n += int(c.Read+c.Readv+c.Write) + int(c.Ops.Read) + int(c.SSQ.Read)
		case RecXfr:
			x := r.Xfr()
			n += int(x.Read + x.Readv + x.Write)
		case RecDisc:
			n += int(r.ID)
		}
	}
	return n
}

func decodeMapUser(b []byte) int {
	m, err := DecodeMap(b)
	if err != nil {
		panic(err)
	}
	u, p := m.Split()
	id := ParseUserID(u, true)
	l := ParseLogin(p)
	return int(m.DictID) + len(id.User) + len(id.Host) + len(id.SID) + len(l.Name) + len(l.Org) + int(l.IPv)
}

func decodeMapPath(b []byte) int {
	m, err := DecodeMap(b)
	if err != nil {
		panic(err)
	}
	u, p := m.Split()
	id := ParseUserID(u, true)
	return int(m.DictID) + len(id.User) + len(p)
}

func decodeTraceAll(b []byte) int {
	t, err := DecodeTrace(b)
	if err != nil {
		panic(err)
	}
	n := 0
	for i := 0; i < t.Len(); i++ {
		e := t.Entry(i)
		switch e.Kind() {
		case TraceIO:
			off, l := e.IO()
			n += int(off) + int(l)
		case TraceOpen:
			n += int(e.OpenSize())
		case TraceReadv, TraceReadu:
			_, s, tot := e.Readv()
			n += int(s) + int(tot)
		case TraceClose:
			r, w := e.CloseTotals()
			n += int(r + w)
		case TraceDisc:
			_, s := e.Disc()
			n += int(s)
		case TraceWindow:
			_, a, c := e.Window()
			n += int(a + c)
		}
		n += int(e.DictID())
	}
	return n
}

func decodeRedirAll(b []byte) int {
	r, err := DecodeRedir(b)
	if err != nil {
		panic(err)
	}
	n := 0
	it := r.Entries()
	for it.Next() {
		e := it.Entry()
		n += len(e.Host) + len(e.Path) + int(e.User) + int(e.Time)
	}
	return n
}

func decodeGStreamAll(b []byte) int {
	g, err := DecodeGStream(b)
	if err != nil {
		panic(err)
	}
	n := int(g.Provider)
	it := g.Lines()
	for it.Next() {
		n += len(it.Line())
	}
	return n
}

func decodeTextGStreamAll(b []byte) int {
	g, err := DecodeTextGStream(b)
	if err != nil {
		panic(err)
	}
	n := int(g.Provider) + int(g.TEnd)
	it := g.Lines()
	for it.Next() {
		n += len(it.Line())
	}
	return n
}

func decodeCases() []decodeCase {
	var tb TraceBuilder
	tb.Reset(nil, testHdr)
	tb.Window(testSID, 1700000000, 1700000000)
	for i := range uint32(40) {
		tb.Open(i, 1<<30)
		tb.IO(i, 4096, 1024)
		tb.Readv(i, 1, 8, 1<<16, false)
		tb.Close(i, 1<<33, 12)
	}
	tb.Disc(7, 0, 100)
	tb.Window(testSID, 1700000060, 1700000060)

	var rb RedirBuilder
	rb.Reset(nil, testHdr, testSID)
	rb.Mark(60, 1700000000)
	for range 20 {
		rb.Redirect(RedirEntry{Op: 5, Port: 1094, User: 3, Host: []byte("data.example.org"), Path: []byte("/store/mc/some/file.root")})
	}
	rb.Mark(60, 1700000060)

	var lines [][]byte
	for range 8 {
		lines = append(lines, gLines...)
	}
	return []decodeCase{
		{"map-u", mapPkt(CodeUser, 5, "xroot/cmsplt01.2705723:202129656347755@b9p20p7281.cern.ch\n&p=gsi&n=cmsuxxxx&h=b9p20p7281.cern.ch&o=cms cms&r=NULL NULL&g=/cms /cms/uscms&m=&R=unknown&x=python3&y=&I=6&I=6"), decodeMapUser},
		{"map-d", mapPkt(CodePath, 8, "https/unknown.324184:258305997245184@[::198.124.239.10]\n/ncar/rda/d651007/"+strings.Repeat("b.e13.BHISTC5.ne120_t12/", 8)+"U500.nc"), decodeMapPath},
		{"fstream-1400B-20recs", fstream1400(), decodeFStreamAll},
		{"trace", tb.Finish(), decodeTraceAll},
		{"redir", rb.Finish(), decodeRedirAll},
		{"gstream", AppendGStream(nil, testHdr, 1, 2, ProviderCache, testSID, lines), decodeGStreamAll},
		{"text-gstream", AppendTextGStream(nil, TextGStream{Code: 'g', Pseq: 1, Stod: 1700000000, SID: testSID, Provider: 'C', TBeg: 1, TEnd: 2, Src: []byte(`{"site":"T2","host":"h"}`)}, lines), decodeTextGStreamAll},
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, c := range decodeCases() {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.pkt)))
			b.ReportAllocs()
			for b.Loop() {
				sink += c.decode(c.pkt)
			}
		})
	}
}

// BenchmarkValidate measures the generic entry point on the same packets.
func BenchmarkValidate(b *testing.B) {
	for _, c := range decodeCases() {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.pkt)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Validate(c.pkt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDecodeAllocs asserts the zero-allocation hot path for every kind,
// for the Decode functions and for Validate, on valid and rejected input.
func TestDecodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	cases := decodeCases()
	if n := len(cases[2].pkt); n < 1350 || n > 1450 {
		t.Fatalf("f-stream benchmark packet is %d bytes, want ~1400", n)
	}
	for _, c := range cases {
		if a := testing.AllocsPerRun(100, func() { sink += c.decode(c.pkt) }); a != 0 {
			t.Errorf("%s: %v allocs per decode", c.name, a)
		}
		if a := testing.AllocsPerRun(100, func() { _, _ = Validate(c.pkt) }); a != 0 {
			t.Errorf("%s: %v allocs per Validate", c.name, a)
		}
	}
	for _, p := range seedPackets(t) {
		if a := testing.AllocsPerRun(20, func() { _, _ = Validate(p.data) }); a != 0 {
			t.Errorf("seed %s: %v allocs per Validate", p.name, a)
		}
	}
}

// TestEncodeAllocs: the encoders append into a buffer with room and
// allocate nothing.
func TestEncodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	buf := make([]byte, 0, 65536)
	a := testing.AllocsPerRun(50, func() {
		var fb FStreamBuilder
		fb.Reset(buf[:0], testHdr, 1, 2, testSID, true)
		fb.Open(FileOpen{FileID: 1, HasLFN: true, LFN: []byte("/a/b")})
		fb.Close(FileClose{FileID: 1, HasSSQ: true})
		_ = fb.Finish(3)
		var tb TraceBuilder
		tb.Reset(buf[:0], testHdr)
		tb.Window(1, 2, 3)
		tb.Close(1, 1<<40, 5)
		_ = tb.Finish()
		var rb RedirBuilder
		rb.Reset(buf[:0], testHdr, 1)
		rb.Redirect(RedirEntry{Host: []byte("h"), Path: []byte("/p")})
		_ = rb.Finish()
		_ = AppendGStream(buf[:0], testHdr, 1, 2, 'C', 3, gLines)
		_ = AppendTextGStream(buf[:0], TextGStream{CGI: true, Code: 'g', Provider: 'C'}, gLines)
		_ = AppendMap(buf[:0], testHdr, 1, []byte("xroot/u.1:2@h"))
	})
	if a != 0 {
		t.Errorf("%v allocs per encode", a)
	}
}
