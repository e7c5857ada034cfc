package correlate

import (
	"encoding/json"
	"net/netip"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// Every redirect an r-stream reports becomes a redirect event (protocol
// §4.2): when, which server redirected, whom (the client's session, when
// known), for what operation, where to, and the path. A federation studies
// them for the redirection overhead and for where clients are sent.

// redirOps names the op modifiers of §4.2 (low nibble).
var redirOps = [16]string{
	"unknown", "chmod", "locate", "opendir", "openc", "openr", "openw", "mkdir",
	"mv", "prepare", "query", "rm", "rmdir", "stat", "trunc", "unknown",
}

// redirect is the data of a redirect event (docs/records.md §5.10).
type redirect struct {
	Op         string `json:"op"`
	DecidedBy  string `json:"decided_by"` // "xrootd" (0x90: a redirect rule) or "filesystem" (0x80: the file system or cmsd)
	TargetHost string `json:"target_host"`
	// Port is the entry's port: the target's for decided_by xrootd, but for
	// file-system redirects often the redirecting server's own (§4.2), so
	// PortIsTarget says which.
	Port         uint16 `json:"port"`
	PortIsTarget bool   `json:"port_is_target"`
	Path         string `json:"path"`
	UserDictID   uint32 `json:"user_dictid"`
	User         string `json:"user,omitempty"`
	ClientHost   string `json:"client_host,omitempty"`
	Protocol     string `json:"protocol,omitempty"`
	VO           string `json:"vo,omitempty"`
	// WindowS is the timing window the redirect fell in: it happened at
	// time, or up to this many seconds after.
	WindowS uint32 `json:"window_s"`
}

func (s *Shard) handleRedir(data []byte, addr netip.Addr) {
	r, err := packet.DecodeRedir(data)
	if err != nil {
		s.rejectDecoded(data, addr, err, DomainMain)
		return
	}
	inc := s.resolve(addr, r.Stod, r.SID, true)
	inc.heard[StreamRedir] = s.nowS
	s.accept(packet.KindRedir)
	if !s.observe(inc, DomainMain, uint16(r.Pseq)) {
		return
	}
	var mark int32
	var window uint32
	it := r.Entries()
	for i := 0; it.Next(); i++ {
		e := it.Entry()
		if e.Mark {
			mark, window = e.Time, e.Window
			continue
		}
		s.emitRedirect(inc, &r, i, mark, window, &e)
	}
}

func (s *Shard) emitRedirect(inc *incarnation, r *packet.Redir, i int, mark int32, window uint32, e *packet.RedirEntry) {
	d := redirect{
		Op:           redirOps[e.Op&0x0F],
		DecidedBy:    "filesystem",
		TargetHost:   text(e.Host),
		Port:         e.Port,
		PortIsTarget: e.Xrootd,
		Path:         text(s.capField(e.Path, maxPathBytes, FieldPath)),
		UserDictID:   e.User,
		WindowS:      window,
	}
	if e.Xrootd {
		d.DecidedBy = "xrootd"
	}
	if si, ok := s.sessIdx.get(dictKey(inc.id, e.User)); ok && e.User != 0 {
		ss := s.sess.at(si)
		d.User, d.ClientHost, d.Protocol = ss.user, ss.host, ss.prot
		if ss.login != nil {
			d.VO = ss.login.vo
		}
	}
	b, err := json.Marshal(&d)
	if err != nil {
		return
	}
	at := s.now.UTC()
	if mark != 0 {
		at = time.Unix(int64(mark), 0).UTC()
	}
	ev := s.appendEvent(inc, s.eventID(inc, 'r', r.Pseq, int64(mark), i, b),
		record.EventRedirect, "r", at)
	ev.Data, ev.Valid = b, true
	ev.Redirect = &record.RedirectLink{Op: d.Op, Path: d.Path, User: d.User, ClientHost: d.ClientHost, WindowS: int64(d.WindowS)}
}
