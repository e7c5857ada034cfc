package correlate

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// mix is a replayable workload: one pass opens, reads and closes every
// file of every user of every server. Between passes the sequence numbers
// are rewritten so the streams continue without gaps.
type mix struct {
	pkts    []dgram
	domains []int // index into seqs per packet (-1: no rewrite)
	seqs    []uint8
	records int // records per pass
}

// newMix builds servers × users × files: per server and pass, a '=' ident,
// one u and per file one d record, f packets (opens, two xfr rounds,
// closes with OPS and the disconnects) and one g packet.
func newMix(servers, users, files int) *mix {
	m := &mix{}
	for si := 0; si < servers; si++ {
		s := newSrv(fmt.Sprintf("10.%d.%d.%d:1094", si>>16&255, si>>8&255, si&255), t0, uint64(1000+si))
		base := len(m.seqs)
		m.seqs = append(m.seqs, 0, 0, 1) // main, f, g
		add := func(d int, data []byte) {
			m.pkts = append(m.pkts, dgram{data: data, sender: s.addr, at: at(0)})
			m.domains = append(m.domains, base+d)
		}
		add(0, s.ident("SITE"+strconv.Itoa(si%20)))
		type fileRef struct{ id, user uint32 }
		var refs []fileRef
		next := uint32(1)
		for u := 0; u < users; u++ {
			uid := s.uid("xroot", "user"+strconv.Itoa(u%50), 1000+u, "wn"+strconv.Itoa(u)+".example.org")
			ud := next
			next++
			add(0, s.login(ud, uid, gsiLogin))
			for f := 0; f < files; f++ {
				add(0, s.path(next, uid, "/store/data/run"+strconv.Itoa(u%7)+"/file"+strconv.Itoa(f)+".root"))
				refs = append(refs, fileRef{next, ud})
				next++
			}
		}
		// f packets hold up to 64 records each, as a server's buffer does.
		emit := func(fill func(fb *packet.FStreamBuilder, r fileRef)) {
			for i := 0; i < len(refs); i += 64 {
				end := min(i+64, len(refs))
				add(1, s.f(0, 60, func(fb *packet.FStreamBuilder) {
					for _, r := range refs[i:end] {
						fill(fb, r)
					}
				}))
			}
		}
		emit(func(fb *packet.FStreamBuilder, r fileRef) {
			fb.Open(packet.FileOpen{FileID: r.id, FileSize: 1 << 20})
		})
		emit(func(fb *packet.FStreamBuilder, r fileRef) { fb.Xfr(packet.FileXfr{FileID: r.id, Read: 4096}) })
		emit(func(fb *packet.FStreamBuilder, r fileRef) { fb.Xfr(packet.FileXfr{FileID: r.id, Read: 8192}) })
		emit(func(fb *packet.FStreamBuilder, r fileRef) {
			fb.Close(packet.FileClose{FileID: r.id, Read: 1 << 20, HasOps: true, Ops: packet.Ops{Read: 256, RdMin: 4096, RdMax: 4096}})
		})
		add(2, s.g('R', 0, 60, `{"event":"throttle_update","io_wait":1.5,"io_active":2,"io_total":1000}`))
		m.records += len(refs)
	}
	return m
}

// pass rewrites sequence numbers for the next pass.
func (m *mix) pass() {
	for i, d := range m.domains {
		m.pkts[i].data[1] = m.seqs[d]
		m.seqs[d]++
	}
}

// BenchmarkCorrelate measures Handle on a realistic mix: 200 servers,
// 20 users each with 4 files (~75% f-stream packets by count, the rest map
// records and a g packet per server), records drained as the pipeline
// does. One op is one datagram.
//
//	go test ./internal/correlate -run '^$' -bench 'Correlate$' -benchtime 2000000x
func BenchmarkCorrelate(b *testing.B) {
	m := newMix(200, 20, 4)
	s := NewShard(DefaultConfig())
	var recs []record.Record
	var evs []record.Event
	var o Output
	now := at(0)
	i := len(m.pkts)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		if i == len(m.pkts) {
			b.StopTimer()
			m.pass()
			i = 0
			b.StartTimer()
		}
		p := &m.pkts[i]
		s.Handle(p.data, p.sender, now)
		i++
		if n&63 == 0 {
			recs, evs = take(s, &o, recs[:0], evs[:0])
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "packets/s")
	if st := s.Stats(); st.TotalLost() != 0 || st.TotalRejected() != 0 {
		b.Fatalf("stats: %+v", st)
	}
}

