package loadgen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

// Packet counter domains (protocol reference §7.4), the keys of
// ServerTruth.Packets and ServerTruth.Dropped.
const (
	DomainMain   = "main"    // = u d i T U: the main pseq counter
	DomainF      = "f"       // f-stream
	DomainGCache = "g:C"     // g-stream provider C (XCache file_close)
	DomainGTPC   = "g:P"     // g-stream provider P (TPC)
	DomainSum    = "summary" // xrd.report summaries (not sequenced)
	nDomains     = 5         //
	domMain      = 0         //
	domF         = 1         //
	domGC        = 2         //
	domGP        = 3         //
	domSum       = 4         //
	domainNone   = nDomains  // not a packet domain
)

var domainNames = [nDomains]string{DomainMain, DomainF, DomainGCache, DomainGTPC, DomainSum}

// Truth is what a run generated and what a correlator that saw every packet
// must produce from it. Records are expressed as record.Record, filled the
// way the correlator fills them; fields the generator cannot know (Received,
// RecordID, ClientName) are left empty, and Start and End are the simulated
// times of the open and of the close (or of the last isXfr sent, for a
// partial): a correlator only sees f-stream windows, so compare them with a
// tolerance of one FStat interval.
//
// The records follow from the generated packets, before impairments; when
// Lossless is false, the correlator's output may legitimately differ (a
// lost close gives a partial record) and Dropped says by how much.
type Truth struct {
	Config   Config    `json:"config"`
	Start    time.Time `json:"start"` // simulated start
	End      time.Time `json:"end"`   // simulated time of the last packet
	Lossless bool      `json:"lossless"`

	Generated  int64 `json:"generated"`  // packets the servers sent
	Emitted    int64 `json:"emitted"`    // packets handed to the output (after loss and duplication)
	Dropped    int64 `json:"dropped"`    // packets removed by injected loss
	Duplicated int64 `json:"duplicated"` // extra copies sent
	Reordered  int64 `json:"reordered"`  // packets swapped with the server's next one
	Bytes      int64 `json:"bytes"`      // datagram bytes generated

	Sessions int64 `json:"sessions"`
	// Reasons counts the expected records by reason ("complete" for "").
	Reasons map[string]int64 `json:"reasons"`
	// Events counts g-stream events (lines) by provider, and redirect
	// events ("r", with Config.Redirectors).
	Events map[string]int64 `json:"events"`

	Servers []ServerTruth `json:"servers"`
	Users   []UserTruth   `json:"users"`
	// Records are the expected records, in the order their last packet was
	// generated; nil unless Config.KeepRecords.
	Records []record.Record `json:"records,omitempty"`
}

// Bytes is a byte tally of records.
type Bytes struct {
	Records    int64 `json:"records"`
	ReadBytes  int64 `json:"read_bytes"`
	ReadvBytes int64 `json:"readv_bytes"`
	WriteBytes int64 `json:"write_bytes"`
}

func (b *Bytes) add(r *record.Record) {
	b.Records++
	b.ReadBytes += r.ReadBytes
	b.ReadvBytes += r.ReadvBytes
	b.WriteBytes += r.WriteBytes
}

// ServerTruth is one simulated server.
type ServerTruth struct {
	Index  int     `json:"index"`
	IP     string  `json:"ip"`
	Sender string  `json:"sender"` // ip:port
	Host   string  `json:"host"`
	SID    uint64  `json:"sid"`
	Stods  []int64 `json:"stods"` // one per process lifetime (restarts add one)
	Cache  bool    `json:"cache"` // an XCache: emits C events
	// Redirector is a redirector (Config.Redirectors): it sends logins and
	// r-stream redirects, no transfers.
	Redirector bool `json:"redirector,omitempty"`
	// Packets counts generated packets by domain; Dropped those removed
	// by injected loss.
	Packets map[string]int64 `json:"packets"`
	Dropped map[string]int64 `json:"dropped"`
	Events  map[string]int64 `json:"events"`
	Bytes
	// Summary is, with Config.SummaryInterval, what the server's summaries
	// say: their count, and the increase of each counter between the first
	// and the last, summed over the server's lifetimes.
	Summary *SummaryTruth `json:"summary,omitempty"`
}

// SummaryTruth is what a server's summaries must add up to.
type SummaryTruth struct {
	Reports  int              `json:"reports"`
	Increase map[string]int64 `json:"increase"` // link.in, link.out, xrootd.ops.open, xrootd.err
}

