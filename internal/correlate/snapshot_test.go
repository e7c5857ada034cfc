package correlate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// restoreCopy snapshots s, restores the snapshot into a new shard and
// checks that the new shard snapshots to the same bytes (the format is
// canonical: a restored shard is the same state, not an approximation).
func restoreCopy(t testing.TB, s *Shard, cfg Config) *Shard {
	t.Helper()
	var b1 bytes.Buffer
	if err := s.Snapshot(&b1); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	r, err := RestoreShard(cfg, bytes.NewReader(b1.Bytes()))
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	var b2 bytes.Buffer
	if err := r.Snapshot(&b2); err != nil {
		t.Fatalf("snapshot of restored: %v", err)
	}
	if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
		t.Fatalf("snapshot of the restored shard differs (%d vs %d bytes)", b1.Len(), b2.Len())
	}
	// A second snapshot is the first: the marks a snapshot leaves on the
	// logins and tokens it wrote (snapRef) are its own.
	var b3 bytes.Buffer
	if err := s.Snapshot(&b3); err != nil {
		t.Fatalf("second snapshot: %v", err)
	}
	if !bytes.Equal(b1.Bytes(), b3.Bytes()) {
		t.Fatalf("a second snapshot of the same shard differs (%d vs %d bytes)", b1.Len(), b3.Len())
	}
	// The interning tables are caches, refilled from the restored state
	// only: their size is not state.
	if ss, rs := s.Stats(), r.Stats(); !sameState(ss, rs) {
		t.Fatalf("stats differ after restore:\n%+v\n%+v", ss, rs)
	}
	// The byte counts kept as the state changed are those of the tables.
	for _, sh := range []*Shard{s, r} {
		f, se, p := sh.recount()
		_ = se
		if f != sh.fileBytes || p != sh.pendBytes {
			t.Fatalf("byte counts files %d pending %d, tables hold %d and %d", sh.fileBytes, sh.pendBytes, f, p)
		}
		var sessions int64
		for i := range sh.sessIdx.values() {
			sessions += sh.sess.at(i).cost
		}
		if sessions != sh.sessBytes || se != sh.sessBytes {
			t.Fatalf("session bytes %d, sessions cost %d, tables hold %d", sh.sessBytes, sessions, se)
		}
	}
	return r
}

// sameState compares stats but for the size of the interning tables,
// caches refilled from the restored state only.
func sameState(a, b Stats) bool {
	a.InternBytes, b.InternBytes = 0, 0
	return a == b
}

// runSplit replays f, but after the first k steps the shard is
// snapshotted and replaced by its restored copy, as a restart does.
func (f *feed) runSplit(t testing.TB, cfg Config, k int) ([]record.Record, []record.Event, Stats) {
	t.Helper()
	s := NewShard(cfg)
	var recs []record.Record
	var evs []record.Event
	var o Output
	for i, st := range f.steps {
		if i == k {
			s = restoreCopy(t, s, cfg)
		}
		switch {
		case st.d != nil:
			s.Handle(st.d.data, st.d.sender, st.d.at)
		case st.tick:
			s.Tick(st.at)
		case st.flush:
			s.Flush(st.at)
		}
		recs, evs = take(s, &o, recs, evs)
	}
	if k == len(f.steps) {
		s = restoreCopy(t, s, cfg)
	}
	return recs, evs, s.Stats()
}

// sameAsUninterrupted checks that a restart after step k changes nothing.
func (f *feed) sameAsUninterrupted(t *testing.T, cfg Config, k int) ([]record.Record, []record.Event, Stats) {
	t.Helper()
	r1, e1, s1 := f.run(t, cfg)
	r2, e2, s2 := f.runSplit(t, cfg, k)
	if !reflect.DeepEqual(r1, r2) {
		t.Fatalf("split at %d: records differ\n got %+v\nwant %+v", k, r2, r1)
	}
	if !reflect.DeepEqual(e1, e2) {
		t.Fatalf("split at %d: events differ", k)
	}
	if !sameState(s1, s2) {
		t.Fatalf("split at %d: stats differ\n got %+v\nwant %+v", k, s2, s1)
	}
	return r2, e2, s2
}

