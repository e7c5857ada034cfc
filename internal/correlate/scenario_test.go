package correlate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

const sid1 = 258305997245184

var gsiLogin = packet.Login{HasAuth: true, AuthProt: []byte("gsi"), Name: []byte("/DC=org/CN=Alice"),
	Host: []byte("wn1.example.org"), Org: []byte("cms"), Role: []byte("production"), Groups: []byte("/cms"),
	Release: []byte("v5.6.3"), App: []byte("cmsRun"), IPv: 6}

// normal session: '=', u, d, f open / xfr / close (OPS+SSQ) / disc.
func TestScenarioNormalSession(t *testing.T) {
	s := newSrv("192.0.2.10:40000", t0-3600, sid1)
	uid := s.uid("xroot", "alice", 17, "wn1.example.org")
	var f feed
	f.send(s, 0, s.ident("T2_XX_Test"))
	f.send(s, 1, s.login(1, uid, gsiLogin))
	f.send(s, 2, s.path(2, uid, "/store/data/file.root"))
	f.send(s, 60, s.f(0, 60, func(fb *packet.FStreamBuilder) {
		fb.Open(packet.FileOpen{FileID: 2, FileSize: 1 << 30}) // no LFN: path and user from the d record
	}))
	f.send(s, 120, s.f(60, 120, func(fb *packet.FStreamBuilder) {
		fb.Xfr(packet.FileXfr{FileID: 2, Read: 1000})
	}))
	close := packet.FileClose{FileID: 2, Read: 5000, Readv: 0, Write: 0, HasOps: true, HasSSQ: true,
		Ops: packet.Ops{Read: 5, RdMin: 100, RdMax: 2000}, SSQ: packet.SSQ{Read: 1e7}}
	f.send(s, 180, s.f(120, 180, func(fb *packet.FStreamBuilder) {
		fb.Close(close)
		fb.Disc(1)
	}))
	f.flush(200)
	recs, _, st := f.runTwice(t, DefaultConfig())
	if len(recs) != 1 {
		t.Fatalf("records: %d, want 1: %+v", len(recs), recs)
	}
	r := recs[0]
	wantID(t, r)
	want := record.Record{
		RecordID: r.RecordID, Start: tu(0), End: tu(180), Received: at(180),
		ServerIP: "192.0.2.10", ServerHost: "xrd.example.org", ServerID: sid1, ServerStod: t0 - 3600,
		Site: "T2_XX_Test", Instance: "anon", Program: "xrootd", Version: "v5.7.1",
		Protocol: "xroot", User: "alice", UserDictID: 1, ClientHost: "wn1.example.org", IPv6: true,
		AuthProtocol: "gsi", DN: "/DC=org/CN=Alice", VO: "cms", Role: "production", Groups: "/cms",
		ClientRelease: "v5.6.3", AppName: "cmsRun",
		FileID: 2, Path: "/store/data/file.root", FileSize: 1 << 30,
		ReadBytes: 5000, HasOps: true, ReadOps: 5, ReadMin: 100, ReadMax: 2000, HasSSQ: true, ReadSqSum: 1e7,
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("record\n got %+v\nwant %+v", r, want)
	}
	if st.Accounted != 6 || st.Packets != 6 || st.TotalRejected() != 0 || st.TotalLost() != 0 {
		t.Errorf("stats: %+v", st)
	}
	if st.Records[rComplete] != 1 || st.TotalRecords() != 1 {
		t.Errorf("records by reason: %v", st.Records)
	}
	if st.Servers != 0 || st.OpenFiles != 0 || st.Sessions != 0 {
		t.Errorf("state after flush: %+v", st)
	}
}

