package correlate

import (
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// t0 is the base of the test clocks (server and collector agree here; the
// correlator must take record times from the server's packets only).
const t0 = 1_750_000_000

// srv builds the datagrams of one simulated server incarnation with the
// packet encoder, keeping its sequence counters as the server does.
type srv struct {
	addr    netip.AddrPort
	stod    uint32
	sid     uint64
	host    string
	mainSeq uint8
	fSeq    uint8
	gSeq    map[byte]uint8
}

func newSrv(addr string, stod uint32, sid uint64) *srv {
	return &srv{addr: netip.MustParseAddrPort(addr), stod: stod, sid: sid, host: "xrd.example.org", gSeq: map[byte]uint8{}}
}

func (s *srv) hdr(code byte, seq *uint8) packet.Header {
	h := packet.Header{Code: code, Pseq: *seq, Stod: s.stod}
	*seq++
	return h
}

// uid returns `prot/user.pid:sid@host` of this server.
func (s *srv) uid(prot, user string, pid int, host string) []byte {
	return packet.AppendUserID(nil, packet.UserID{
		Prot: []byte(prot), User: []byte(user), PID: []byte(strconv.Itoa(pid)),
		SID: []byte(strconv.FormatUint(s.sid, 10)), Host: []byte(host),
	})
}

func join(uid []byte, payload []byte) []byte {
	b := append([]byte(nil), uid...)
	b = append(b, '\n')
	return append(b, payload...)
}

func (s *srv) ident(site string) []byte {
	uid := packet.AppendUserID(nil, packet.UserID{Prot: []byte("="), User: []byte("xrootd"), PID: []byte("4242"),
		SID: []byte(strconv.FormatUint(s.sid, 10)), Host: []byte(s.host)})
	p := packet.AppendServerIdent(nil, packet.ServerIdent{Site: []byte(site), Port: 1094, Inst: []byte("anon"),
		Program: []byte("xrootd"), Version: []byte("v5.7.1")})
	return packet.AppendMap(nil, s.hdr('=', &s.mainSeq), 0, join(uid, p))
}

func (s *srv) login(dict uint32, uid []byte, l packet.Login) []byte {
	return packet.AppendMap(nil, s.hdr('u', &s.mainSeq), dict, join(uid, packet.AppendLogin(nil, l)))
}

func (s *srv) path(dict uint32, uid []byte, path string) []byte {
	return packet.AppendMap(nil, s.hdr('d', &s.mainSeq), dict, join(uid, []byte(path)))
}

func (s *srv) info(dict uint32, uid []byte, text string) []byte {
	return packet.AppendMap(nil, s.hdr('i', &s.mainSeq), dict, join(uid, []byte(text)))
}

func (s *srv) token(dict uint32, uid []byte, t packet.Token) []byte {
	return packet.AppendMap(nil, s.hdr('T', &s.mainSeq), dict, join(uid, packet.AppendToken(nil, t)))
}

func (s *srv) ueac(dict uint32, uid []byte, u packet.UEAC) []byte {
	return packet.AppendMap(nil, s.hdr('U', &s.mainSeq), dict, join(uid, packet.AppendUEAC(nil, u)))
}

// f builds one f-stream packet with window [t0+tBeg, t0+tEnd].
func (s *srv) f(tBeg, tEnd int32, fill func(fb *packet.FStreamBuilder)) []byte {
	var fb packet.FStreamBuilder
	fb.Reset(nil, s.hdr('f', &s.fSeq), t0+tBeg, t0+tEnd, s.sid, true)
	fill(&fb)
	return fb.Finish(t0 + tEnd)
}

func (s *srv) g(prov byte, tBeg, tEnd int32, lines ...string) []byte {
	seq := s.gSeq[prov]
	if seq == 0 {
		seq = 1
	}
	h := packet.Header{Code: 'g', Pseq: seq, Stod: s.stod}
	s.gSeq[prov] = seq + 1
	ls := make([][]byte, len(lines))
	for i, l := range lines {
		ls[i] = []byte(l)
	}
	return packet.AppendGStream(nil, h, t0+tBeg, t0+tEnd, prov, s.sid, ls)
}

func openLFN(id, user uint32, lfn string, size int64) packet.FileOpen {
	return packet.FileOpen{FileID: id, FileSize: size, HasLFN: true, User: user, LFN: []byte(lfn)}
}

// dgram is one datagram as received.
type dgram struct {
	data   []byte
	sender netip.AddrPort
	at     time.Time
}

// feed is a sequence of datagrams and ticks, replayable.
type feed struct {
	steps []step
}

type step struct {
	d     *dgram
	tick  bool
	flush bool
	at    time.Time
}

func at(sec int64) time.Time { return time.Unix(t0+sec, 0).UTC() }

func (f *feed) send(s *srv, sec int64, data []byte) {
	f.steps = append(f.steps, step{d: &dgram{data: data, sender: s.addr, at: at(sec)}})
}

func (f *feed) tick(sec int64)  { f.steps = append(f.steps, step{tick: true, at: at(sec)}) }
func (f *feed) flush(sec int64) { f.steps = append(f.steps, step{flush: true, at: at(sec)}) }

// run replays the feed into a new shard and returns its records, events
// and stats.
func (f *feed) run(t testing.TB, cfg Config) ([]record.Record, []record.Event, Stats) {
	t.Helper()
	s := NewShard(cfg)
	var recs []record.Record
	var evs []record.Event
	var o Output
	for _, st := range f.steps {
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
	return recs, evs, s.Stats()
}

// runTwice replays the feed twice and checks both runs give identical
// records and events (deterministic ids included).
func (f *feed) runTwice(t *testing.T, cfg Config) ([]record.Record, []record.Event, Stats) {
	t.Helper()
	r1, e1, s1 := f.run(t, cfg)
	r2, e2, s2 := f.run(t, cfg)
	if !reflect.DeepEqual(r1, r2) || fmt.Sprint(noPointers(e1)) != fmt.Sprint(noPointers(e2)) || s1 != s2 {
		t.Fatalf("two runs differ")
	}
	return r1, e1, s2
}

// noPointers returns evs with what their pointers point to instead of
// them (fmt prints pointers' addresses).
func noPointers(evs []record.Event) []any {
	out := make([]any, len(evs))
	for i, e := range evs {
		var link record.RedirectLink
		if e.Redirect != nil {
			link = *e.Redirect
		}
		e.Redirect = nil
		out[i] = []any{e, link}
	}
	return out
}

func tu(sec int64) time.Time { return time.Unix(t0+sec, 0).UTC() }

// wantID checks a record's id against the record package's rule.
func wantID(t *testing.T, r record.Record) {
	t.Helper()
	want := record.RecordID(r.ServerIP, r.ServerStod, r.ServerID, r.FileID, r.Start, r.End)
	if r.RecordID != want {
		t.Errorf("record id %s, want %s", r.RecordID, want)
	}
}

func byFile(recs []record.Record) map[uint32]record.Record {
	m := map[uint32]record.Record{}
	for _, r := range recs {
		m[r.FileID] = r
	}
	return m
}

// take drains s into o (emptied first, so that its slices are reused) and
// appends what it made to recs, the chunks' records copied out and the
// chunks given back to s, and to evs, typed, the invalid ones counted in
// s's Stats as the pipeline's writer counts them in its own. Opens,
// progress and activity are left in o.
func take(s *Shard, o *Output, recs []record.Record, evs []record.Event) ([]record.Record, []record.Event) {
	clear(o.Records)
	o.Records = o.Records[:0]
	clear(o.Events)
	o.Events = o.Events[:0]
	o.Opens, o.Progress, o.Activity = o.Opens[:0], o.Progress[:0], o.Activity[:0]
	s.Drain(o)
	for _, c := range o.Records {
		recs = append(recs, c...)
	}
	s.Recycle(o.Records)
	for i := range o.Events {
		if !record.TypeEvent(&o.Events[i]) {
			s.stats.InvalidEvents++
		}
	}
	return recs, append(evs, o.Events...)
}

// drain returns the records and the typed events s made since the last
// drain (take).
func drain(s *Shard) ([]record.Record, []record.Event) {
	var o Output
	return take(s, &o, nil, nil)
}

// drainRecords returns the records s made since the last drain; what
// else it made is dropped.
func drainRecords(s *Shard) []record.Record {
	recs, _ := drain(s)
	return recs
}

// drainEvents returns the typed events s made since the last drain; what
// else it made is dropped.
func drainEvents(s *Shard) []record.Event {
	_, evs := drain(s)
	return evs
}
