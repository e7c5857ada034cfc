package correlate

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

func redirEvent(t *testing.T, at, received int64, op, host, user, path string) record.Event {
	t.Helper()
	return redirEventW(t, "192.0.2.100", at, 0, received, op, host, user, path)
}

// redirEventW is a redirect by redirector src in a timing window of win
// seconds from at.
func redirEventW(t testing.TB, src string, at, win, received int64, op, host, user, path string) record.Event {
	t.Helper()
	b, err := json.Marshal(redirect{Op: op, Path: path, User: user, ClientHost: host, TargetHost: "data.example.org", Port: 1094, WindowS: uint32(win)})
	if err != nil {
		t.Fatal(err)
	}
	return record.Event{Type: record.EventRedirect, Valid: true, Data: b, Time: time.Unix(at, 0).UTC(), Received: time.Unix(received, 0).UTC(),
		ServerIP: src, EventID: fmt.Sprint(src, at, received, host, user, path)}
}

func linkOpenOf(fileID uint32, start, received int64, host, user, path string) Open {
	return Open{ServerIP: "192.0.2.1", ServerStod: 1, ServerID: 2, FileID: fileID, ClientHost: host, User: user, Path: path, Start: start, StartMax: start, Received: received}
}

func recOf(fileID uint32, start, received int64) record.Record {
	return record.Record{ServerIP: "192.0.2.1", ServerStod: 1, ServerID: 2, FileID: fileID, Start: time.Unix(start, 0).UTC(), Received: time.Unix(received, 0).UTC(),
		RecordID: fmt.Sprint(fileID)}
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

// linkStep is one commit's input to a Linker.
type linkStep struct {
	now   int64
	recs  []record.Record
	evs   []record.Event
	opens []Open
}

// runLinker commits the steps (with a restart between commits when
// restart), then the final commit, and returns the records by file id and
// the order they came out in.
func runLinker(t *testing.T, steps []linkStep, restart bool) (map[uint32]record.Record, []uint32) {
	t.Helper()
	l := NewLinker(DefaultLinkWindow, time.Hour, 1<<20)
	out := map[uint32]record.Record{}
	var order []uint32
	take := func(recs []record.Record) {
		for _, r := range recs {
			if _, dup := out[r.FileID]; dup {
				t.Fatalf("file %d written twice", r.FileID)
			}
			out[r.FileID] = r
			order = append(order, r.FileID)
		}
	}
	for _, st := range steps {
		take(l.Link(slices.Clone(st.recs), st.evs, st.opens, time.Unix(st.now, 0), false))
		if restart {
			l = roundTrip(t, l)
		}
	}
	take(l.Link(nil, nil, nil, time.Unix(1<<31, 0), true))
	return out, order
}

func TestLinker(t *testing.T) {
	steps := []linkStep{
		// Two hops (a meta-redirector, then a site redirector) before the
		// open of file 1; a stat redirect does not count.
		{now: 101, evs: []record.Event{
			redirEvent(t, 100, 101, "openr", "wn1", "alice", "/store/a?x=1"),
			redirEventW(t, "192.0.2.101", 101, 0, 101, "openr", "wn1", "alice", "/store/a"),
			redirEvent(t, 101, 101, "stat", "wn1", "alice", "/store/a"),
		}},
		{now: 104, opens: []Open{linkOpenOf(1, 103, 104, "wn1", "alice", "/store/a")}},
		// File 2: the open and the record of a short transfer arrive
		// before its redirect (the redirector's r-stream, with a 60 s
		// window, was flushed later): the record waits for it.
		{now: 201, opens: []Open{linkOpenOf(2, 200, 201, "wn2", "bob", "/store/b")}},
		{now: 212, recs: []record.Record{recOf(2, 200, 212)}},
		{now: 250, evs: []record.Event{redirEventW(t, "192.0.2.100", 170, 60, 250, "openw", "wn2", "bob", "/store/b")}},
		// File 3: the same client opens /store/a again without a redirect.
		{now: 300, opens: []Open{linkOpenOf(3, 300, 300, "wn1", "alice", "/store/a")}},
		// A redirect of another client: never linked, forgotten.
		{now: 310, evs: []record.Event{redirEvent(t, 310, 310, "openr", "wn9", "eve", "/store/a")}},
		{now: 400, recs: []record.Record{recOf(1, 103, 400), recOf(3, 300, 400)}},
		{now: 1000, opens: []Open{linkOpenOf(4, 1000, 1000, "x", "y", "/z")}}, // time passes
	}
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprint("restart=", restart), func(t *testing.T) {
			m, _ := runLinker(t, steps, restart)
			// The redirects happened in [100, 101) and [101, 102), the open
			// in [103, 104): the first at least 100 and at most 101, so 2 to
			// 4 s before the open.
			if r := m[1]; r.RedirectHops != 2 || r.RedirectDelayMS != 2000 || r.RedirectDelayMaxMS != 4000 {
				t.Errorf("file 1: hops %d delay [%d, %d] ms, want 2 in [2000, 4000]", r.RedirectHops, r.RedirectDelayMS, r.RedirectDelayMaxMS)
			}
			// The redirect happened in [170, 231), the open in [200, 201).
			if r := m[2]; r.RedirectHops != 1 || r.RedirectDelayMS != 0 || r.RedirectDelayMaxMS != 31000 {
				t.Errorf("file 2: hops %d delay [%d, %d] ms, want 1 in [0, 31000]", r.RedirectHops, r.RedirectDelayMS, r.RedirectDelayMaxMS)
			}
			if r := m[3]; r.RedirectHops != 0 || r.RedirectDelayMS != 0 {
				t.Errorf("file 3 was not redirected: %+v", r)
			}
			if len(m) != 3 {
				t.Errorf("%d records out, want 3", len(m))
			}
		})
	}
}