// several files per session, vector reads and writes, LFN opens.
func TestScenarioFilesReadvWrites(t *testing.T) {
	s := newSrv("192.0.2.11:40000", t0-100, 42)
	uid := s.uid("xroot", "bob", 3, "wn2")
	var f feed
	f.send(s, 1, s.login(7, uid, packet.Login{}))
	f.send(s, 10, s.f(0, 10, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(8, 7, "/a", 100))
		fb.Open(openLFN(9, 7, "/b", 200))
		o := openLFN(10, 7, "/c", 0)
		o.RW = true
		fb.Open(o)
	}))
	f.send(s, 20, s.f(10, 20, func(fb *packet.FStreamBuilder) {
		fb.Close(packet.FileClose{FileID: 8, Read: 100})
		fb.Close(packet.FileClose{FileID: 9, Readv: 150, HasOps: true,
			Ops: packet.Ops{Readv: 3, RsMin: 2, RsMax: 10, Rsegs: 15, RvMin: 10, RvMax: 90}})
		fb.Close(packet.FileClose{FileID: 10, Write: 4096, HasOps: true, Ops: packet.Ops{Write: 2, WrMin: 1024, WrMax: 3072}})
	}))
	recs, _, st := f.runTwice(t, DefaultConfig())
	if len(recs) != 3 || st.Records[rComplete] != 3 {
		t.Fatalf("records: %+v", recs)
	}
	m := byFile(recs)
	for _, r := range recs {
		wantID(t, r)
		if r.User != "bob" || r.UserDictID != 7 || r.Start != tu(0) || r.End != tu(20) || r.Partial() {
			t.Errorf("file %d: %+v", r.FileID, r)
		}
	}
	if r := m[8]; r.Path != "/a" || r.ReadBytes != 100 || r.FileSize != 100 || r.HasOps {
		t.Errorf("read: %+v", r)
	}
	if r := m[9]; r.ReadvBytes != 150 || r.ReadvOps != 3 || r.ReadvSegs != 15 || r.ReadvSegsMin != 2 ||
		r.ReadvSegsMax != 10 || r.ReadvMin != 10 || r.ReadvMax != 90 || r.ReadBytes != 0 {
		t.Errorf("readv: %+v", r)
	}
	if r := m[10]; !r.ReadWrite || r.WriteBytes != 4096 || r.WriteOps != 2 || r.WriteMin != 1024 || r.WriteMax != 3072 {
		t.Errorf("write: %+v", r)
	}
	if len(recs[0].RecordID) != 32 || recs[0].RecordID == recs[1].RecordID {
		t.Errorf("ids: %s %s", recs[0].RecordID, recs[1].RecordID)
	}
}

// restart: a new stod closes out the old incarnation's files as
// server_restart; late old-stod packets still apply to the old one; the
// same dictids under the new stod do not mix with the old ones.
func TestScenarioRestart(t *testing.T) {
	old := newSrv("192.0.2.12:40000", t0-1000, 77)
	nw := newSrv("192.0.2.12:40001", t0+500, 77) // same host and sID, new process
	uid := old.uid("xroot", "carol", 1, "wn3")
	var f feed
	f.send(old, 0, old.ident("SITE"))
	f.send(old, 1, old.login(1, uid, packet.Login{}))
	f.send(old, 10, old.f(0, 10, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(2, 1, "/old/a", 10))
		fb.Open(openLFN(3, 1, "/old/b", 20))
	}))
	f.send(old, 70, old.f(10, 70, func(fb *packet.FStreamBuilder) { fb.Xfr(packet.FileXfr{FileID: 2, Read: 5}) }))
	late := old.f(70, 90, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(4, 1, "/old/c", 30))
		fb.Close(packet.FileClose{FileID: 4, Read: 30})
	})
	// the new process: ident, same dictids 1 and 2.
	f.send(nw, 500, nw.ident("SITE"))
	f.send(nw, 501, nw.login(1, nw.uid("xroot", "dave", 1, "wn4"), packet.Login{}))
	f.send(nw, 510, nw.f(500, 510, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(2, 1, "/new/a", 40))
		fb.Close(packet.FileClose{FileID: 2, Read: 40})
	}))
	f.send(old, 511, late) // a late packet of the old process
	f.flush(600)
	recs, _, st := f.runTwice(t, DefaultConfig())
	if len(recs) != 4 {
		t.Fatalf("records: %+v", recs)
	}
	type key struct {
		stod int64
		id   uint32
	}
	m := map[key]record.Record{}
	for _, r := range recs {
		wantID(t, r)
		m[key{r.ServerStod, r.FileID}] = r
	}
	if r := m[key{t0 - 1000, 2}]; r.Reason != record.ServerRestart || r.Path != "/old/a" || r.ReadBytes != 5 ||
		r.User != "carol" || r.End != tu(70) || r.Start != tu(0) {
		t.Errorf("old a: %+v", r)
	}
	if r := m[key{t0 - 1000, 3}]; r.Reason != record.ServerRestart || r.Path != "/old/b" || r.End != tu(10) {
		t.Errorf("old b: %+v", r)
	}
	if r := m[key{t0 + 500, 2}]; r.Reason != record.Complete || r.Path != "/new/a" || r.User != "dave" || r.ReadBytes != 40 {
		t.Errorf("new a: %+v", r)
	}
	if r := m[key{t0 - 1000, 4}]; r.Reason != record.Complete || r.Path != "/old/c" || r.User != "carol" || r.ServerStod != t0-1000 {
		t.Errorf("late old c: %+v", r)
	}
	if m[key{t0 - 1000, 2}].RecordID == m[key{t0 + 500, 2}].RecordID {
		t.Error("same record id across incarnations")
	}
	if st.Restarts != 1 || st.RecordsFor(record.ServerRestart) != 2 || st.TotalLost() != 0 || st.Accounted != 8 {
		t.Errorf("stats: %+v", st)
	}
}