// A transfer interrupted by a restart after its open and an xfr: the close
// after the restore gives the complete record, identical (id included) to
// an uninterrupted run.
func TestSnapshotMidTransfer(t *testing.T) {
	s := newSrv("192.0.2.50:1094", t0-3600, sid1)
	uid := s.uid("xroot", "alice", 17, "wn1.example.org")
	var f feed
	f.send(s, 0, s.ident("T2_XX_Test"))
	f.send(s, 1, s.login(1, uid, gsiLogin))
	f.send(s, 2, s.path(2, uid, "/store/data/file.root"))
	f.send(s, 60, s.f(0, 60, func(fb *packet.FStreamBuilder) {
		fb.Open(packet.FileOpen{FileID: 2, FileSize: 1 << 30})
		fb.Open(openLFN(3, 1, "/store/data/other.root", 5))
	}))
	f.send(s, 120, s.f(60, 120, func(fb *packet.FStreamBuilder) { fb.Xfr(packet.FileXfr{FileID: 2, Read: 1000}) }))
	split := len(f.steps)
	f.send(s, 180, s.f(120, 180, func(fb *packet.FStreamBuilder) {
		fb.Close(packet.FileClose{FileID: 2, Read: 5000, HasOps: true, HasSSQ: true,
			Ops: packet.Ops{Read: 5, RdMin: 100, RdMax: 2000}, SSQ: packet.SSQ{Read: 1e7}})
		fb.Disc(1)
	}))
	f.tick(180 + 301)
	recs, _, st := f.sameAsUninterrupted(t, DefaultConfig(), split)
	if len(recs) != 2 {
		t.Fatalf("records: %+v", recs)
	}
	m := byFile(recs)
	r := m[2]
	wantID(t, r)
	if r.Reason != record.Complete || r.Start != tu(0) || r.End != tu(180) || r.Path != "/store/data/file.root" ||
		r.User != "alice" || r.DN != "/DC=org/CN=Alice" || r.Site != "T2_XX_Test" || r.ReadBytes != 5000 ||
		r.ReadOps != 5 || r.ReadSqSum != 1e7 || r.FileSize != 1<<30 {
		t.Errorf("record after restore: %+v", r)
	}
	if r := m[3]; r.Reason != record.Disconnect || r.Path != "/store/data/other.root" || r.User != "alice" {
		t.Errorf("disconnected after restore: %+v", r)
	}
	if st.Accounted != 6 || st.TotalLost() != 0 || st.Records[rComplete] != 1 {
		t.Errorf("stats: %+v", st)
	}
}

// Session attributes (u, T, U, i) survive a restart, also a T record still
// waiting for its u.
func TestSnapshotSessionInfo(t *testing.T) {
	s := newSrv("192.0.2.51:1094", t0, 6)
	uid := s.uid("https", "unknown", 496632, "[::198.202.100.135]")
	uid2 := s.uid("https", "unknown", 496633, "[::198.202.100.135]")
	tok := packet.Token{UserDictID: 30, Subject: []byte("jacob.lange"), Org: []byte("https://osdf.igwn.org/cit"), Role: []byte("r"), Groups: []byte("g")}
	tok2 := tok
	tok2.UserDictID, tok2.Subject = 40, []byte("early")
	var f feed
	f.send(s, 1, s.login(30, uid, packet.Login{HasAuth: true, AuthProt: []byte("https"), Name: []byte("/CN=x")}))
	f.send(s, 2, s.token(31, uid, tok))
	f.send(s, 3, s.ueac(32, uid, packet.UEAC{UserDictID: 30, Experiment: 2, Activity: 5}))
	f.send(s, 3, s.info(33, uid, "xrdcl-pelican/1.2.1"))
	f.send(s, 4, s.token(41, uid2, tok2)) // waits for its u
	f.send(s, 5, s.f(0, 5, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(33, 30, "/igwn/x", 9)) }))
	split := len(f.steps)
	f.send(s, 6, s.login(40, uid2, packet.Login{}))
	f.send(s, 10, s.f(5, 10, func(fb *packet.FStreamBuilder) {
		fb.Close(packet.FileClose{FileID: 33, Read: 9})
		fb.Open(openLFN(42, 40, "/igwn/y", 9))
		fb.Close(packet.FileClose{FileID: 42, Read: 9})
	}))
	for k := split - 2; k <= split; k++ {
		recs, _, st := f.sameAsUninterrupted(t, DefaultConfig(), k)
		m := byFile(recs)
		if r := m[33]; r.TokenSubject != "jacob.lange" || r.TokenOrg != "https://osdf.igwn.org/cit" || r.VO != r.TokenOrg ||
			r.Experiment != 2 || r.Activity != 5 || r.AuthProtocol != "https" || r.DN != "/CN=x" ||
			r.AppInfo != "xrdcl-pelican/1.2.1" || r.Reason != record.Complete {
			t.Errorf("split %d: session attributes: %+v", k, r)
		}
		if r := m[42]; r.TokenSubject != "early" {
			t.Errorf("split %d: pending token: %+v", k, r)
		}
		if st.PendingRefs != 0 || st.PendingDropped != 0 {
			t.Errorf("split %d: pending: %+v", k, st)
		}
	}
}

