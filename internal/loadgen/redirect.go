package loadgen

import (
	"github.com/xrdmon/xrdmon/internal/packet"
)

// Redirectors (Config.Redirectors) are servers without clients of their
// own: every client logs in at each of them too, and before each open the
// client is sent through a chain of them, hop k at redirector k, the last
// one naming the data server. Each hop is an r-stream packet of its
// redirector: a timing mark at the second of the redirect and the entry.

// maxRedirectors bounds Config.Redirectors (a session keeps a dictid per
// redirector).
const maxRedirectors = 4

// redirector returns redirector k.
func (r *run) redirector(k int) *server { return &r.servers[r.cfg.Servers+k] }

// redirLogins logs the session of c in at every redirector; false when the
// run must stop.
func (r *run) redirLogins(c *client, u *userInfo) bool {
	for k := range r.cfg.Redirectors {
		rs := r.redirector(k)
		c.sess.rdict[k] = rs.nextDict
		rs.nextDict++
		b := r.appendUserID(r.info[:0], rs, &c.sess)
		b = append(b, '\n')
		r.info = packet.AppendLogin(b, packet.Login{
			HasAuth: true, AuthProt: authGSI, Name: u.dn.b, Host: r.hostOf(&c.sess).name.b, Org: u.vo.b,
			Release: relClient, App: r.g.apps[c.sess.app].b, IPv: 4,
		})
		if !r.sendMap(rs, packet.CodeUser, c.sess.rdict[k]) {
			return false
		}
	}
	return true
}

// Redirect operation codes (protocol §4.2).
const (
	redirOpenr = 0x05
	redirOpenw = 0x06
)

// redirects sends the redirect chain that leads the client of c to the
// open of access a (path lfn) at its server, ending at the simulated time
// of the open, and notes the hops and the first redirect's time on a.
func (r *run) redirects(c *client, a *access, lfn []byte) bool {
	n := r.cfg.Redirectors
	if n == 0 {
		return true
	}
	s := &r.servers[c.srv]
	hops := 1 + s.rng.IntN(n)
	var delays [maxRedirectors]int64
	total := int64(0)
	for h := range hops {
		delays[h] = int64(float64(r.cfg.RedirectDelay.Milliseconds()) * (0.5 + s.rng.Float64()))
		total += delays[h]
	}
	at := a.start - total
	a.hops, a.rfirst = int32(hops), at
	op := uint8(redirOpenr)
	if a.rw {
		op = redirOpenw
	}
	for h := range hops {
		rs := r.redirector(h)
		target := s.host.b
		if h+1 < hops {
			target = r.redirector(h + 1).host.b
		}
		if r.cfg.RedirectWindow > 0 {
			if !r.bufferRedirect(rs, packet.RedirEntry{Xrootd: true, Op: op, Port: 1094, User: c.sess.rdict[h], Host: target, Path: lfn}) {
				return false
			}
			at += delays[h]
			continue
		}
		if !r.room() {
			return false
		}
		var rb packet.RedirBuilder
		start := len(r.arena)
		rb.Reset(r.arena, packet.Header{Pseq: rs.pseqMain, Stod: uint32(rs.stod)}, rs.sid)
		rb.Mark(1, sec(at))
		rb.Redirect(packet.RedirEntry{Xrootd: true, Op: op, Port: 1094, User: c.sess.rdict[h], Host: target, Path: lfn})
		rb.Mark(1, sec(at))
		r.arena = rb.Finish()
		rs.pseqMain++
		r.tally[rs.idx].events[2]++
		r.emit(rs, domMain, r.arena[start:])
		at += delays[h]
	}
	return true
}

// pendRedir is a redirect in a redirector's r-stream buffer: its text is
// in the server's rtext.
type pendRedir struct {
	e          packet.RedirEntry // Host and Path unset
	host, path [2]int            // offsets in rtext
}

// maxRedirBuffer is the most redirects one r-stream packet carries here
// (well under XRootD's 64 KiB rbuff).
const maxRedirBuffer = 100

// bufferRedirect adds redirect e to redirector rs's r-stream buffer, sent
// at its tick once Config.RedirectWindow has passed (or when full); false
// when the run must stop. The buffer's timing mark is early enough for
// every redirect of it: no redirect precedes the open it leads to by more
// than the whole chain (at most 1.5 RedirectDelay per hop).
func (r *run) bufferRedirect(rs *server, e packet.RedirEntry) bool {
	if len(rs.redirs) >= maxRedirBuffer && !r.flushR(rs) {
		return false
	}
	if len(rs.redirs) == 0 {
		chain := int64(r.cfg.Redirectors)*r.cfg.RedirectDelay.Milliseconds()*3/2 + 1000
		rs.rStart, rs.rMarkMs = r.now, r.now-chain
	}
	p := pendRedir{e: e}
	p.e.Host, p.e.Path = nil, nil
	p.host[0] = len(rs.rtext)
	rs.rtext = append(rs.rtext, e.Host...)
	p.host[1] = len(rs.rtext)
	rs.rtext = append(rs.rtext, e.Path...)
	p.path = [2]int{p.host[1], len(rs.rtext)}
	rs.redirs = append(rs.redirs, p)
	return true
}

// flushR sends redirector s's buffered redirects as one r-stream packet:
// a timing mark at the window's start whose window covers up to now, the
// entries, the mark again; false when the run must stop.
func (r *run) flushR(s *server) bool {
	if len(s.redirs) == 0 {
		return true
	}
	if !r.room() {
		return false
	}
	mark := sec(s.rMarkMs)
	win := uint32((r.now-int64(mark)*1000)/1000 + 1)
	var rb packet.RedirBuilder
	start := len(r.arena)
	rb.Reset(r.arena, packet.Header{Pseq: s.pseqMain, Stod: uint32(s.stod)}, s.sid)
	rb.Mark(win, mark)
	for _, p := range s.redirs {
		e := p.e
		e.Host, e.Path = s.rtext[p.host[0]:p.host[1]], s.rtext[p.path[0]:p.path[1]]
		rb.Redirect(e)
	}
	rb.Mark(win, mark)
	r.arena = rb.Finish()
	s.pseqMain++
	r.tally[s.idx].events[2] += int64(len(s.redirs))
	s.redirs, s.rtext = s.redirs[:0], s.rtext[:0]
	r.emit(s, domMain, r.arena[start:])
	return true
}