// two sessions with identical userid text but different dictids keep
// their own attributes (xrootd issue 2133); the i record goes to the
// latest session with that text.
func TestScenarioNonUniqueUserID(t *testing.T) {
	s := newSrv("192.0.2.13:40000", t0, 5)
	uid := s.uid("https", "unknown", 324183, "[::198.124.239.10]")
	l1, l2 := gsiLogin, gsiLogin
	l1.Name, l2.Name = []byte("/CN=one"), []byte("/CN=two")
	var f feed
	f.send(s, 1, s.login(10, uid, l1))
	f.send(s, 2, s.login(20, uid, l2))
	f.send(s, 3, s.info(21, uid, "xrdcl-pelican/1.2.1"))
	f.send(s, 10, s.f(0, 10, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(11, 10, "/one", 1))
		fb.Open(openLFN(22, 20, "/two", 1))
		fb.Close(packet.FileClose{FileID: 11, Read: 1})
		fb.Close(packet.FileClose{FileID: 22, Read: 1})
	}))
	recs, _, _ := f.runTwice(t, DefaultConfig())
	m := byFile(recs)
	if r := m[11]; r.DN != "/CN=one" || r.UserDictID != 10 || r.AppInfo != "" || r.ClientHost != "[::198.124.239.10]" {
		t.Errorf("session 10: %+v", r)
	}
	if r := m[22]; r.DN != "/CN=two" || r.UserDictID != 20 || r.AppInfo != "xrdcl-pelican/1.2.1" {
		t.Errorf("session 20: %+v", r)
	}
}