// A close waiting for its open survives a restart: a reordered open after
// the restore completes it; without one it becomes no_open after
// PendingTTL, counted from before the restart.
func TestSnapshotPendingClose(t *testing.T) {
	s := newSrv("192.0.2.52:1094", t0, 10)
	var f feed
	f.send(s, 10, s.f(5, 10, func(fb *packet.FStreamBuilder) { fb.Close(packet.FileClose{FileID: 1, Read: 7}) }))
	openLater := s.f(10, 20, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(2, 0, "/two", 8)) })
	f.send(s, 30, s.f(20, 30, func(fb *packet.FStreamBuilder) {
		fb.Close(packet.FileClose{FileID: 2, Read: 8, HasOps: true, Ops: packet.Ops{Read: 1, RdMin: 8, RdMax: 8}})
	}))
	split := len(f.steps)
	f.send(s, 31, openLater)
	f.tick(309) // file 1 waited 299 s: not yet
	f.tick(310)
	recs, _, st := f.sameAsUninterrupted(t, DefaultConfig(), split)
	if len(recs) != 2 {
		t.Fatalf("records: %+v", recs)
	}
	m := byFile(recs)
	if r := m[1]; r.Reason != record.NoOpen || r.ReadBytes != 7 || !r.StartUnknown || r.Start != tu(10) || r.End != tu(10) || r.Received != at(310) {
		t.Errorf("no_open: %+v", r)
	}
	if r := m[2]; r.Reason != record.Complete || r.Path != "/two" || r.ReadBytes != 8 || r.ReadOps != 1 || r.End != tu(30) {
		t.Errorf("completed after restore: %+v", r)
	}
	if st.Reordered != 1 || st.TotalLost() != 0 {
		t.Errorf("stats: %+v", st)
	}
}

// Sequence tracking continues across a restart: the next pseq is not a
// gap, a real gap is still counted, and holes in the window at the restart
// are still filled by late packets.
func TestSnapshotSequence(t *testing.T) {
	s := newSrv("192.0.2.53:1094", t0, 11)
	uid := s.uid("xroot", "eve", 1, "wn")
	var f feed
	for i := uint32(1); i <= 5; i++ {
		f.send(s, 1, s.login(i, uid, packet.Login{}))
	}
	late := s.login(6, uid, packet.Login{}) // held back: a hole at the restart
	f.send(s, 1, s.login(7, uid, packet.Login{}))
	f.send(s, 2, s.f(0, 1, func(fb *packet.FStreamBuilder) { fb.Disc(99) }))
	split := len(f.steps)
	f.send(s, 2, s.f(0, 1, func(fb *packet.FStreamBuilder) { fb.Disc(99) })) // next f pseq: no gap
	f.send(s, 3, late)                                                       // fills the hole
	s.login(8, uid, packet.Login{})                                          // lost
	for i := uint32(9); i < 80; i++ {                                        // push it out of the horizon
		f.send(s, 4, s.login(i, uid, packet.Login{}))
	}
	_, _, st := f.sameAsUninterrupted(t, DefaultConfig(), split)
	if want := [NumDomains]uint64{DomainMain: 1}; st.Lost != want || st.Reordered != 1 || st.Duplicates != 0 || st.Stale != 0 {
		t.Errorf("lost %v reordered %d dup %d stale %d", st.Lost, st.Reordered, st.Duplicates, st.Stale)
	}
	// a duplicate of a packet from before the restart is recognised (the
	// window bitmap was kept), one older than the window is stale
	f.send(s, 5, f.steps[split-1].d.data)
	_, _, st = f.sameAsUninterrupted(t, DefaultConfig(), split)
	if st.Duplicates != 1 || st.Stale != 0 {
		t.Errorf("f packet from before the restart: dup %d stale %d", st.Duplicates, st.Stale)
	}
	// the login of dictid 40 again: behind the reorder window by now, but
	// its number still has its fingerprint (a redelivery)
	f.send(s, 5, f.steps[split+33].d.data)
	_, _, st = f.sameAsUninterrupted(t, DefaultConfig(), split)
	if st.Duplicates != 2 || st.Stale != 0 {
		t.Errorf("old main packet: dup %d stale %d", st.Duplicates, st.Stale)
	}
	// another datagram with that number, that far back: applied as stale
	other := s.login(200, uid, packet.Login{})
	other[1] = f.steps[split+33].d.data[1] // the header's pseq
	f.send(s, 5, other)
	_, _, st = f.sameAsUninterrupted(t, DefaultConfig(), split)
	if st.Duplicates != 2 || st.Stale != 1 {
		t.Errorf("old number, other content: dup %d stale %d", st.Duplicates, st.Stale)
	}
}

