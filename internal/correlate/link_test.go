package correlate

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

func redirEvent(t *testing.T, at, received int64, op, host, user, path string) record.Event {
	t.Helper()
	b, err := json.Marshal(redirect{Op: op, Path: path, User: user, ClientHost: host, TargetHost: "data.example.org", Port: 1094})
	if err != nil {
		t.Fatal(err)
	}
	return record.Event{Type: record.EventRedirect, Valid: true, Data: b, Time: time.Unix(at, 0).UTC(), Received: time.Unix(received, 0).UTC()}
}

func linkOpenOf(fileID uint32, start, received int64, host, user, path string) Open {
	return Open{ServerIP: "192.0.2.1", ServerStod: 1, ServerID: 2, FileID: fileID, ClientHost: host, User: user, Path: path, Start: start, Received: received}
}

func recOf(fileID uint32, start int64) record.Record {
	return record.Record{ServerIP: "192.0.2.1", ServerStod: 1, ServerID: 2, FileID: fileID, Start: time.Unix(start, 0).UTC()}
}

// roundTrip checkpoints and restores l, as a restart between commits does.
func roundTrip(t *testing.T, l *Linker) *Linker {
	t.Helper()
	b, err := l.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	n := NewLinker(DefaultLinkWindow, time.Hour, 1<<20)
	if err := n.UnmarshalBinary(b); err != nil {
		t.Fatalf("restore: %v", err)
	}
	b2, _ := n.MarshalBinary()
	if string(b2) != string(b) {
		t.Fatal("checkpoint of the restored linker differs")
	}
	return n
}

func TestLinker(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprint("restart=", restart), func(t *testing.T) {
			l := NewLinker(DefaultLinkWindow, time.Hour, 1<<20)
			step := func(recs []record.Record, evs []record.Event, opens []Open) {
				l.Link(recs, evs, opens)
				if restart {
					l = roundTrip(t, l)
				}
			}
			// Two hops (a meta-redirector, then a site redirector) before the
			// open of file 1; a stat redirect does not count.
			step(nil, []record.Event{
				redirEvent(t, 100, 101, "openr", "wn1", "alice", "/store/a?x=1"),
				redirEvent(t, 101, 101, "openr", "wn1", "alice", "/store/a"),
				redirEvent(t, 101, 101, "stat", "wn1", "alice", "/store/a"),
			}, nil)
			step(nil, nil, []Open{linkOpenOf(1, 103, 104, "wn1", "alice", "/store/a")})
			// File 2: the open arrives before its redirect (the redirector's
			// r-stream was flushed later).
			step(nil, nil, []Open{linkOpenOf(2, 200, 201, "wn2", "bob", "/store/b")})
			step(nil, []record.Event{redirEvent(t, 199, 230, "openw", "wn2", "bob", "/store/b")}, nil)
			// File 3: the same client opens /store/a again without a redirect.
			step(nil, nil, []Open{linkOpenOf(3, 300, 300, "wn1", "alice", "/store/a")})
			// A redirect of another client: never linked, forgotten.
			step(nil, []record.Event{redirEvent(t, 310, 310, "openr", "wn9", "eve", "/store/a")}, nil)
			recs := []record.Record{recOf(1, 103), recOf(2, 200), recOf(3, 300)}
			step(recs, nil, nil)
			if r := recs[0]; r.RedirectHops != 2 || r.RedirectDelayMS != 3000 {
				t.Errorf("file 1: hops %d delay %d ms, want 2 and 3000", r.RedirectHops, r.RedirectDelayMS)
			}
			if r := recs[1]; r.RedirectHops != 1 || r.RedirectDelayMS != 1000 {
				t.Errorf("file 2: hops %d delay %d ms, want 1 and 1000", r.RedirectHops, r.RedirectDelayMS)
			}
			if r := recs[2]; r.RedirectHops != 0 || r.RedirectDelayMS != 0 {
				t.Errorf("file 3 was not redirected: %+v", r)
			}
			step(nil, nil, []Open{linkOpenOf(4, 1000, 1000, "x", "y", "/z")}) // time passes
			if !restart {
				st := l.Stats()
				if st.Linked != 2 || st.Hops != 3 || st.Forgotten != 1 || st.Redirects != 4 {
					t.Errorf("stats %+v", st)
				}
			}
			if len(l.redirs) != 0 || len(l.linked) != 0 || len(l.opens) != 1 {
				t.Errorf("state left: %d redirects, %d links, %d opens", len(l.redirs), len(l.linked), len(l.opens))
			}
		})
	}
}

// The Linker's memory stays under its bound whatever the input.
func TestLinkerBounded(t *testing.T) {
	const maxBytes = 64 << 10
	l := NewLinker(time.Hour, time.Hour, maxBytes)
	for i := range 10000 {
		host := fmt.Sprintf("host%d", i)
		l.Link(nil, []record.Event{redirEvent(t, int64(i), int64(i), "openr", host, "u", "/p")},
			[]Open{linkOpenOf(uint32(i), int64(i), int64(i), host, "u", "/q")})
		if l.bytes > maxBytes {
			t.Fatalf("after %d: %d bytes, bound %d", i, l.bytes, maxBytes)
		}
	}
	if l.Stats().Forgotten == 0 {
		t.Error("nothing forgotten over the bound")
	}
}

func FuzzLinkerCheckpoint(f *testing.F) {
	l := NewLinker(DefaultLinkWindow, time.Hour, 1<<20)
	l.Link(nil, []record.Event{{Type: record.EventRedirect, Valid: true, Data: []byte(`{"op":"openr","path":"/a","user":"u","client_host":"h"}`), Time: time.Unix(5, 0)}},
		[]Open{linkOpenOf(1, 1, 1, "h2", "u", "/a")})
	b, _ := l.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		l := NewLinker(DefaultLinkWindow, time.Hour, 1<<20)
		if l.UnmarshalBinary(b) != nil {
			return
		}
		out, _ := l.MarshalBinary()
		l2 := NewLinker(DefaultLinkWindow, time.Hour, 1<<20)
		if err := l2.UnmarshalBinary(out); err != nil {
			t.Fatalf("re-read: %v", err)
		}
	})
}