// T and U records attach to their user by &Uc=, also when they arrive
// before the u record.
func TestScenarioTokenAndUEAC(t *testing.T) {
	s := newSrv("192.0.2.14:40000", t0, 6)
	uid := s.uid("https", "unknown", 496632, "[::198.202.100.135]")
	uid2 := s.uid("https", "unknown", 496633, "[::198.202.100.135]")
	tok := packet.Token{UserDictID: 30, Subject: []byte("jacob.lange"), Org: []byte("https://osdf.igwn.org/cit"), Role: []byte("r"), Groups: []byte("g")}
	var f feed
	f.send(s, 1, s.login(30, uid, packet.Login{HasAuth: true, AuthProt: []byte("https")}))
	f.send(s, 2, s.token(31, uid, tok))
	f.send(s, 3, s.ueac(32, uid, packet.UEAC{UserDictID: 30, Experiment: 2, Activity: 5}))
	tok2 := tok
	tok2.UserDictID, tok2.Subject = 40, []byte("early")
	f.send(s, 4, s.token(41, uid2, tok2)) // before its u record
	f.send(s, 5, s.login(40, uid2, packet.Login{}))
	f.send(s, 10, s.f(0, 10, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(33, 30, "/igwn/x", 9))
		fb.Close(packet.FileClose{FileID: 33, Read: 9})
		fb.Open(openLFN(42, 40, "/igwn/y", 9))
		fb.Close(packet.FileClose{FileID: 42, Read: 9})
	}))
	recs, _, st := f.runTwice(t, DefaultConfig())
	m := byFile(recs)
	if r := m[33]; r.TokenSubject != "jacob.lange" || r.TokenOrg != "https://osdf.igwn.org/cit" || r.TokenRole != "r" ||
		r.TokenGroups != "g" || r.VO != "https://osdf.igwn.org/cit" || r.Experiment != 2 || r.Activity != 5 || r.AuthProtocol != "https" {
		t.Errorf("token/ueac: %+v", r)
	}
	if r := m[42]; r.TokenSubject != "early" || r.Experiment != 0 {
		t.Errorf("early token: %+v", r)
	}
	if st.PendingRefs != 0 || st.PendingDropped != 0 {
		t.Errorf("pending: %+v", st)
	}
}

// loss and reordering per counter domain.
func TestScenarioLossAndReorder(t *testing.T) {
	s := newSrv("192.0.2.15:40000", t0, 8)
	uid := s.uid("xroot", "eve", 1, "wn")
	var f feed
	// main: 0 1 (2 lost) 3 4 (5 and 6 swapped) 6 5
	f.send(s, 1, s.login(1, uid, packet.Login{}))
	f.send(s, 1, s.login(2, uid, packet.Login{}))
	s.login(3, uid, packet.Login{}) // lost
	f.send(s, 1, s.login(4, uid, packet.Login{}))
	f.send(s, 1, s.login(5, uid, packet.Login{}))
	p5 := s.login(6, uid, packet.Login{})
	p6 := s.login(7, uid, packet.Login{})
	f.send(s, 1, p6)
	f.send(s, 1, p5)
	// f-stream: start near the wrap: 254 255 0 1, with 0 duplicated, then 3 (2 lost).
	s.fSeq = 254
	for i := 0; i < 4; i++ {
		p := s.f(0, 1, func(fb *packet.FStreamBuilder) { fb.Disc(99) })
		f.send(s, 2, p)
		if i == 2 {
			f.send(s, 2, p) // duplicate
		}
	}
	s.f(0, 1, func(fb *packet.FStreamBuilder) { fb.Disc(99) }) // seq 2: lost
	f.send(s, 3, s.f(0, 1, func(fb *packet.FStreamBuilder) { fb.Disc(99) }))
	// g-stream, provider R: 1, 2, (3 lost), 4; provider C: 1 only.
	f.send(s, 4, s.g('R', 0, 1, `{"event":"throttle_update","io_wait":0.5,"io_active":1,"io_total":10}`))
	f.send(s, 4, s.g('R', 0, 1, `{"event":"throttle_update","io_wait":0.6,"io_active":1,"io_total":11}`))
	s.g('R', 0, 1, `{}`)
	f.send(s, 4, s.g('R', 0, 1, `{"event":"throttle_update","io_wait":0.7,"io_active":0,"io_total":12}`))
	f.send(s, 4, s.g('C', 0, 1, `{"event":"file_close","lfn":"/x","size":1}`))
	f.flush(10)
	_, evs, st := f.runTwice(t, DefaultConfig())
	want := [NumDomains]uint64{DomainMain: 1, DomainF: 1, DomainG: 1}
	if st.Lost != want {
		t.Errorf("lost %v, want %v", st.Lost, want)
	}
	if st.Duplicates != 1 || st.Reordered != 1 || st.Stale != 0 {
		t.Errorf("dup %d reordered %d stale %d", st.Duplicates, st.Reordered, st.Stale)
	}
	if st.Packets != 16 || st.Accounted != 16 || st.TotalRejected() != 0 {
		t.Errorf("packets %d accounted %d rejected %d", st.Packets, st.Accounted, st.TotalRejected())
	}
	if len(evs) != 4 {
		t.Errorf("events: %d", len(evs))
	}
}