// A server restart seen after our restart still closes out the old
// incarnation's files as server_restart.
func TestSnapshotServerRestart(t *testing.T) {
	old := newSrv("192.0.2.54:40000", t0-1000, 77)
	nw := newSrv("192.0.2.54:40001", t0+500, 77)
	uid := old.uid("xroot", "carol", 1, "wn3")
	var f feed
	f.send(old, 0, old.ident("SITE"))
	f.send(old, 1, old.login(1, uid, packet.Login{}))
	f.send(old, 10, old.f(0, 10, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(2, 1, "/old/a", 10))
		fb.Open(openLFN(3, 1, "/old/b", 20))
	}))
	f.send(old, 70, old.f(10, 70, func(fb *packet.FStreamBuilder) { fb.Xfr(packet.FileXfr{FileID: 2, Read: 5}) }))
	split := len(f.steps)
	f.send(nw, 500, nw.ident("SITE"))
	f.send(nw, 510, nw.f(500, 510, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(2, 0, "/new/a", 40))
		fb.Close(packet.FileClose{FileID: 2, Read: 40})
	}))
	f.flush(600)
	recs, _, st := f.sameAsUninterrupted(t, DefaultConfig(), split)
	if len(recs) != 3 {
		t.Fatalf("records: %+v", recs)
	}
	if r := recs[0]; r.Reason != record.ServerRestart || r.FileID != 2 || r.ReadBytes != 5 || r.User != "carol" || r.End != tu(70) {
		t.Errorf("old a: %+v", r)
	}
	if r := recs[1]; r.Reason != record.ServerRestart || r.FileID != 3 || r.Path != "/old/b" {
		t.Errorf("old b: %+v", r)
	}
	if r := recs[2]; r.Reason != record.Complete || r.Path != "/new/a" || r.ServerStod != t0+500 {
		t.Errorf("new a: %+v", r)
	}
	if st.Restarts != 1 || st.RecordsFor(record.ServerRestart) != 2 {
		t.Errorf("stats: %+v", st)
	}
}

// Counters stay monotonic across a restart; the gauges describe the
// restored state.
func TestSnapshotStats(t *testing.T) {
	s := newSrv("192.0.2.55:1094", t0, 12)
	sh := NewShard(DefaultConfig())
	sh.Handle(s.ident("S"), s.addr, at(0))
	sh.Handle([]byte("<statistics/>"), s.addr, at(0))
	sh.Handle(s.f(0, 1, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(1, 0, "/a", 1))
		fb.Open(openLFN(2, 0, "/b", 1))
		fb.Close(packet.FileClose{FileID: 2})
		fb.Close(packet.FileClose{FileID: 9}) // waits for its open
	}), s.addr, at(1))
	s.g('R', 0, 1, "{}") // lost
	sh.Handle(s.g('R', 0, 1, `{"a":1}`, "x"), s.addr, at(1))
	sh.Handle(s.path(5, s.uid("xroot", "u", 1, "h"), "/pending"), s.addr, at(1))
	drain(sh)
	before := sh.Stats()
	if before.Packets != 5 || before.OpenFiles != 2 || before.PendingFiles != 1 || before.PendingRefs != 1 ||
		before.Events != 2 || before.InvalidEvents != 1 || before.Records[rComplete] != 1 || before.Servers != 1 {
		t.Fatalf("setup stats: %+v", before)
	}
	r := restoreCopy(t, sh, DefaultConfig())
	if after := r.Stats(); !sameState(after, before) {
		t.Errorf("stats\n got %+v\nwant %+v", after, before)
	}
	r.Handle(s.ident("S"), s.addr, at(2))
	if st := r.Stats(); st.Packets != 6 || st.Accounted != before.Accounted+1 {
		t.Errorf("counting after restore: %+v", st)
	}
}

