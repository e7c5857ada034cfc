package correlate

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// fuzzFeed turns fuzz input into a feed: each op byte picks an action on
// one of three servers (two on one address, so identities collide), with
// small dictids and file ids (so they collide too), texts of hostile size,
// corrupted datagrams and jumps of the clock back and forth.
func fuzzFeed(b []byte) *feed {
	srvs := []*srv{
		newSrv("192.0.2.70:1094", t0, 1),
		newSrv("192.0.2.70:1094", t0+5, 2), // same address, another identity
		newSrv("[2001:db8::70]:1094", t0, 1),
	}
	var f feed
	sec := int64(10)
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		c := b[0]
		b = b[1:]
		return c
	}
	for len(b) > 0 {
		op, arg := next(), next()
		s := srvs[int(op>>5)%len(srvs)]
		id := uint32(arg%8) + 1
		user := uint32(arg>>3%4) + 1
		uid := s.uid("xroot", "u", int(user), "h")
		var d []byte
		switch op % 12 {
		case 0:
			d = s.ident("SITE")
		case 1:
			d = s.login(user, uid, gsiLogin)
		case 2:
			d = s.path(id, uid, "/p/"+string(rune('a'+arg%26)))
		case 3:
			d = s.f(int32(sec-1), int32(sec), func(fb *packet.FStreamBuilder) { fb.Open(openLFN(id, user, "/f", int64(arg))) })
		case 4:
			d = s.f(int32(sec-1), int32(sec), func(fb *packet.FStreamBuilder) { fb.Xfr(packet.FileXfr{FileID: id, Read: int64(arg)}) })
		case 5:
			d = s.f(int32(sec-1), int32(sec), func(fb *packet.FStreamBuilder) {
				fb.Close(packet.FileClose{FileID: id, Read: int64(arg)})
			})
		case 6:
			d = s.f(int32(sec-1), int32(sec), func(fb *packet.FStreamBuilder) { fb.Disc(user) })
		case 7:
			d = s.g('C', int32(sec-1), int32(sec), `{"event":"file_close","lfn":"/x","size":1}`)
		case 8: // a long text, over the caps
			d = s.path(id, uid, "/"+string(bytes.Repeat([]byte{'L'}, 5000+int(arg))))
		case 9: // a corrupted copy of a datagram
			d = s.login(user, uid, gsiLogin)
			if len(d) > 0 {
				d[int(arg)%len(d)] ^= 0xff
			}
		case 10: // the clock jumps
			sec += int64(int8(arg)) * 60
			if sec < 1 {
				sec = 1
			}
			f.tick(sec)
			continue
		case 11: // a server restart: new stod
			s.stod += uint32(arg%3) + 1
			d = s.ident("SITE")
		}
		f.send(s, sec, d)
		sec++
	}
	f.tick(sec + 1<<20)
	return &f
}

// fuzzConfig has bounds tight enough for a short input to reach them.
func fuzzConfig() Config {
	cfg := DefaultConfig()
	cfg.MaxOpenFiles, cfg.MaxOpenFilesPerServer = 4, 3
	cfg.MaxSessions, cfg.MaxSessionsPerServer = 4, 3
	cfg.MaxPending = 3
	cfg.MaxServers, cfg.MaxServersPerAddr = 3, 2
	cfg.InternMax = 8
	cfg.MaxStateBytes = 1 << 20
	cfg.ReorderWindow = 4
	return cfg
}

// FuzzCorrelate is the property of checkpoints under hostile input: a run
// snapshotted and restored after every step (as restarts would) gives the
// same records, events and counters as one uninterrupted run, never
// panics, and keeps its byte counts equal to what its tables hold.
func FuzzCorrelate(f *testing.F) {
	f.Add([]byte{0, 0, 1, 9, 2, 3, 3, 3, 4, 9, 5, 3, 6, 9})
	f.Add([]byte{32, 0, 33, 1, 35, 2, 37, 2, 64, 0, 67, 5, 69, 5, 11, 1, 7, 0})
	f.Add([]byte{8, 200, 8, 201, 3, 9, 10, 250, 5, 9, 10, 7, 9, 4, 11, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 400 {
			return
		}
		fd := fuzzFeed(b)
		cfg := fuzzConfig()
		r1, e1, s1 := fd.run(t, cfg)
		// Restored after every step.
		s := NewShard(cfg)
		var r2 []record.Record
		var e2 []record.Event
		var o Output
		for _, st := range fd.steps {
			s = restoreCopy(t, s, cfg)
			switch {
			case st.d != nil:
				s.Handle(st.d.data, st.d.sender, st.d.at)
			case st.tick:
				s.Tick(st.at)
			}
			r2, e2 = take(s, &o, r2, e2)
		}
		if !reflect.DeepEqual(r1, r2) {
			t.Fatalf("records differ with restores:\n got %+v\nwant %+v", r2, r1)
		}
		if !reflect.DeepEqual(e1, e2) {
			t.Fatal("events differ with restores")
		}
		if s2 := s.Stats(); !sameState(s1, s2) {
			t.Fatalf("stats differ with restores:\n got %+v\nwant %+v", s2, s1)
		}
		if st := s.Stats(); st.Servers > cfg.MaxServers || st.OpenFiles > cfg.MaxOpenFiles || st.Sessions > cfg.MaxSessions {
			t.Fatalf("bounds exceeded: %+v", st)
		}
	})
}