func TestScenarioIPv6Sender(t *testing.T) {
	s := newSrv("[2001:db8::1]:51729", t0, 9)
	var f feed
	f.send(s, 10, s.f(0, 10, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(1, 0, "/v6", 1))
		fb.Close(packet.FileClose{FileID: 1, Read: 1})
	}))
	recs, _, _ := f.runTwice(t, DefaultConfig())
	if len(recs) != 1 || recs[0].ServerIP != "2001:db8::1" || recs[0].User != "" {
		t.Fatalf("records: %+v", recs)
	}
	wantID(t, recs[0])
	// an IPv4-mapped sender is the IPv4 server.
	s4 := newSrv("[::ffff:192.0.2.1]:1", t0, 9)
	var g feed
	g.send(s4, 10, s4.f(0, 10, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(1, 0, "/v4", 1))
		fb.Close(packet.FileClose{FileID: 1})
	}))
	recs, _, _ = g.run(t, DefaultConfig())
	if len(recs) != 1 || recs[0].ServerIP != "192.0.2.1" {
		t.Fatalf("mapped: %+v", recs)
	}
}

// close without open: it waits PendingTTL for a reordered open, then is
// emitted as no_open; a reordered open within the TTL completes it.
func TestScenarioNoOpen(t *testing.T) {
	s := newSrv("192.0.2.16:40000", t0, 10)
	var f feed
	f.send(s, 10, s.f(5, 10, func(fb *packet.FStreamBuilder) { fb.Close(packet.FileClose{FileID: 1, Read: 7}) }))
	openLater := s.f(10, 20, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(2, 0, "/two", 8)) })
	closeFirst := s.f(20, 30, func(fb *packet.FStreamBuilder) { fb.Close(packet.FileClose{FileID: 2, Read: 8}) })
	f.send(s, 30, closeFirst)
	f.send(s, 31, openLater) // swapped pair: not loss, and one complete record
	f.tick(200)
	f.tick(400)
	recs, _, st := f.runTwice(t, DefaultConfig())
	if len(recs) != 2 {
		t.Fatalf("records: %+v", recs)
	}
	m := byFile(recs)
	if r := m[1]; r.Reason != record.NoOpen || r.ReadBytes != 7 || !r.StartUnknown || r.Start != tu(10) || r.End != tu(10) || r.Received != at(400) {
		t.Errorf("no_open: %+v", r)
	}
	if r := m[2]; r.Reason != record.Complete || r.Path != "/two" || r.ReadBytes != 8 || r.Start != tu(10) || r.End != tu(30) {
		t.Errorf("reordered: %+v", r)
	}
	if st.TotalLost() != 0 || st.Reordered != 1 || st.RecordsFor(record.NoOpen) != 1 {
		t.Errorf("stats: %+v", st)
	}
}