// UserTruth is the byte tally of one user name (Record.User).
type UserTruth struct {
	User string `json:"user"`
	Bytes
}

// WriteJSON writes the truth as one indented JSON document.
func (t *Truth) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	enc.SetIndent("", " ")
	if err := enc.Encode(t); err != nil {
		return fmt.Errorf("encode truth: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write truth: %w", err)
	}
	return nil
}

// WriteFile writes the truth as JSON to path.
func (t *Truth) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create truth file: %w", err)
	}
	if err := t.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close truth file: %w", err)
	}
	return nil
}

// ReadTruth reads a truth written by WriteJSON.
func ReadTruth(r io.Reader) (*Truth, error) {
	var t Truth
	if err := json.NewDecoder(bufio.NewReader(r)).Decode(&t); err != nil {
		return nil, fmt.Errorf("decode truth: %w", err)
	}
	return &t, nil
}

// Totals sums the byte tallies of every server.
func (t *Truth) Totals() Bytes {
	var b Bytes
	for i := range t.Servers {
		s := &t.Servers[i].Bytes
		b.Records += s.Records
		b.ReadBytes += s.ReadBytes
		b.ReadvBytes += s.ReadvBytes
		b.WriteBytes += s.WriteBytes
	}
	return b
}

// reasonName is the key of Truth.Reasons.
func reasonName(r record.Reason) string {
	if r == record.Complete {
		return "complete"
	}
	return string(r)
}

// What a run expects. The simulation and emission tally what was sent; an
// access's expected record is final (finalize) once the packet with its
// close is in a batch, or when the run ends with it open; settle turns the
// tallies into the Truth.

// serverTally is the per-server part of the truth kept while running.
type serverTally struct {
	packets [nDomains]int64
	dropped [nDomains]int64
	events  [3]int64 // C, P, r (redirects)
	stods   []int64
	bytes   Bytes
	summary *SummaryTruth
}

// settle fills the Truth from the tallies.
func (r *run) settle() {
	t := r.truth
	if r.lastMs > 0 {
		t.End = time.UnixMilli(r.lastMs).UTC()
	}
	t.Sessions = r.sessions
	t.Reasons = make(map[string]int64)
	for k, v := range r.reasons {
		t.Reasons[reasonName(k)] = v
	}
	t.Events = map[string]int64{"C": 0, "P": 0}
	if r.cfg.Redirectors > 0 {
		t.Events["r"] = 0
	}
	for i := range r.servers {
		s, tl := &r.servers[i], &r.tally[i]
		st := ServerTruth{
			Index: i, IP: s.ip, Sender: s.addr.String(), Host: s.host.s, SID: s.sid, Redirector: s.redir,
			Stods: tl.stods, Cache: s.cache, Bytes: tl.bytes,
			Packets: make(map[string]int64), Dropped: make(map[string]int64),
			Events:  map[string]int64{"C": tl.events[0], "P": tl.events[1]},
			Summary: tl.summary,
		}
		for d := range nDomains {
			st.Packets[domainNames[d]] = tl.packets[d]
			st.Dropped[domainNames[d]] = tl.dropped[d]
		}
		t.Events["C"] += tl.events[0]
		t.Events["P"] += tl.events[1]
		if s.redir {
			st.Events = map[string]int64{"r": tl.events[2]}
			t.Events["r"] += tl.events[2]
		}
		t.Servers = append(t.Servers, st)
	}
	for i, b := range r.users {
		if b.Records > 0 {
			t.Users = append(t.Users, UserTruth{User: r.g.users[i].name.s, Bytes: b})
		}
	}
	slices.SortFunc(t.Users, func(a, b UserTruth) int {
		switch {
		case a.User < b.User:
			return -1
		case a.User > b.User:
			return 1
		}
		return 0
	})
}

// finalizeOpen, at the end of the run, expects the files whose open was
// sent and whose close was not as end_of_input.
func (r *run) finalizeOpen() {
	for i := range r.accs {
		switch r.accs[i].state {
		case accSent:
			r.finalize(int32(i), record.EndOfInput)
		case accPending:
			r.freeAccess(int32(i))
		}
	}
}

