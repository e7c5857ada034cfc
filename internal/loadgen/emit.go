package loadgen

import (
	"fmt"
	"strconv"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// Emission: what a simulated server sends about what happens, encoded as
// XRootD sends it: map records (ident, user, token, info, UEAC, path), the
// f-stream with its isOpen/isXfr/isClose/isDisc records, the g-stream
// buffers, and the server's timers that flush them. Redirect (r-stream)
// and trace (t-stream) packets are in redirect.go and trace.go.

// f-stream record kinds pending in a buffer, applied to the truth when the
// buffer is sent.
const (
	opOpen = iota
	opXfr
	opClose
)

type fop struct {
	kind    uint8
	acc     int32
	r, v, w int64
	at      int64
}

type gbuf struct {
	data []byte
	ends []int32
	tBeg int32
	tEnd int32
	t0   int64 // ms of the first record
	pseq uint8
}

var (
	protXroot = []byte("xroot")
	instAnon  = []byte("anon")
	pgmXrootd = []byte("xrootd")
	verXrootd = []byte("v5.7.1")
	relClient = []byte("v5.7.1")
	srvUser   = []byte("xrootd")
)

// sec returns the Unix second of ms.
func sec(ms int64) int32 { return int32(ms / 1000) }

// appendUserID appends `xroot/user.sess:sid@host` for a client session.
func (r *run) appendUserID(dst []byte, s *server, ss *session) []byte {
	hosts := r.g.v4Hosts
	if ss.ipv6 {
		hosts = r.g.v6Hosts
	}
	return packet.AppendUserID(dst, packet.UserID{
		Prot: protXroot,
		User: r.g.users[ss.user].name.b,
		PID:  strconv.AppendUint(r.num[:0], uint64(ss.num), 10),
		SID:  s.sidDec,
		Host: hosts[ss.host].name.b,
	})
}

// sendMap sends a map record with the text in r.info.
func (r *run) sendMap(s *server, code byte, dict uint32) bool {
	if !r.room() {
		return false
	}
	start := len(r.arena)
	r.arena = packet.AppendMap(r.arena, packet.Header{Code: code, Pseq: s.pseqMain, Stod: uint32(s.stod)}, dict, r.info)
	s.pseqMain++
	r.emit(s, domMain, r.arena[start:])
	return true
}

func (r *run) sendIdent(s *server) bool {
	b := append(r.info[:0], "=/"...)
	b = append(b, srvUser...)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(s.pid), 10)
	b = append(b, ':')
	b = append(b, s.sidDec...)
	b = append(b, '@')
	b = append(b, s.host.b...)
	b = append(b, '\n')
	b = packet.AppendServerIdent(b, packet.ServerIdent{Site: s.site.b, Port: 1094, Inst: instAnon, Program: pgmXrootd, Version: verXrootd})
	r.info = b
	s.identAt = r.now
	return r.sendMap(s, packet.CodeIdent, 0)
}

var (
	authGSI = []byte("gsi")
	authZTN = []byte("ztn")
)

// sendLogin sends the map records of a new session: the user's login, and
// its token, application info and UEAC records if it has them; false when
// the run must stop.
func (r *run) sendLogin(s *server, ss *session) bool {
	u := &r.g.users[ss.user]
	ipv := byte(4)
	if ss.ipv6 {
		ipv = 6
	}
	l := packet.Login{
		HasAuth: true, AuthProt: authGSI, Name: u.dn.b, Host: r.hostOf(ss).name.b, Org: u.vo.b,
		Role: u.role.b, Groups: u.groups.b, MonInfo: u.dn.b,
		Release: relClient, App: r.g.apps[ss.app].b, IPv: ipv,
	}
	if ss.token {
		l.AuthProt, l.MonInfo = authZTN, nil
	}
	r.info = packet.AppendLogin(r.userLine(s, ss), l)
	if !r.sendMap(s, packet.CodeUser, ss.dict) {
		return false
	}
	if ss.token {
		r.info = packet.AppendToken(r.userLine(s, ss), packet.Token{UserDictID: ss.dict, Subject: u.subject.b, Name: u.tokenUser.b, Org: u.tokenOrg.b, Role: u.role.b, Groups: u.groups.b})
		if !r.sendNewDict(s, packet.CodeToken) {
			return false
		}
	}
	if ss.hasInfo {
		r.info = append(r.userLine(s, ss), r.g.infos[ss.info].b...)
		if !r.sendNewDict(s, packet.CodeInfo) {
			return false
		}
	}
	if ss.ueac {
		r.info = packet.AppendUEAC(r.userLine(s, ss), packet.UEAC{UserDictID: ss.dict, Experiment: ss.exp, Activity: ss.act})
		if !r.sendNewDict(s, packet.CodeUEAC) {
			return false
		}
	}
	return true
}

// userLine starts a map record's text in r.info: the session's user id and
// a newline.
func (r *run) userLine(s *server, ss *session) []byte {
	return append(r.appendUserID(r.info[:0], s, ss), '\n')
}