func TestSnapshotEmpty(t *testing.T) {
	s := NewShard(DefaultConfig())
	r := restoreCopy(t, s, DefaultConfig())
	if r.Stats() != (Stats{}) {
		t.Errorf("stats: %+v", r.Stats())
	}
}

// scenario builds a replayable stream of about n steps over three servers
// (one restarting, one IPv6) with every kind of state: sessions with
// T/U/i, d records before and after opens, opens with and without LFN,
// xfrs, closes with OPS/SSQ, closes before opens, disconnects, lost,
// reordered and duplicate packets, g-stream events, ticks past the TTLs,
// and evictions (small bounds).
func scenario(seed uint64, n int) *feed {
	rng := rand.New(rand.NewPCG(seed, 7))
	srvs := []*srv{
		newSrv("192.0.2.60:1094", t0-5000, 101),
		newSrv("[2001:db8::60]:1094", t0-4000, 102),
		newSrv("192.0.2.61:1094", t0-3000, 103),
	}
	type file struct {
		srv  int
		id   uint32
		user uint32
		open bool
		read int64
	}
	var (
		f       feed
		files   []*file
		nextID  = uint32(1)
		users   = map[int][]uint32{}
		uids    = map[uint32][]byte{}
		held    []dgram // reordered: sent a few steps later
		sec     = int64(0)
		restart = false
	)
	send := func(si int, data []byte) {
		s := srvs[si]
		switch r := rng.IntN(40); {
		case r == 0: // lost
		case r == 2: // damaged: rejected, its pseq still counts as received
			f.send(s, sec, data[:len(data)-1])
		case r == 1: // duplicated
			f.send(s, sec, data)
			f.send(s, sec, data)
		case r < 4: // reordered
			held = append(held, dgram{data: data, sender: s.addr})
		default:
			f.send(s, sec, data)
		}
	}
	for i := range srvs {
		send(i, srvs[i].ident("SITE"+strconv.Itoa(i)))
	}
	for len(f.steps) < n {
		sec += int64(rng.IntN(20))
		if len(held) > 0 && rng.IntN(3) == 0 {
			d := held[0]
			held = held[1:]
			f.steps = append(f.steps, step{d: &dgram{data: d.data, sender: d.sender, at: at(sec)}})
		}
		si := rng.IntN(len(srvs))
		s := srvs[si]
		tb, te := int32(sec-10), int32(sec)
		switch a := rng.IntN(100); {
		case a < 10: // login, with companions
			d := nextID
			nextID++
			uid := s.uid("xroot", "user"+strconv.Itoa(int(d)%5), int(d), "wn"+strconv.Itoa(int(d)%3))
			uids[d] = uid
			if rng.IntN(3) == 0 { // token before the u
				send(si, s.token(nextID, uid, packet.Token{UserDictID: d, Subject: []byte("sub" + strconv.Itoa(int(d)))}))
				nextID++
			}
			send(si, s.login(d, uid, gsiLogin))
			if rng.IntN(2) == 0 {
				send(si, s.ueac(nextID, uid, packet.UEAC{UserDictID: d, Experiment: int32(d), Activity: 3}))
				nextID++
			}
			if rng.IntN(2) == 0 {
				send(si, s.info(nextID, uid, "app/"+strconv.Itoa(int(d))))
				nextID++
			}
			users[si] = append(users[si], d)
		case a < 35: // open (d record first, or LFN)
			var u uint32
			if us := users[si]; len(us) > 0 {
				u = us[rng.IntN(len(us))]
			}
			fl := &file{srv: si, id: nextID, user: u, open: true}
			nextID++
			path := "/store/f" + strconv.Itoa(int(fl.id))
			if u != 0 && rng.IntN(2) == 0 {
				send(si, s.path(fl.id, uids[u], path))
				send(si, s.f(tb, te, func(fb *packet.FStreamBuilder) {
					fb.Open(packet.FileOpen{FileID: fl.id, FileSize: int64(fl.id)})
				}))
			} else {
				send(si, s.f(tb, te, func(fb *packet.FStreamBuilder) {
					o := openLFN(fl.id, u, path, int64(fl.id))
					o.RW = rng.IntN(4) == 0
					fb.Open(o)
				}))
			}
			files = append(files, fl)
		case a < 60: // xfrs
			send(si, s.f(tb, te, func(fb *packet.FStreamBuilder) {
				for _, fl := range files {
					if fl.srv == si && fl.open && rng.IntN(2) == 0 {
						fl.read += int64(rng.IntN(1000))
						fb.Xfr(packet.FileXfr{FileID: fl.id, Read: fl.read, Write: fl.read / 3})
					}
				}
			}))
		case a < 80: // closes
			send(si, s.f(tb, te, func(fb *packet.FStreamBuilder) {
				for _, fl := range files {
					if fl.srv == si && fl.open && rng.IntN(3) == 0 {
						fl.open = false
						fb.Close(packet.FileClose{FileID: fl.id, Read: fl.read + 1, HasOps: rng.IntN(2) == 0,
							Ops: packet.Ops{Read: 3, RdMin: 1, RdMax: 9}, HasSSQ: rng.IntN(2) == 0, SSQ: packet.SSQ{Read: 1.5}})
					}
				}
			}))
		case a < 84: // a close whose open never comes
			send(si, s.f(tb, te, func(fb *packet.FStreamBuilder) {
				fb.Close(packet.FileClose{FileID: nextID, Read: 1})
			}))
			nextID++
		case a < 88: // disconnect
			if us := users[si]; len(us) > 0 {
				j := rng.IntN(len(us))
				u := us[j]
				users[si] = append(us[:j], us[j+1:]...)
				send(si, s.f(tb, te, func(fb *packet.FStreamBuilder) { fb.Disc(u) }))
			}
		case a < 94:
			send(si, s.g('R', tb, te, `{"event":"throttle_update","io_wait":0.5,"io_active":1,"io_total":10}`, "bad"))
		case !restart && len(f.steps) > n/2: // server 0 restarts
			restart = true
			srvs[0] = newSrv("192.0.2.60:1095", uint32(t0+sec), 101)
			send(0, srvs[0].ident("SITE0"))
			for _, fl := range files {
				if fl.srv == 0 {
					fl.open = false
				}
			}
			users[0] = nil
		default:
			f.tick(sec)
			if rng.IntN(4) == 0 {
				sec += 400 // past PendingTTL
				f.tick(sec)
			}
		}
	}
	for _, d := range held {
		f.steps = append(f.steps, step{d: &dgram{data: d.data, sender: d.sender, at: at(sec)}})
	}
	f.tick(sec + 1000)
	f.flush(sec + 1001)
	return &f
}

