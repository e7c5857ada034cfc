package correlate

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// TestForgedIdentitiesStayInTheirAddress: 10,000 '=' packets with random
// stod and sID from one address hold at most MaxServersPerAddr
// incarnations, and a real server at another address keeps its open files:
// its transfer ends as one complete record.
func TestForgedIdentitiesStayInTheirAddress(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxServers = 100 // the flood alone would fill it 100 times over
	sh := NewShard(cfg)
	real := newSrv("192.0.2.50:1094", t0, 77)
	now := time.Unix(t0+10, 0)
	sh.Handle(real.ident("SITE"), real.addr, now)
	sh.Handle(real.f(0, 10, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(1, 0, "/real/file", 100)) }), real.addr, now)

	rng := rand.New(rand.NewPCG(1, 2))
	attacker := netip.MustParseAddrPort("198.51.100.66:1094")
	for range 10_000 {
		forged := newSrv(attacker.String(), rng.Uint32(), rng.Uint64()&sidMask)
		sh.Handle(forged.ident("EVIL"), attacker, now)
		if n := len(sh.byAddr[attacker.Addr()]); n > cfg.MaxServersPerAddr {
			t.Fatalf("%d incarnations for one address, bound %d", n, cfg.MaxServersPerAddr)
		}
	}
	if st := sh.Stats(); st.Servers > cfg.MaxServersPerAddr+1 || st.OpenFiles != 1 {
		t.Fatalf("after the flood: %d servers, %d open files; want at most %d and the real one's file",
			st.Servers, st.OpenFiles, cfg.MaxServersPerAddr+1)
	}
	if recs := drainRecords(sh); len(recs) != 0 {
		t.Fatalf("the flood emitted records: %+v", recs[0])
	}
	sh.Handle(real.f(10, 20, func(fb *packet.FStreamBuilder) { fb.Close(packet.FileClose{FileID: 1, Read: 100}) }), real.addr, now)
	recs := drainRecords(sh)
	if len(recs) != 1 || recs[0].Reason != record.Complete || recs[0].Path != "/real/file" || recs[0].ReadBytes != 100 {
		t.Fatalf("real server's record: %+v", recs)
	}
}