// disconnect with files open: they wait PendingTTL for a reordered close,
// then become disconnect partials with the last xfr's bytes.
func TestScenarioDisconnect(t *testing.T) {
	s := newSrv("192.0.2.17:40000", t0, 11)
	uid := s.uid("xroot", "frank", 1, "wn")
	var f feed
	f.send(s, 1, s.login(1, uid, packet.Login{}))
	f.send(s, 10, s.f(0, 10, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(2, 1, "/x", 100))
		fb.Open(openLFN(3, 1, "/y", 100))
		fb.Xfr(packet.FileXfr{FileID: 2, Read: 60})
	}))
	f.send(s, 20, s.f(10, 20, func(fb *packet.FStreamBuilder) { fb.Disc(1) }))
	f.send(s, 25, s.f(10, 12, func(fb *packet.FStreamBuilder) { fb.Close(packet.FileClose{FileID: 3, Read: 100, Forced: true}) }))
	f.tick(100) // too early
	f.tick(400)
	recs, _, st := f.runTwice(t, DefaultConfig())
	if len(recs) != 2 {
		t.Fatalf("records: %+v", recs)
	}
	m := byFile(recs)
	if r := m[2]; r.Reason != record.Disconnect || r.ReadBytes != 60 || r.End != tu(20) || r.User != "frank" || r.Received != at(400) {
		t.Errorf("disconnect: %+v", r)
	}
	if r := m[3]; r.Reason != record.Complete || !r.Forced || r.ReadBytes != 100 {
		t.Errorf("late close: %+v", r)
	}
	if st.Sessions != 0 || st.OpenFiles != 0 {
		t.Errorf("state: %+v", st)
	}
}

// eviction under the bounds emits what is known.
func TestScenarioEviction(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxOpenFiles = 2
	s := newSrv("192.0.2.18:40000", t0, 12)
	var f feed
	f.send(s, 10, s.f(0, 10, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(1, 0, "/1", 1))
		fb.Open(openLFN(2, 0, "/2", 1))
	}))
	f.send(s, 20, s.f(10, 20, func(fb *packet.FStreamBuilder) { fb.Xfr(packet.FileXfr{FileID: 1, Read: 11}) }))
	f.send(s, 30, s.f(20, 30, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(3, 0, "/3", 1)) })) // evicts 2 (LRU)
	f.send(s, 40, s.f(30, 40, func(fb *packet.FStreamBuilder) { fb.Xfr(packet.FileXfr{FileID: 3, Read: 1}) }))
	f.send(s, 50, s.f(40, 50, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(4, 0, "/4", 1)) })) // evicts 1
	recs, _, st := f.runTwice(t, cfg)
	if len(recs) != 2 || recs[0].FileID != 2 || recs[1].FileID != 1 {
		t.Fatalf("records: %+v", recs)
	}
	if r := recs[1]; r.Reason != record.Evicted || r.ReadBytes != 11 || r.End != tu(20) || r.Path != "/1" {
		t.Errorf("evicted: %+v", r)
	}
	if st.OpenFiles != 2 || st.RecordsFor(record.Evicted) != 2 {
		t.Errorf("stats: %+v", st)
	}
	// per server bound
	cfg = DefaultConfig()
	cfg.MaxOpenFilesPerServer = 1
	recs, _, _ = f.run(t, cfg)
	// 1 is evicted by 2, 2 by the xfr of 1 (whose open is gone: an entry
	// without open), that by 3, and 3 by 4.
	if len(recs) != 4 || recs[0].FileID != 1 || recs[1].FileID != 2 || recs[2].FileID != 1 || recs[3].FileID != 3 ||
		recs[2].ReadBytes != 11 || recs[2].Path != "" || !recs[2].StartUnknown || recs[2].Start != recs[2].End {
		t.Fatalf("per-server: %+v", recs)
	}
}

// an open without news for OpenTTL times out with the last xfr's bytes
// and the server time of that xfr as its end.
func TestScenarioTimeout(t *testing.T) {
	s := newSrv("192.0.2.19:40000", t0, 13)
	var f feed
	f.send(s, 10, s.f(0, 10, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(1, 0, "/t", 5)) }))
	f.send(s, 100, s.f(90, 100, func(fb *packet.FStreamBuilder) { fb.Xfr(packet.FileXfr{FileID: 1, Read: 3, Write: 2}) }))
	f.tick(100 + 24*3600 - 1)
	f.tick(100 + 24*3600)
	recs, _, st := f.runTwice(t, DefaultConfig())
	if len(recs) != 1 {
		t.Fatalf("records: %+v", recs)
	}
	if r := recs[0]; r.Reason != record.Timeout || r.ReadBytes != 3 || r.WriteBytes != 2 || r.Start != tu(0) ||
		r.End != tu(100) || r.Received != at(100+24*3600) {
		t.Errorf("timeout: %+v", r)
	}
	wantID(t, recs[0])
	if st.OpenFiles != 0 {
		t.Errorf("open files: %d", st.OpenFiles)
	}
}