func scenarioConfig() Config {
	cfg := DefaultConfig()
	cfg.MaxOpenFiles = 30
	cfg.MaxOpenFilesPerServer = 8
	cfg.MaxSessions = 10
	cfg.MaxSessionsPerServer = 5
	cfg.MaxPending = 8
	cfg.OpenTTL = 600 * time.Second
	cfg.SessionTTL = 900 * time.Second
	cfg.InternMax = 16
	return cfg
}

// A restart at any point of a varied stream changes nothing: records
// (ids and all fields), events and counters are those of the
// uninterrupted run.
func TestSnapshotEverySplit(t *testing.T) {
	var all Stats
	nrec, nev := 0, 0
	for seed := uint64(1); seed <= 3; seed++ {
		f := scenario(seed, 200)
		cfg := scenarioConfig()
		recs, evs, st := f.run(t, cfg)
		all.Add(&st)
		nrec += len(recs)
		nev += len(evs)
		for k := 0; k <= len(f.steps); k++ {
			f.sameAsUninterrupted(t, cfg, k)
		}
	}
	// the scenarios exercise what they claim to
	st := &all
	if st.TotalLost() == 0 || st.TotalRejected() == 0 || st.Duplicates == 0 || st.Reordered == 0 ||
		st.Restarts != 3 || nev == 0 || nrec < 150 || st.Records[rComplete] == 0 ||
		st.RecordsFor(record.Evicted) == 0 || st.RecordsFor(record.NoOpen) == 0 || st.RecordsFor(record.Timeout) == 0 ||
		st.RecordsFor(record.Disconnect) == 0 || st.RecordsFor(record.ServerRestart) == 0 || st.PendingDropped == 0 ||
		st.EvictedSess == 0 {
		t.Errorf("scenarios too tame: %d records, %d events, %+v", nrec, nev, st)
	}
}