// TestDisconnectedSessionsUnderTheBound: sessions that disconnect (and are
// kept a grace period for late packets) count against MaxSessions and are
// the first to go: 5,000 login+disconnect sessions hold at most the bound.
func TestDisconnectedSessionsUnderTheBound(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSessions = 100
	sh := NewShard(cfg)
	s := newSrv("192.0.2.51:1094", t0, 78)
	now := time.Unix(t0+10, 0)
	for i := range uint32(5000) {
		uid := s.uid("xroot", "u", int(i), "client.example.org")
		sh.Handle(s.login(i+1, uid, packet.Login{}), s.addr, now)
		sh.Handle(s.f(0, 10, func(fb *packet.FStreamBuilder) { fb.Disc(i + 1) }), s.addr, now)
		if n := sh.sessIdx.len(); n > cfg.MaxSessions {
			t.Fatalf("after %d sessions %d held, bound %d", i+1, n, cfg.MaxSessions)
		}
	}
	// An active session is kept over the disconnected ones.
	uid := s.uid("xroot", "alice", 1, "client.example.org")
	sh.Handle(s.login(9001, uid, packet.Login{}), s.addr, now)
	sh.Handle(s.f(0, 10, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(5, 9001, "/a", 1)) }), s.addr, now)
	for i := range uint32(300) {
		uid := s.uid("xroot", "u", int(i), "client.example.org")
		sh.Handle(s.login(6000+i, uid, packet.Login{}), s.addr, now)
		sh.Handle(s.f(0, 10, func(fb *packet.FStreamBuilder) { fb.Disc(6000 + i) }), s.addr, now)
	}
	sh.Handle(s.f(10, 20, func(fb *packet.FStreamBuilder) { fb.Close(packet.FileClose{FileID: 5, Read: 1}) }), s.addr, now)
	recs := drainRecords(sh)
	if len(recs) != 1 || recs[0].User != "alice" {
		t.Fatalf("records %+v: want alice's complete record with her session", recs)
	}
}

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestStateBoundedInBytes: the attacks that grew memory without bound
// (paths, open files and logins with tens of KB of text) keep every table
// within its byte budget and the live heap within the state budget; texts
// are cut to their caps and counted; a well-behaved server's transfer still
// ends as a complete record.
func TestStateBoundedInBytes(t *testing.T) {
	const budget = 16 << 20
	big := strings.Repeat("x", 60_000)
	attacks := map[string]func(s *srv, i uint32) [][]byte{
		// 10,000 d records of 60 KB waiting for opens that never come.
		"paths": func(s *srv, i uint32) [][]byte {
			return [][]byte{s.path(i+1, s.uid("xroot", "u", 1, "h"), "/"+big+strconv.Itoa(int(i)))}
		},
		// opens with 60 KB LFNs, kept open.
		"open files": func(s *srv, i uint32) [][]byte {
			return [][]byte{s.f(0, 10, func(fb *packet.FStreamBuilder) {
				fb.Open(openLFN(i+1, 0, "/"+big[:20_000]+strconv.Itoa(int(i)), 1))
			})}
		},
		// logins with 30 KB payloads, each different.
		"logins": func(s *srv, i uint32) [][]byte {
			uid := s.uid("xroot", "u"+strconv.Itoa(int(i)), int(i), "h")
			return [][]byte{s.login(i+1, uid, packet.Login{HasAuth: true, AuthProt: []byte("gsi"), Name: []byte(big[:30_000] + strconv.Itoa(int(i)))})}
		},
	}
	for name, attack := range attacks {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxStateBytes = budget
			before := heapInUse()
			sh := NewShard(cfg)
			s := newSrv("198.51.100.77:1094", t0, 90)
			now := time.Unix(t0+10, 0)
			// A well-behaved server's user logs in before the attack.
			real := newSrv("192.0.2.60:1094", t0, 91)
			sh.Handle(real.login(7, real.uid("xroot", "alice", 1, "wn.example.org"), packet.Login{}), real.addr, now)
			n := uint32(10_000)
			if name == "open files" {
				n = 5_000
			}
			for i := range n {
				for _, p := range attack(s, i) {
					sh.Handle(p, s.addr, now)
				}
				drainRecords(sh)
			}
			st := sh.Stats()
			over := func(got, share int64, what string) {
				// one entry may overshoot: the check comes before it is added
				if limit := cfg.budget(share) + fileOverhead + 2*maxLoginBytes + maxPathBytes + 4096; got > limit {
					t.Errorf("%s: %d bytes, budget %d", what, got, cfg.budget(share))
				}
			}
			over(st.FileBytes, shareFiles, "open files")
			over(st.SessionBytes, shareSessions, "sessions")
			over(st.PendingBytes, sharePending, "pending")
			if f, se, p := sh.recount(); f != st.FileBytes || se != st.SessionBytes || p != st.PendingBytes {
				t.Errorf("counted %d/%d/%d bytes, tables hold %d/%d/%d", st.FileBytes, st.SessionBytes, st.PendingBytes, f, se, p)
			}
			if grown := int64(heapInUse()) - int64(before); grown > 2*budget {
				t.Errorf("live heap grew by %d MB, state budget %d MB", grown>>20, budget>>20)
			}
			var truncated uint64
			for _, n := range st.Truncated {
				truncated += n
			}
			if truncated == 0 {
				t.Errorf("no text was counted as truncated: %+v", st)
			}
			var b bytes.Buffer
			if err := sh.Snapshot(&b); err != nil {
				t.Fatal(err)
			}
			if b.Len() > 2*budget {
				t.Errorf("checkpoint of %d MB, state budget %d MB", b.Len()>>20, budget>>20)
			}
			// The well-behaved server kept its session: its user's transfer
			// ends as a complete record naming her.
			sh.Handle(real.f(0, 10, func(fb *packet.FStreamBuilder) { fb.Open(openLFN(1, 7, "/real", 5)) }), real.addr, now)
			sh.Handle(real.f(10, 20, func(fb *packet.FStreamBuilder) { fb.Close(packet.FileClose{FileID: 1, Read: 5}) }), real.addr, now)
			var ok bool
			for _, r := range drainRecords(sh) {
				ok = ok || (r.ServerIP == "192.0.2.60" && r.Reason == record.Complete && r.Path == "/real" && r.User == "alice")
			}
			if !ok {
				t.Error("the well-behaved server's transfer did not end as a complete record with its user")
			}
			runtime.KeepAlive(sh)
		})
	}
}
