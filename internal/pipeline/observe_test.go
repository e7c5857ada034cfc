package pipeline

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
)

// TestObserveAfterCommit: Options.Observe sees every record committed,
// and the server's activity (its f-stream heard, its open file).
func TestObserveAfterCommit(t *testing.T) {
	st := &fakeStore{}
	o := testOptions()
	var mu sync.Mutex
	var recs int
	var heard bool
	o.Observe = func(chunks [][]record.Record, _ []record.Event, act []correlate.ServerActivity) {
		for _, c := range chunks {
			recs += len(c)
		}
		for _, a := range act {
			if a.ServerIP == "192.0.2.7" && a.Heard[correlate.StreamF] > 0 {
				heard = true
			}
		}
	}
	p, err := New(context.Background(), o, st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var freed int32
	var seq, fseq uint8
	in := make(chan *source.Batch, 1)
	in <- batchOf("192.0.2.7:1094", transfer(1700000000, &seq, &fseq, 50, 51, true), nil, &freed, &mu)
	close(in)
	if err := p.Run(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if recs != len(st.recs) || recs != 1 || !heard {
		t.Errorf("observed %d records (store %d), f-stream heard %v", recs, len(st.recs), heard)
	}
}

// TestRestoredCountersFromTheStart: a pipeline restored from a checkpoint
// reports the restored counters at once, not from its first barrier on (a
// jump the health charts drew as a spike after every restart).
func TestRestoredCountersFromTheStart(t *testing.T) {
	st := &fakeStore{}
	var mu sync.Mutex
	var freed int32
	var seq, fseq uint8
	p, err := New(context.Background(), testOptions(), st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *source.Batch, 1)
	in <- batchOf("192.0.2.8:1094", transfer(1700000000, &seq, &fseq, 60, 61, false), nil, &freed, &mu)
	close(in)
	if err := p.Run(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	before := p.Stats().Accounted
	p2, err := New(context.Background(), testOptions(), st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := p2.Stats().Accounted; got != before || got == 0 {
		t.Errorf("restored pipeline reports %d accounted before its first barrier, checkpoint holds %d", got, before)
	}
}

// The redirect checkpoint of a cluster collector holds the linker's state
// and the feed's position; one written outside a cluster is the linker's
// state alone, and a truncated frame is no state at all.
func TestLinkerStateFraming(t *testing.T) {
	l, f := []byte("XRDMLNK2 linker"), []byte("XRDMFEED1 feed")
	gl, gf := splitLinkerState(joinLinkerState(l, f))
	if string(gl) != string(l) || string(gf) != string(f) {
		t.Errorf("split %q %q", gl, gf)
	}
	if gl, gf := splitLinkerState(l); string(gl) != string(l) || gf != nil {
		t.Errorf("plain state split %q %q", gl, gf)
	}
	b := joinLinkerState(l, f)
	if gl, gf := splitLinkerState(b[:len(linkerFeedMagic)+3]); gl != nil || gf != nil {
		t.Errorf("truncated frame split %q %q", gl, gf)
	}
}

// A redirect checkpoint is written compressed and read back the same; one
// written before compression is read as it is; a damaged one is an error
// (the linker starts empty, loudly), not a panic.
func TestLinkerStatePacked(t *testing.T) {
	l := joinLinkerState([]byte("XRDMLNK2"+strings.Repeat("xrootd.example.org/store/user/alice/file.root", 1000)), []byte("XRDMFEED1 feed"))
	packed := packLinkerState(l)
	if len(packed) >= len(l)/4 {
		t.Errorf("packed %d bytes of %d", len(packed), len(l))
	}
	for _, c := range []struct {
		name string
		in   []byte
	}{{"packed", packed}, {"plain (an older checkpoint)", l}} {
		got, err := unpackLinkerState(c.in)
		if err != nil || !bytes.Equal(got, l) {
			t.Errorf("%s: %v, %d bytes", c.name, err, len(got))
		}
	}
	if _, err := unpackLinkerState(packed[:len(packed)-10]); err == nil {
		t.Error("a truncated packed checkpoint read without error")
	}
}