// The same input, split into commits anywhere, gives the same records:
// nothing depends on when a commit happens (only the order in which the
// records come out does). Every transfer is linked with its hop count,
// and the true delay lies within the bounds.
func TestLinkerDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	// 300 transfers of 40 clients on 5 paths, 1 or 2 hops each, with
	// redirects that reach the collector up to 60 s late.
	type item struct {
		at  int64
		rec *record.Record
		ev  *record.Event
		op  *Open
	}
	var items []item
	truth := map[uint32][3]int64{} // hops, true delay ms, 0
	for i := range 300 {
		id := uint32(i + 1)
		host, path := fmt.Sprintf("wn%d", rng.IntN(40)), fmt.Sprintf("/store/f%d", rng.IntN(5))
		r0 := int64(1000 + i*7 + rng.IntN(5))
		hops := 1 + rng.IntN(2)
		ms := int64(0)
		for h := range hops {
			at := r0 + ms/1000
			ev := redirEventW(t, fmt.Sprint("192.0.2.", 100+h), at, 1, at+1+int64(rng.IntN(60)), "openr", host, "u", path)
			items = append(items, item{at: ev.Received.Unix(), ev: &ev})
			ms += 100 + int64(rng.IntN(400))
		}
		open := r0 + ms/1000
		o := linkOpenOf(id, open, open+int64(rng.IntN(10)), host, "u", path)
		o.StartMax = open + 1
		items = append(items, item{at: o.Received, op: &o})
		rec := recOf(id, open, o.Received+int64(rng.IntN(30)))
		items = append(items, item{at: rec.Received.Unix(), rec: &rec})
		truth[id] = [3]int64{int64(hops), ms, 0}
	}
	slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(a.at, b.at) })
	run := func(split func(i int) bool) map[uint32]record.Record {
		var steps []linkStep
		var cur linkStep
		for i, it := range items {
			cur.now = it.at
			switch {
			case it.rec != nil:
				cur.recs = append(cur.recs, *it.rec)
			case it.ev != nil:
				cur.evs = append(cur.evs, *it.ev)
			default:
				cur.opens = append(cur.opens, *it.op)
			}
			if split(i) {
				steps = append(steps, cur)
				cur = linkStep{}
			}
		}
		steps = append(steps, cur)
		m, _ := runLinker(t, steps, false)
		return m
	}
	want := run(func(int) bool { return false })
	for trial := range 5 {
		every := 1 + trial*7
		got := run(func(i int) bool { return rng.IntN(every) == 0 })
		for id, w := range want {
			g := got[id]
			if g.RedirectHops != w.RedirectHops || g.RedirectDelayMS != w.RedirectDelayMS || g.RedirectDelayMaxMS != w.RedirectDelayMaxMS {
				t.Fatalf("trial %d, file %d: %d hops [%d, %d] ms, one commit gave %d [%d, %d]", trial, id,
					g.RedirectHops, g.RedirectDelayMS, g.RedirectDelayMaxMS, w.RedirectHops, w.RedirectDelayMS, w.RedirectDelayMaxMS)
			}
		}
	}
	linked, exact := 0, 0
	for id, w := range want {
		tr := truth[id]
		if w.RedirectHops == 0 {
			continue
		}
		linked++
		if int64(w.RedirectHops) == tr[0] {
			exact++
		}
		if tr[1] < w.RedirectDelayMS || tr[1] > w.RedirectDelayMaxMS {
			t.Errorf("file %d: true delay %d ms outside [%d, %d]", id, tr[1], w.RedirectDelayMS, w.RedirectDelayMaxMS)
		}
	}
	t.Logf("%d of %d linked, %d with the exact hop count", linked, len(truth), exact)
	if linked < len(truth)*95/100 {
		t.Errorf("%d of %d linked", linked, len(truth))
	}
}