// BenchmarkCorrelateOpenFiles measures an f packet of 8 isXfr records for
// random files while open files are held across 100 servers: the cost must
// not grow with the number of open files.
func BenchmarkCorrelateOpenFiles(b *testing.B) {
	for _, open := range []int{10, 1000, 100000} {
		b.Run("open="+strconv.Itoa(open), func(b *testing.B) {
			s := NewShard(DefaultConfig())
			const nsrv = 100
			srvs := make([]*srv, nsrv)
			for i := range srvs {
				srvs[i] = newSrv(fmt.Sprintf("10.1.%d.%d:1094", i>>8, i&255), t0, uint64(i+1))
			}
			now := at(0)
			for i := 0; i < open; i++ {
				sv := srvs[i%nsrv]
				s.Handle(sv.f(0, 1, func(fb *packet.FStreamBuilder) {
					fb.Open(packet.FileOpen{FileID: uint32(i/nsrv + 1), FileSize: 1})
				}), sv.addr, now)
			}
			// prebuilt packets: 8 xfrs each for random open files of one server
			rng := rand.New(rand.NewPCG(1, 2))
			const npk = 4096
			pk := make([][]byte, npk)
			who := make([]*srv, npk)
			for j := range pk {
				sv := srvs[j%nsrv]
				perSrv := max(open/nsrv, 1)
				pk[j] = sv.f(0, 2, func(fb *packet.FStreamBuilder) {
					for k := 0; k < 8; k++ {
						fb.Xfr(packet.FileXfr{FileID: uint32(rng.IntN(perSrv) + 1), Read: int64(j)})
					}
				})
				who[j] = sv
			}
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				j := n % npk
				pk[j][1]++ // keep each server's f sequence moving (duplicates are not applied)
				s.Handle(pk[j], who[j].addr, now)
			}
			b.StopTimer()
			if st := s.Stats(); st.OpenFiles != max(open, 0) && open >= nsrv {
				b.Fatalf("open files %d, want %d", st.OpenFiles, open)
			}
		})
	}
}

// TestHandleAllocs: f-stream packets of a known server do not allocate in
// steady state: xfr updates, and open/close cycles with interned paths
// that emit records.
func TestHandleAllocs(t *testing.T) {
	s := NewShard(DefaultConfig())
	sv := newSrv("192.0.2.30:1094", t0, 1)
	uid := sv.uid("xroot", "a", 1, "h")
	s.Handle(sv.login(1, uid, gsiLogin), sv.addr, at(0))
	open := sv.f(0, 1, func(fb *packet.FStreamBuilder) {
		for i := uint32(2); i < 10; i++ {
			fb.Open(openLFN(i, 1, "/store/f"+strconv.Itoa(int(i)), 10))
		}
	})
	xfr := sv.f(0, 1, func(fb *packet.FStreamBuilder) {
		for i := uint32(2); i < 10; i++ {
			fb.Xfr(packet.FileXfr{FileID: i, Read: 5})
		}
	})
	cls := sv.f(0, 1, func(fb *packet.FStreamBuilder) {
		for i := uint32(2); i < 10; i++ {
			fb.Close(packet.FileClose{FileID: i, Read: 10, HasOps: true})
		}
	})
	var recs []record.Record
	var o Output
	cycle := func() {
		for _, p := range [][]byte{open, xfr, xfr, cls} {
			p[1] = sv.fSeq
			sv.fSeq++
			s.Handle(p, sv.addr, at(1))
		}
		recs, _ = take(s, &o, recs[:0], nil)
	}
	for i := 0; i < 10; i++ {
		cycle()
	}
	if n := testing.AllocsPerRun(200, cycle); n != 0 {
		t.Errorf("allocs per open/xfr/close cycle of 8 files: %v", n)
	}
	if len(recs) != 8 || recs[0].Reason != record.Complete || recs[0].User != "a" {
		t.Fatalf("records: %+v", recs)
	}
	if st := s.Stats(); st.TotalLost() != 0 || st.Duplicates != 0 {
		t.Errorf("stats: %+v", st)
	}
}