// A restore into a shard with tighter bounds applies them as new state
// arrives (no panic, bounds hold).
func TestSnapshotTighterConfig(t *testing.T) {
	f := scenario(1, 120)
	cfg := DefaultConfig()
	s := NewShard(cfg)
	for _, st := range f.steps[:len(f.steps)-2] { // without the final tick and flush
		switch {
		case st.d != nil:
			s.Handle(st.d.data, st.d.sender, st.d.at)
		case st.tick:
			s.Tick(st.at)
		}
	}
	var b bytes.Buffer
	if err := s.Snapshot(&b); err != nil {
		t.Fatal(err)
	}
	tight := DefaultConfig()
	tight.MaxOpenFiles = 1
	tight.ReorderWindow = 4
	r, err := RestoreShard(tight, &b)
	if err != nil {
		t.Fatal(err)
	}
	sv := newSrv("192.0.2.99:1", t0, 1)
	r.Handle(sv.f(0, 1, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(1, 0, "/x", 1)) }), sv.addr, at(1))
	if st := r.Stats(); st.OpenFiles != 1 {
		t.Errorf("open files %d under a bound of 1", st.OpenFiles)
	}
	if _, err := RestoreShard(Config{}, bytes.NewReader(b.Bytes())); err == nil {
		t.Error("invalid config accepted")
	}
}

func snapshotOf(t testing.TB, f *feed, cfg Config, steps int) []byte {
	t.Helper()
	s := NewShard(cfg)
	for _, st := range f.steps[:steps] {
		switch {
		case st.d != nil:
			s.Handle(st.d.data, st.d.sender, st.d.at)
		case st.tick:
			s.Tick(st.at)
		}
	}
	var b bytes.Buffer
	if err := s.Snapshot(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// fixCRC rewrites the trailing checksum so that corrupt content reaches
// the parser.
func fixCRC(b []byte) []byte {
	if len(b) < 4 {
		return b
	}
	b = bytes.Clone(b)
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crcTable))
	return b
}

func TestRestoreCorrupt(t *testing.T) {
	cfg := scenarioConfig()
	good := snapshotOf(t, scenario(1, 200), cfg, 150)
	if _, err := RestoreShard(cfg, bytes.NewReader(good)); err != nil {
		t.Fatalf("good snapshot: %v", err)
	}
	badVersion := bytes.Clone(good)
	badVersion[len(snapMagic)] = 9
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x10
	cases := map[string][]byte{
		"empty":            nil,
		"magic":            []byte("XRDMCSNQ\x01\x00\x00\x00\x00"),
		"truncated":        good[:len(good)-1],
		"truncated half":   good[:len(good)/2],
		"bit flip":         flipped,
		"version":          fixCRC(badVersion),
		"trailing data":    fixCRC(append(bytes.Clone(good[:len(good)-4]), 0, 0, 0, 0, 0)),
		"truncated, crc'd": fixCRC(append(bytes.Clone(good[:len(good)/2]), 0, 0, 0, 0)),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := RestoreShard(cfg, bytes.NewReader(b))
			if err == nil || s != nil {
				t.Fatalf("accepted")
			}
			if !errors.Is(err, ErrBadSnapshot) {
				t.Errorf("error %v does not wrap ErrBadSnapshot", err)
			}
		})
	}
	// every truncation with a valid checksum is an error, never a panic
	for n := 0; n < len(good)-4; n++ {
		if _, err := RestoreShard(cfg, bytes.NewReader(fixCRC(append(bytes.Clone(good[:n]), 0, 0, 0, 0)))); err == nil {
			t.Fatalf("truncation at %d accepted", n)
		}
	}
}

// FuzzRestore: arbitrary input (with and without a valid checksum) is an
// error or a shard that works: handling packets, ticking, snapshotting
// and flushing it must not panic.
func FuzzRestore(f *testing.F) {
	cfg := scenarioConfig()
	sc := scenario(2, 120)
	for _, k := range []int{0, 20, 60, 110} {
		f.Add(snapshotOf(f, sc, cfg, k))
	}
	probe := scenario(3, 40)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, fixCRC(b)} {
			s, err := RestoreShard(cfg, bytes.NewReader(in))
			if err != nil {
				if s != nil {
					t.Fatal("shard with error")
				}
				continue
			}
			for _, st := range probe.steps {
				if st.d != nil {
					s.Handle(st.d.data, st.d.sender, st.d.at)
				}
			}
			s.Tick(at(1 << 20))
			var out bytes.Buffer
			if err := s.Snapshot(&out); err != nil {
				t.Fatalf("snapshot of a restored shard: %v", err)
			}
			s.Flush(at(1 << 21))
			if st := s.Stats(); st.OpenFiles != 0 || st.Sessions != 0 {
				t.Fatalf("state after flush: %+v", st)
			}
		}
	})
}

