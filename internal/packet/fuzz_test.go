package packet

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpus in testdata/fuzz/FuzzDecode")

// TestSeedCorpus keeps testdata/fuzz/FuzzDecode in step with seedPackets:
// with -update-corpus it writes the seed files (in Go's corpus format),
// otherwise it checks that each one is committed unchanged.
func TestSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	for _, p := range seedPackets(t) {
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", p.data)
		path := filepath.Join(dir, "seed-"+p.name)
		if *updateCorpus {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("seed %s missing (run go test -run TestSeedCorpus -update-corpus): %v", p.name, err)
		}
		if string(got) != want {
			t.Errorf("seed %s is stale (run go test -run TestSeedCorpus -update-corpus)", p.name)
		}
	}
}

// FuzzDecode checks that no input makes the decoder panic or read out of
// range, that every rejection carries a known reason, and that a decoded
// f-stream or g-stream re-encodes to a packet that decodes to the same
// values.
//
//	go test -run='^$' -fuzz=FuzzDecode -fuzztime=10m -parallel=1 ./internal/packet
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := Validate(b)
		if k != Classify(b) {
			t.Fatalf("Validate kind %v, Classify %v", k, Classify(b))
		}
		if err != nil {
			if r := ReasonOf(err); r == 0 || r >= numReasons {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		switch k {
		case KindFStream:
			checkFStreamReencode(t, b)
		case KindGStream:
			g, _ := DecodeGStream(b)
			var lines [][]byte
			it := g.Lines()
			for it.Next() {
				lines = append(lines, it.Line())
			}
			g2, err := DecodeGStream(AppendGStream(nil, g.Header, g.TBeg, g.TEnd, g.Provider, g.SID, lines))
			if err != nil {
				t.Fatalf("re-encoded g-stream: %v", err)
			}
			it2 := g2.Lines()
			for i := 0; it2.Next(); i++ {
				if i >= len(lines) || !bytes.Equal(it2.Line(), lines[i]) {
					t.Fatalf("g line %d differs after re-encoding", i)
				}
			}
		}
	})
}

// fileRecs decodes every record of an f-stream into comparable values.
func fileRecs(f *FStream) []any {
	var out []any
	it := f.Records()
	for it.Next() {
		r := it.Rec()
		switch r.Type {
		case RecOpen:
			o := r.Open()
			o.LFN = append([]byte{}, o.LFN...)
			if !o.HasLFN {
				o.LFN = nil
			}
			out = append(out, o)
		case RecClose:
			out = append(out, r.Close())
		case RecXfr:
			out = append(out, r.Xfr())
		case RecDisc:
			out = append(out, r.ID)
		}
	}
	return out
}

func checkFStreamReencode(t *testing.T, b []byte) {
	f, err := DecodeFStream(b)
	if err != nil {
		t.Fatal(err)
	}
	recs := fileRecs(&f)
	var fb FStreamBuilder
	fb.Reset(nil, f.Header, f.TBeg, f.TEnd, f.SID, f.HasSID)
	for _, r := range recs {
		switch v := r.(type) {
		case FileOpen:
			fb.Open(v)
		case FileClose:
			fb.Close(v)
		case FileXfr:
			fb.Xfr(v)
		case uint32:
			fb.Disc(v)
		}
	}
	if fb.Len() > 65535 {
		return // the re-encoded LFN padding can outgrow plen
	}
	f2, err := DecodeFStream(fb.Finish(f.TEnd))
	if err != nil {
		t.Fatalf("re-encoded f-stream: %v", err)
	}
	if f2.TBeg != f.TBeg || f2.TEnd != f.TEnd || f2.SID != f.SID || f2.HasSID != f.HasSID {
		t.Fatalf("isTime differs after re-encoding")
	}
	recs2 := fileRecs(&f2)
	if len(recs2) != len(recs) {
		t.Fatalf("%d records after re-encoding, want %d", len(recs2), len(recs))
	}
	for i := range recs {
		if fmt.Sprintf("%+v", recs[i]) != fmt.Sprintf("%+v", recs2[i]) {
			t.Fatalf("record %d: %+v after re-encoding, want %+v", i, recs2[i], recs[i])
		}
	}
}