// finalize records the expected record of an access and frees it.
func (r *run) finalize(ai int32, reason record.Reason) {
	a := &r.accs[ai]
	s := &r.servers[a.srv]
	rec := record.Record{Reason: reason}
	end := a.closedAt
	if reason == record.Complete {
		rec.ReadBytes, rec.ReadvBytes, rec.WriteBytes = a.fr, a.fv, a.fw
		rec.Forced = a.forced
		ops, ssq := a.stats(a.fr, a.fv, a.fw)
		rec.HasOps, rec.HasSSQ = true, true
		rec.ReadOps, rec.ReadvOps, rec.WriteOps = ops.Read, ops.Readv, ops.Write
		rec.ReadvSegs, rec.ReadvSegsMin, rec.ReadvSegsMax = ops.Rsegs, ops.RsMin, ops.RsMax
		rec.ReadMin, rec.ReadMax, rec.ReadvMin, rec.ReadvMax = ops.RdMin, ops.RdMax, ops.RvMin, ops.RvMax
		rec.WriteMin, rec.WriteMax = ops.WrMin, ops.WrMax
		rec.ReadSqSum, rec.ReadvSqSum, rec.ReadvSegSqSum, rec.WriteSqSum = ssq.Read, ssq.Readv, ssq.ReadvSegs, ssq.Write
		if r.cfg.Trace != "" {
			rec.HasIO = true
			if a.io != (record.IOProfile{}) {
				p := a.io
				rec.IO = &p
			}
		}
		if a.hops > 0 {
			// The open happened at a.start; what a collector can know of
			// it is bounded by the f-stream packet's span, so the truth
			// is the exact delay in both fields (see Truth).
			rec.RedirectHops = a.hops
			rec.RedirectDelayMS, rec.RedirectDelayMaxMS = a.start-a.rfirst, a.start-a.rfirst
		}
	} else {
		rec.ReadBytes, rec.ReadvBytes, rec.WriteBytes = a.xr, a.xv, a.xw
		end = max(a.xAt, a.start)
	}
	r.reasons[reason]++
	r.tally[a.srv].bytes.add(&rec)
	r.users[a.sess.user].add(&rec)
	if hook := r.g.hooks.Record; r.cfg.KeepRecords || hook != nil {
		r.fillRecord(&rec, s, a, end)
		if hook != nil {
			// Through a copy owned by the run: passing &rec itself would
			// make every record escape to the heap, hook or not.
			r.hookRec = rec
			hook(r.final, &r.hookRec)
		}
		if r.cfg.KeepRecords {
			r.truth.Records = append(r.truth.Records, rec)
		}
	}
	r.final++
	r.freeAccess(ai)
}

func (r *run) fillRecord(rec *record.Record, s *server, a *access, end int64) {
	u := &r.g.users[a.sess.user]
	ss := &a.sess
	rec.Start = time.UnixMilli(a.start).UTC()
	rec.End = time.UnixMilli(end).UTC()
	rec.ServerIP, rec.ServerHost, rec.ServerID, rec.ServerStod = s.ip, s.host.s, s.sid, a.stod
	rec.Site, rec.Instance, rec.Program, rec.Version = s.site.s, "anon", "xrootd", "v5.7.1"
	rec.Protocol, rec.User, rec.UserDictID = "xroot", u.name.s, ss.dict
	rec.ClientHost, rec.IPv6 = r.hostOf(ss).name.s, ss.ipv6
	rec.AuthProtocol, rec.DN, rec.MonInfo = "gsi", u.dn.s, u.dn.s
	if ss.token {
		rec.AuthProtocol, rec.MonInfo = "ztn", ""
		rec.TokenSubject, rec.TokenUser, rec.TokenOrg, rec.TokenRole, rec.TokenGroups = u.subject.s, u.tokenUser.s, u.tokenOrg.s, u.role.s, u.groups.s
	}
	rec.VO, rec.Role, rec.Groups = u.vo.s, u.role.s, u.groups.s
	rec.ClientRelease, rec.AppName = "v5.7.1", r.g.apps[ss.app].s
	if ss.hasInfo {
		rec.AppInfo = r.g.infos[ss.info].s
	}
	if ss.ueac {
		rec.Experiment, rec.Activity = ss.exp, ss.act
	}
	rec.FileID, rec.FileSize, rec.ReadWrite = a.fileID, a.size, a.rw
	if a.rw {
		rec.Path = r.g.writePaths[a.path].p.s
	} else {
		rec.Path = r.g.readPaths[a.path].p.s
	}
}