// The Linker's memory stays under its bound whatever the input.
func TestLinkerBounded(t *testing.T) {
	const maxBytes = 64 << 10
	l := NewLinker(time.Hour, time.Hour, maxBytes)
	out := 0
	for i := range 10000 {
		host := fmt.Sprintf("host%d", i)
		out += len(l.Link([]record.Record{recOf(uint32(i), int64(i), int64(i))}, []record.Event{redirEvent(t, int64(i), int64(i), "openr", host, "u", "/p")},
			[]Open{linkOpenOf(uint32(i), int64(i), int64(i), host, "u", "/q")}, time.Unix(int64(i), 0), false))
		if l.bytes > maxBytes+heldCost {
			t.Fatalf("after %d: %d bytes, bound %d", i, l.bytes, maxBytes)
		}
	}
	out += len(l.Link(nil, nil, nil, time.Unix(20000, 0), true))
	if l.Stats().Forgotten == 0 || out != 10000 {
		t.Errorf("%d forgotten, %d records out of 10000", l.Stats().Forgotten, out)
	}
}

func FuzzLinkerCheckpoint(f *testing.F) {
	l := NewLinker(DefaultLinkWindow, time.Hour, 1<<20)
	l.Link([]record.Record{recOf(1, 1, 1)}, []record.Event{{Type: record.EventRedirect, Valid: true, Data: []byte(`{"op":"openr","path":"/a","user":"u","client_host":"h"}`), Time: time.Unix(5, 0)}},
		[]Open{linkOpenOf(1, 1, 1, "h2", "u", "/a")}, time.Unix(2, 0), false)
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

// TestLinkerLazyOpens: opens that come before any redirect ever has are
// kept lazily (a copy each, not indexed); the first redirect indexes
// them, and each record gets what it gets when a redirect of another
// client has come first (every open indexed at its arrival), across
// restarts too.
func TestLinkerLazyOpens(t *testing.T) {
	steps := []linkStep{
		// File 2: opened before any redirect, and due (its deadline, 122 s
		// after its arrival, passed) before its redirect comes.
		{now: 10, opens: []Open{linkOpenOf(2, 10, 10, "wn2", "bob", "/store/b")}},
		// File 1: opened before any redirect; its redirect (a 60 s
		// window, flushed late) and then its record follow.
		{now: 100, opens: []Open{linkOpenOf(1, 99, 100, "wn1", "alice", "/store/a")}},
		{now: 103, recs: []record.Record{recOf(2, 10, 103)}},
		{now: 140, evs: []record.Event{redirEventW(t, "192.0.2.100", 90, 60, 140, "openr", "wn1", "alice", "/store/a"),
			redirEventW(t, "192.0.2.100", 5, 60, 140, "openr", "wn2", "bob", "/store/b")}},
		{now: 150, recs: []record.Record{recOf(1, 99, 150)}},
		{now: 1000, opens: []Open{linkOpenOf(3, 1000, 1000, "x", "y", "/z")}},
	}
	eager := slices.Clone(steps)
	eager[0].evs = []record.Event{redirEvent(t, 10, 10, "openr", "elsewhere", "nobody", "/n")}
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprint("restart=", restart), func(t *testing.T) {
			l := NewLinker(DefaultLinkWindow, time.Hour, 1<<20)
			l.Link(nil, nil, []Open{linkOpenOf(9, 1, 1, "wn9", "u", "/p")}, time.Unix(1, 0), false)
			if len(l.lazy) != 1 || len(l.opens) != 0 || len(l.pend) != 0 {
				t.Fatalf("before any redirect: %d lazy, %d indexed opens", len(l.lazy), len(l.opens))
			}
			got, _ := runLinker(t, steps, restart)
			want, _ := runLinker(t, eager, restart)
			// The redirect happened in [90, 151), the open in [99, 100).
			if r := got[1]; r.RedirectHops != 1 || r.RedirectDelayMS != 0 || r.RedirectDelayMaxMS != 10000 {
				t.Errorf("file 1: hops %d delay [%d, %d] ms, want 1 in [0, 10000]", r.RedirectHops, r.RedirectDelayMS, r.RedirectDelayMaxMS)
			}
			if got[2].RedirectHops != 0 {
				t.Errorf("file 2 linked to a redirect that came after its deadline: %+v", got[2])
			}
			if len(got) != 2 || len(want) != 2 {
				t.Fatalf("%d and %d records out, want 2", len(got), len(want))
			}
			for id, w := range want {
				g := got[id]
				if g.RedirectHops != w.RedirectHops || g.RedirectDelayMS != w.RedirectDelayMS || g.RedirectDelayMaxMS != w.RedirectDelayMaxMS {
					t.Errorf("file %d: %d hops [%d, %d] ms lazily, %d [%d, %d] indexed", id,
						g.RedirectHops, g.RedirectDelayMS, g.RedirectDelayMaxMS, w.RedirectHops, w.RedirectDelayMS, w.RedirectDelayMaxMS)
				}
			}
		})
	}
}