func TestScenarioGStreamEvents(t *testing.T) {
	s := newSrv("192.0.2.20:40000", t0, 14)
	var f feed
	f.send(s, 0, s.ident("CACHE_SITE"))
	lineC := `{"event":"file_close","lfn":"/a","size":10,"blk_size":1,"n_blks":10,"n_blks_done":10,"access_cnt":1,"attach_t":1,"detach_t":2,"remotes":[],"b_hit":1,"b_miss":2,"b_bypass":0,"b_todisk":2,"b_prefetch":0,"n_cks_errs":0}`
	f.send(s, 600, s.g('C', 0, 590, lineC, `not json`))
	_, evs, st := f.runTwice(t, DefaultConfig())
	if len(evs) != 2 || st.Events != 2 || st.InvalidEvents != 1 {
		t.Fatalf("events: %+v", evs)
	}
	e := evs[0]
	if e.Type != record.EventCacheFileClose || e.Provider != "C" || e.Time != tu(590) || e.Received != at(600) ||
		e.ServerIP != "192.0.2.20" || e.ServerID != 14 || e.ServerStod != t0 || e.Site != "CACHE_SITE" || !e.Valid {
		t.Errorf("event: %+v", e)
	}
	if want := record.EventID("192.0.2.20", t0, 14, 'C', 1, t0+590, 0, []byte(lineC)); e.EventID != want {
		t.Errorf("event id")
	}
	var v map[string]any
	if err := json.Unmarshal(e.Data, &v); err != nil || v["lfn"] != "/a" {
		t.Errorf("data %s: %v", e.Data, err)
	}
	if evs[1].Valid || !strings.Contains(string(evs[1].Data), "not json") || evs[0].EventID == evs[1].EventID {
		t.Errorf("invalid line: %+v", evs[1])
	}
}

// TestDisconnectedSessionsExpire: a disconnected session whose file is still
// waiting (its disconnect partial pending) must not hold back the expiry of
// the disconnected sessions behind it, and those go after DisconnectGrace.
func TestDisconnectedSessionsExpire(t *testing.T) {
	cfg := DefaultConfig()
	sv := newSrv("192.0.2.10:1094", 1700000000, 4242)
	s := NewShard(cfg)
	send := func(sec int64, b []byte) { s.Handle(b, sv.addr, at(sec)) }
	uid1 := sv.uid("xroot", "u1", 1, "h.example.org")
	send(0, sv.login(10, uid1, packet.Login{}))
	send(0, sv.f(int32(t0), int32(t0), func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(11, 10, "/f", 1))
		fb.Disc(10)
	}))
	for i := range 100 {
		u := uint32(100 + i)
		send(1, sv.login(u, sv.uid("xroot", fmt.Sprintf("u%d", u), int(u), "h.example.org"), packet.Login{}))
		send(1, sv.f(int32(t0+1), int32(t0+1), func(fb *packet.FStreamBuilder) { fb.Disc(u) }))
	}
	if got := s.Stats().Sessions; got != 101 {
		t.Fatalf("sessions = %d, want 101", got)
	}
	grace := int64(cfg.DisconnectGrace / time.Second)
	s.Tick(at(grace + 2))
	if got := s.Stats().Sessions; got != 1 {
		t.Fatalf("after the grace, sessions = %d, want 1 (the one with a waiting file)", got)
	}
	s.Tick(at(int64(cfg.PendingTTL/time.Second) + grace + 4))
	recs := drainRecords(s)
	if len(recs) != 1 || recs[0].Reason != record.Disconnect || recs[0].User != "u1" {
		t.Fatalf("records %+v", recs)
	}
	if got := s.Stats().Sessions; got != 0 {
		t.Fatalf("sessions = %d at the end, want 0", got)
	}
}