// sendNewDict sends the map record in r.info under the server's next
// dictid.
func (r *run) sendNewDict(s *server, code byte) bool {
	if !r.sendMap(s, code, s.nextDict) {
		return false
	}
	s.nextDict++
	return true
}

// sendOpen sends the path map record and the isOpen of access ai (path
// lfn) of session ss.
func (r *run) sendOpen(s *server, ss *session, ai int32, lfn []byte) bool {
	a := &r.accs[ai]
	r.info = append(r.userLine(s, ss), lfn...)
	if !r.sendMap(s, packet.CodePath, a.fileID) {
		return false
	}
	if !r.fRoom(s, packet.OpenRecordSize(len(lfn))) {
		return false
	}
	s.fb.Open(packet.FileOpen{FileID: a.fileID, FileSize: a.size, RW: a.rw, HasLFN: true, User: ss.dict, LFN: lfn})
	s.sumOpens++
	s.sumOpen++
	s.ops = append(s.ops, fop{kind: opOpen, acc: ai})
	return true
}

// fRoom starts the server's f-stream buffer or flushes it when a record of
// size bytes would not fit.
func (r *run) fRoom(s *server, size int) bool {
	if s.fOn && s.fb.Len()+size > r.cfg.FBSZ {
		if !r.flushF(s) {
			return false
		}
	}
	if !s.fOn {
		s.fb.Reset(s.fbuf[:0], packet.Header{Pseq: s.pseqF, Stod: uint32(s.stod)}, sec(r.now), sec(r.now), s.sid, true)
		s.fOn = true
	}
	return !r.stopped
}

// flushF sends the server's f-stream buffer and applies its records to the
// truth.
func (r *run) flushF(s *server) bool {
	if !s.fOn {
		return true
	}
	if !r.room() {
		return false
	}
	pkt := s.fb.Finish(sec(r.now))
	s.fbuf = pkt[:0]
	start := len(r.arena)
	r.arena = append(r.arena, pkt...)
	s.fOn = false
	s.pseqF++
	r.emit(s, domF, r.arena[start:])
	for i := range s.ops {
		op := &s.ops[i]
		a := &r.accs[op.acc]
		switch op.kind {
		case opOpen:
			a.state = accSent
		case opXfr:
			a.xr, a.xv, a.xw, a.xAt = op.r, op.v, op.w, op.at
		case opClose:
			r.finalize(op.acc, record.Complete)
		}
	}
	s.ops = s.ops[:0]
	return true
}

// gRoom makes room for a line of n bytes in the server's g buffer p.
func (r *run) addG(s *server, p int, line []byte) bool {
	gb := &s.g[p]
	if len(gb.ends) > 0 && packet.GStreamHeaderSize+len(gb.data)+len(line)+1 > r.cfg.GBuff {
		if !r.flushG(s, p) {
			return false
		}
	}
	if len(gb.ends) == 0 {
		gb.tBeg, gb.t0 = sec(r.now), r.now
	}
	gb.tEnd = sec(r.now)
	gb.data = append(gb.data, line...)
	gb.ends = append(gb.ends, int32(len(gb.data)))
	return true
}

var providers = [2]byte{packet.ProviderCache, packet.ProviderTPC}

func (r *run) flushG(s *server, p int) bool {
	gb := &s.g[p]
	if len(gb.ends) == 0 {
		return true
	}
	if !r.room() {
		return false
	}
	r.lines = r.lines[:0]
	prev := int32(0)
	for _, e := range gb.ends {
		r.lines = append(r.lines, gb.data[prev:e])
		prev = e
	}
	start := len(r.arena)
	r.arena = packet.AppendGStream(r.arena, packet.Header{Pseq: gb.pseq, Stod: uint32(s.stod)}, gb.tBeg, gb.tEnd, providers[p], s.sid, r.lines)
	clear(r.lines)
	gb.pseq++
	r.tally[s.idx].events[p] += int64(len(gb.ends))
	gb.data, gb.ends = gb.data[:0], gb.ends[:0]
	r.emit(s, domGC+p, r.arena[start:])
	return true
}

// flushServer sends the server's f-stream and g-stream buffers; false when
// the run must stop.
func (r *run) flushServer(s *server) bool {
	return r.flushF(s) && r.flushG(s, 0) && r.flushG(s, 1) && r.flushR(s)
}