// TestLinkerTypedRedirects: a redirect event made in this process carries
// what the linker reads (Event.Redirect); linking from it gives what
// decoding its data gives (events read back from a store or from the
// cluster's shared redirects have only the data).
func TestLinkerTypedRedirects(t *testing.T) {
	typed := func(evs []record.Event) []record.Event {
		out := slices.Clone(evs)
		for i := range out {
			var d redirectData
			if err := json.Unmarshal(out[i].Data, &d); err != nil {
				t.Fatal(err)
			}
			out[i].Redirect = &record.RedirectLink{Op: d.Op, Path: d.Path, User: d.User, ClientHost: d.ClientHost, WindowS: d.WindowS}
			out[i].Data = []byte("not read")
		}
		return out
	}
	steps := []linkStep{
		{now: 101, evs: []record.Event{
			redirEvent(t, 100, 101, "openr", "wn1", "alice", "/store/a?x=1"),
			redirEventW(t, "192.0.2.101", 101, 0, 101, "openr", "wn1", "alice", "/store/a"),
			redirEvent(t, 101, 101, "stat", "wn1", "alice", "/store/a"),
		}},
		{now: 104, opens: []Open{linkOpenOf(1, 103, 104, "wn1", "alice", "/store/a")}},
		{now: 201, opens: []Open{linkOpenOf(2, 200, 201, "wn2", "bob", "/store/b")}},
		{now: 250, evs: []record.Event{redirEventW(t, "192.0.2.100", 170, 60, 250, "openw", "wn2", "bob", "/store/b")}},
		{now: 400, recs: []record.Record{recOf(1, 103, 400), recOf(2, 200, 400)}},
	}
	want, _ := runLinker(t, steps, false)
	for i := range steps {
		steps[i].evs = typed(steps[i].evs)
	}
	got, _ := runLinker(t, steps, true)
	if len(got) != 2 || len(want) != 2 {
		t.Fatalf("%d and %d records", len(got), len(want))
	}
	for id, w := range want {
		g := got[id]
		if g.RedirectHops != w.RedirectHops || g.RedirectDelayMS != w.RedirectDelayMS || g.RedirectDelayMaxMS != w.RedirectDelayMaxMS || w.RedirectHops == 0 {
			t.Errorf("file %d: typed %d hops [%d, %d], decoded %d [%d, %d]", id, g.RedirectHops, g.RedirectDelayMS, g.RedirectDelayMaxMS,
				w.RedirectHops, w.RedirectDelayMS, w.RedirectDelayMaxMS)
		}
	}
}

// TestLinkerLazyBounded: before any redirect, the opens kept lazily hold
// at most a quarter of the byte bound, whatever their rate.
func TestLinkerLazyBounded(t *testing.T) {
	const maxBytes = 1 << 20
	l := NewLinker(time.Minute, time.Hour, maxBytes)
	for i := range 20000 {
		l.Link(nil, nil, []Open{linkOpenOf(uint32(i), int64(i/100), int64(i/100), fmt.Sprint("host", i), "u", "/q")}, time.Unix(int64(i/100), 0), false)
		if l.bytes > maxBytes/lazyShare+lazyCost(&l.lazy[len(l.lazy)-1]) {
			t.Fatalf("after %d opens: %d bytes, their share of the bound is %d", i, l.bytes, maxBytes/lazyShare)
		}
	}
	if l.Stats().Forgotten == 0 || len(l.opens) != 0 {
		t.Errorf("%d forgotten, %d indexed", l.Stats().Forgotten, len(l.opens))
	}
}