// TestDisconnectedSessionsBudget: at a churn of logins that would hold
// more disconnected sessions through their grace than their budget
// (shareDisc) allows, the oldest go early (counted as evicted), the bytes
// held stay within the budget, the one whose file still waits is kept, and
// a late open of the latest disconnected session still gets its user.
func TestDisconnectedSessionsBudget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxStateBytes = 1 << 20 // a disconnected-session budget of 31 KB
	sv := newSrv("192.0.2.10:1094", 1700000000, 4242)
	s := NewShard(cfg)
	send := func(b []byte) { s.Handle(b, sv.addr, at(1)) }
	send(sv.login(10, sv.uid("xroot", "u1", 1, "h.example.org"), packet.Login{}))
	send(sv.f(int32(t0), int32(t0), func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(11, 10, "/f", 1))
		fb.Disc(10)
	}))
	const n = 5000
	for i := range n {
		u := uint32(100 + i)
		send(sv.login(u, sv.uid("xroot", fmt.Sprintf("u%d", u), int(u), "h.example.org"), packet.Login{}))
		send(sv.f(int32(t0+1), int32(t0+1), func(fb *packet.FStreamBuilder) { fb.Disc(u) }))
	}
	st := s.Stats()
	budget := cfg.budget(shareDisc)
	if s.discBytes > budget+sessionOverhead+2*maxUserIDBytes+2*maxLoginBytes {
		t.Errorf("disconnected sessions hold %d bytes, budget %d", s.discBytes, budget)
	}
	var held int64
	for i := range s.sessIdx.values() {
		if ss := s.sess.at(i); ss.disc {
			held += ss.cost
		}
	}
	if held != s.discBytes {
		t.Errorf("counted %d bytes of disconnected sessions, tables hold %d", s.discBytes, held)
	}
	if st.Sessions < 10 || st.Sessions > n/10 || st.EvictedSess != uint64(n+1-st.Sessions) {
		t.Errorf("%d sessions held, %d evicted, of %d", st.Sessions, st.EvictedSess, n+1)
	}
	last := uint32(100 + n - 1)
	send(sv.f(int32(t0+2), int32(t0+2), func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(12, last, "/late", 1))
		fb.Close(packet.FileClose{FileID: 12})
	}))
	s.Tick(at(int64(cfg.PendingTTL/time.Second) + 4))
	recs := byFile(drainRecords(s))
	if r := recs[11]; r.Reason != record.Disconnect || r.User != "u1" {
		t.Errorf("the waiting file: %+v", r)
	}
	if r := recs[12]; r.User != fmt.Sprintf("u%d", last) {
		t.Errorf("the late open of the latest session: user %q", r.User)
	}
}

// A server whose clock runs 49 minutes ahead: its records are kept with
// the server's times, flagged clock_ahead and counted; one a minute ahead
// is within the tolerance (5 minutes by default).
func TestScenarioClockAhead(t *testing.T) {
	s := newSrv("192.0.2.61:40000", t0, 61)
	var f feed
	f.send(s, 10, s.f(2940+5, 2940+6, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(1, 0, "/ahead", 1))
		fb.Close(packet.FileClose{FileID: 1})
	}))
	f.send(s, 11, s.f(60, 61, func(fb *packet.FStreamBuilder) {
		fb.Open(openLFN(2, 0, "/near", 1))
		fb.Close(packet.FileClose{FileID: 2})
	}))
	recs, _, st := f.runTwice(t, DefaultConfig())
	m := byFile(recs)
	if len(recs) != 2 || !m[1].ClockAhead || m[1].End != tu(2946) || m[2].ClockAhead || st.ClockAhead != 1 {
		t.Errorf("clock ahead: %d counted, records %+v", st.ClockAhead, recs)
	}
	cfg := DefaultConfig()
	cfg.ClockAheadTolerance = time.Hour
	if recs, _, st := f.run(t, cfg); st.ClockAhead != 0 || recs[0].ClockAhead {
		t.Errorf("tolerance 1h: %d counted", st.ClockAhead)
	}
}