// tick runs a server's fstat timer: isXfr for open files, the f-stream
// flush, g-stream flush timers and the periodic ident.
func (r *run) tick(s *server) {
	cfg := r.cfg
	s.ticks++
	if s.redir {
		if len(s.redirs) > 0 && r.now-s.rStart >= cfg.RedirectWindow.Milliseconds() && !r.flushR(s) {
			return
		}
		if r.now-s.identAt < cfg.IdentInterval.Milliseconds() || r.sendIdent(s) {
			r.schedule(r.now+cfg.FStat.Milliseconds(), evTick, int32(s.idx), 0)
		}
		return
	}
	if s.ticks%cfg.XfrEvery == 0 {
		base := s.idx * cfg.Clients
		for k := range cfg.Clients {
			c := &r.clients[base+k]
			if c.state != stFile {
				continue
			}
			a := &r.accs[c.acc]
			rd, rv, wr := a.progress(r.now)
			if rd == a.gr && rv == a.gv && wr == a.gw {
				continue // no I/O since the last report
			}
			if !r.fRoom(s, packet.XfrSize) {
				return
			}
			s.fb.Xfr(packet.FileXfr{FileID: a.fileID, Read: rd, Readv: rv, Write: wr})
			a.gr, a.gv, a.gw = rd, rv, wr
			s.ops = append(s.ops, fop{kind: opXfr, acc: c.acc, r: rd, v: rv, w: wr, at: r.now})
		}
	}
	if !r.flushF(s) {
		return
	}
	for p := range s.g {
		if len(s.g[p].ends) > 0 && r.now-s.g[p].t0 >= cfg.GFlush.Milliseconds() {
			if !r.flushG(s, p) {
				return
			}
		}
	}
	if r.now-s.identAt >= cfg.IdentInterval.Milliseconds() {
		if !r.sendIdent(s) {
			return
		}
	}
	if cfg.SummaryInterval > 0 && r.now-s.sumAt >= cfg.SummaryInterval.Milliseconds() {
		if !r.sendSummary(s) {
			return
		}
	}
	r.schedule(r.now+cfg.FStat.Milliseconds(), evTick, int32(s.idx), 0)
}

// ossTotal is the size of a simulated server's data path and space.
const ossTotal = 100_000_000_000_000

// sendSummary sends the server's xrd.report summary (XML, as XrdStats
// writes it) and adds its increases to the truth; false when the run must
// stop.
func (r *run) sendSummary(s *server) bool {
	if !r.room() {
		return false
	}
	s.sumAt = r.now
	tl := &r.tally[s.idx]
	if tl.summary == nil {
		tl.summary = &SummaryTruth{Increase: map[string]int64{"link.in": 0, "link.out": 0, "xrootd.ops.open": 0, "xrootd.err": 0}}
		s.sumPrev = [4]int64{-1, -1, -1, -1}
	}
	cur := [4]int64{s.sumIn, s.sumOut, s.sumOpens, s.sumErr}
	if s.sumPrev[0] >= 0 {
		for i, name := range [4]string{"link.in", "link.out", "xrootd.ops.open", "xrootd.err"} {
			tl.summary.Increase[name] += cur[i] - s.sumPrev[i]
		}
	}
	s.sumPrev = cur
	tl.summary.Reports++
	tod := r.now / 1000
	start := len(r.arena)
	r.arena = fmt.Appendf(r.arena, `<statistics tod="%d" ver="%s" src="%s:1094" tos="%d" pgm="xrootd" ins="anon" pid="%d" site="%s">`+
		`<stats id="link"><num>%d</num><maxn>%d</maxn><tot>%d</tot><in>%d</in><out>%d</out><ctime>0</ctime><tmo>0</tmo><stall>0</stall><sfps>0</sfps></stats>`+
		`<stats id="xrootd"><num>%d</num><ops><open>%d</open></ops><err>%d</err></stats>`+
		// One data path, and one space that holds what was written (an
		// XCache's cache space), of 100 TB.
		`<stats id="oss" v="2"><paths>1<stats id="0"><lp>"/data"</lp><rp>"/data"</rp><tot>%d</tot><free>%d</free><ino>100000000</ino><ifr>90000000</ifr></stats></paths>`+
		`<space>1<stats id="0"><name>public</name><tot>%d</tot><free>%d</free><maxf>%d</maxf><fsn>1</fsn><usg>%d</usg></stats></space></stats>`+
		// The scheduler (XrdScheduler): a thread per active link beside an
		// idle pool of 8, as a busy server shows it.
		`<stats id="sched"><jobs>%d</jobs><inq>0</inq><maxinq>0</maxinq><threads>%d</threads><idle>8</idle><tcr>%d</tcr><tde>0</tde><tlimr>0</tlimr></stats>`+
		`<stats id="sgen"><as>1</as><et>0</et><toe>%d</toe></stats></statistics>`,
		tod, verXrootd, s.host.s, s.stod, s.pid, s.site.s, s.sumOpen, r.cfg.Clients, s.sumOpens, s.sumIn, s.sumOut, s.sumOpens, s.sumOpens, s.sumErr,
		ossTotal, max(ossTotal-s.sumIn, 0), ossTotal, max(ossTotal-s.sumIn, 0), max(ossTotal-s.sumIn, 0), s.sumIn,
		s.sumOpens, 8+s.sumOpen, 8+s.sumOpen, tod)
	r.emit(s, domSum, r.arena[start:])
	return true
}