// TestMemoryPerOpenFile measures the heap held per open file (entry, map
// slot, list links), without path text: 100,000 opens without LFN.
func TestMemoryPerOpenFile(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const n = 100_000
	sv := newSrv("192.0.2.31:1094", t0, 1)
	pk := make([][]byte, 0, n/100)
	for i := 0; i < n; i += 100 {
		pk = append(pk, sv.f(0, 1, func(fb *packet.FStreamBuilder) {
			for j := 0; j < 100; j++ {
				fb.Open(packet.FileOpen{FileID: uint32(i + j + 1), FileSize: 1})
			}
		}))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cfg := DefaultConfig()
	s := NewShard(cfg)
	for _, p := range pk {
		s.Handle(p, sv.addr, at(0))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := s.Stats().OpenFiles; got != n {
		t.Fatalf("open files %d", got)
	}
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("heap per open file: %.0f bytes (fileEntry %d bytes)", per, unsafe.Sizeof(fileEntry{}))
	if per > 256 {
		t.Errorf("heap per open file %.0f bytes > 256", per)
	}
	runtime.KeepAlive(s)
	runtime.KeepAlive(pk)
}

// BenchmarkDrain makes 4,096 records and hands them to the pipeline the
// way its barriers do: drained as chunks, given back (Recycle) after the
// commit. In steady state nothing is allocated or copied.
func BenchmarkDrain(b *testing.B) {
	s := NewShard(DefaultConfig())
	var o Output
	b.ReportAllocs()
	for b.Loop() {
		for range 4096 {
			if len(s.out) == cap(s.out) {
				s.nextChunk()
			}
			s.out = append(s.out, record.Record{Path: "/store/f", ReadBytes: 1})
		}
		clear(o.Records)
		o.Records = o.Records[:0]
		s.Drain(&o)
		s.Recycle(o.Records)
	}
}

// TestLoginAllocs: the login of a new session, with a userid text the
// index does not hold, and its token cost no allocation in steady state:
// the text is kept as its parts, and the login payload's and the token's
// parsed forms and names are shared.
func TestLoginAllocs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSessions = 64
	s := NewShard(cfg)
	sv := newSrv("192.0.2.41:1094", t0, 1)
	s.Handle(sv.ident("SITE"), sv.addr, at(0))
	logins := make([][]byte, 0, 256) // twice the sessions kept: each login is a new session
	seq := sv.mainSeq
	for i := range 128 {
		uid := sv.uid("xroot", "cmsuser", 1000+i, "wn1.example.org")
		logins = append(logins, sv.login(uint32(i+1), uid, gsiLogin), sv.token(uint32(1000+i), uid, packet.Token{
			UserDictID: uint32(i + 1), Subject: []byte("a1b2-c3d4"), Name: []byte("cmsuser"), Org: []byte("cms"),
			Role: []byte("production"), Groups: []byte("/cms")}))
	}
	sv.mainSeq = seq
	cycle := func() {
		for _, p := range logins {
			p[1] = sv.mainSeq
			sv.mainSeq++
			s.Handle(p, sv.addr, at(1))
		}
	}
	for range 3 {
		cycle()
	}
	if n := testing.AllocsPerRun(50, cycle); n != 0 {
		t.Errorf("allocations per %d logins and tokens: %v", len(logins)/2, n)
	}
	if st := s.Stats(); st.TotalLost() != 0 || st.Duplicates != 0 {
		t.Errorf("stats: %+v", st)
	}
	j, ok := s.sessionOfText(s.incList[0], sv.uid("xroot", "cmsuser", 1000+127, "wn1.example.org"))
	if !ok || s.sess.at(j).dictID != 128 {
		t.Fatalf("the last login's text: session %d, %v", j, ok)
	}
	k, _ := s.sessionOfText(s.incList[0], sv.uid("xroot", "cmsuser", 1000+126, "wn1.example.org"))
	tj, tk := s.sess.at(j).token, s.sess.at(k).token
	if tj == nil || tj != tk || tj.subject != "a1b2-c3d4" || tj.groups != "/cms" {
		t.Errorf("two sessions' tokens: %+v and %+v, want one shared", tj, tk)
	}
}

// TestGStreamAllocs: g-stream packets of a known server cost no
// allocation per packet or per line in steady state: the events' ids and
// raw lines are written into the shard's arena (one allocation per
// arenaChunk bytes).
func TestGStreamAllocs(t *testing.T) {
	s := NewShard(DefaultConfig())
	sv := newSrv("192.0.2.42:1094", t0, 1)
	s.Handle(sv.ident("SITE"), sv.addr, at(0))
	line := `{"event":"file_close","lfn":"/store/data/f.root","size":1048576,"blk_size":1048576,"n_blks":1,"n_blks_done":1,"access_cnt":1,"attach_t":1750000000,"detach_t":1750000010,"remotes":[],"b_hit":0,"b_miss":1048576,"b_bypass":0}`
	p := sv.g('C', 0, 1, line, line, line, line)
	seq := byte(2)
	var o Output
	const packets = 64
	cycle := func() {
		for range packets {
			p[1] = seq
			seq++
			s.Handle(p, sv.addr, at(1))
		}
		o.Events = o.Events[:0]
		s.Drain(&o)
		if len(o.Events) != 4*packets {
			t.Fatalf("%d events, want %d", len(o.Events), 4*packets)
		}
	}
	for range 3 {
		cycle()
	}
	// 256 events of about 250 bytes (id and line): four chunks.
	if n := testing.AllocsPerRun(50, cycle); n > 5 {
		t.Errorf("%v allocations per %d g-stream packets of 4 lines", n, packets)
	}
	e := o.Events[len(o.Events)-1]
	want := record.EventID(e.ServerIP, e.ServerStod, e.ServerID, 'C', seq-1, t0+1, 3, []byte(line))
	if string(e.Raw) != line || e.EventID != want || cap(e.Raw) != len(e.Raw) {
		t.Errorf("event: id %q (want %q), raw %q (cap %d)", e.EventID, want, e.Raw, cap(e.Raw))
	}
}