// bigShard holds n open files (with distinct paths) over 100 servers, a
// session per server.
func bigShard(tb testing.TB, n int) *Shard {
	tb.Helper()
	s := NewShard(DefaultConfig())
	const nsrv = 100
	for i := 0; i < nsrv; i++ {
		sv := newSrv(fmt.Sprintf("10.2.%d.%d:1094", i>>8, i&255), t0, uint64(i+1))
		uid := sv.uid("xroot", "user", i, "wn.example.org")
		s.Handle(sv.ident("SITE"), sv.addr, at(0))
		s.Handle(sv.login(1, uid, gsiLogin), sv.addr, at(0))
		per := n / nsrv
		for j := 0; j < per; j += 50 {
			s.Handle(sv.f(0, 1, func(fb *packet.FStreamBuilder) {
				for k := j; k < min(j+50, per); k++ {
					fb.Open(openLFN(uint32(k+2), 1, "/store/mc/RunIII/Sample/AODSIM/file"+strconv.Itoa(i*per+k)+".root", 1<<30))
				}
			}), sv.addr, at(0))
			s.Handle(sv.f(1, 2, func(fb *packet.FStreamBuilder) {
				for k := j; k < min(j+50, per); k++ {
					fb.Xfr(packet.FileXfr{FileID: uint32(k + 2), Read: int64(k) << 20})
				}
			}), sv.addr, at(1))
		}
	}
	if got := s.Stats().OpenFiles; got != n {
		tb.Fatalf("open files %d, want %d", got, n)
	}
	return s
}

type failWriter struct{ n, fail int }

func (w *failWriter) Write(p []byte) (int, error) {
	w.n++
	if w.n >= w.fail {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

// Snapshot streams in chunks, reports a failing writer, and does not
// allocate once its scratch is warm.
func TestSnapshotWriterAndAllocs(t *testing.T) {
	s := bigShard(t, 5000)
	var buf bytes.Buffer
	if err := s.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.Len() < 2*snapChunk {
		t.Fatalf("snapshot of %d bytes: too small to test chunking", buf.Len())
	}
	for _, fail := range []int{1, 2} {
		w := &failWriter{fail: fail}
		if err := s.Snapshot(w); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("failing writer (call %d): %v", fail, err)
		}
	}
	r := restoreCopy(t, s, DefaultConfig()) // the failed snapshots left no trace
	if r.Stats().OpenFiles != 5000 {
		t.Errorf("open files %d", r.Stats().OpenFiles)
	}
	if n := testing.AllocsPerRun(5, func() {
		buf.Reset()
		if err := s.Snapshot(&buf); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("allocs per snapshot: %v", n)
	}
}

// A tracker of a version 2-4 checkpoint (a ring of the reorder window's
// fingerprints) is read into the per-number table: the packets of its
// window are still recognised as duplicates, and a new one is not.
func TestRestoreOldTracker(t *testing.T) {
	var old bytes.Buffer
	put := func(x uint64) { old.Write(binary.AppendUvarint(nil, x)) }
	// Numbers 250..255, 0..9 seen (next 10), a window of 16 with head 5:
	// slot (5-i) mod 16 holds number 9-i, fingerprint 1000+number.
	put(1<<16 - 1) // seen
	put(10)        // next
	old.WriteByte(1)
	put(1<<16 - 1) // known
	old.WriteByte(5)
	put(16)
	ring := make([]uint64, 16)
	for i := range 16 {
		n := (9 - i + 256) % 256
		ring[(5-i+16)%16] = uint64(1000 + n)
	}
	for _, h := range ring {
		put(h)
	}
	for _, v := range []uint64{2, 3, 4} {
		d := &decoder{Dec: codec.NewDec(old.Bytes()), version: v}
		var tr seqTracker
		d.tracker(&tr, 256)
		d.Done()
		if err := d.Err(); err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		for _, n := range []uint16{250, 255, 0, 9} {
			if got, _ := tr.observe(n, 256, 16, uint32(1000+n)); got != seqDuplicate {
				t.Errorf("version %d: number %d after restore: %v, want a duplicate", v, n, got)
			}
		}
		if got, lost := tr.observe(10, 256, 16, 1010); got != seqNew || lost != 0 {
			t.Errorf("version %d: next number: %v, %d lost", v, got, lost)
		}
	}
}
