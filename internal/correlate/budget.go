package correlate

import (
	"unsafe"
)

// Memory is bounded in bytes, not only in entries: every text a packet
// carries is capped at what XRootD can send (longer ones are truncated and
// counted), and each table of the shard has a byte budget, a share of
// Config.MaxStateBytes. A table over its budget makes room the way its
// entry bound does: the least recently used open file is emitted as a
// partial record (evicted), the least recently used session is forgotten
// (disconnected ones first), the oldest pending reference is dropped
// (counted), an interning table or the login cache is reset. The sessions
// kept after their disconnect for late packets (Config.DisconnectGrace)
// have a budget of their own within the sessions': their number is the
// session churn times the grace (250,000 at 25,000 logins a second), and
// over it the oldest give up the rest of their grace (trimDisc). The byte
// counts are estimates of what the Go heap holds for an entry: the strings
// it owns (interned strings are counted once per table that holds them)
// plus a fixed overhead for the entry, its map slots and list links.
// docs/limits.md gives the figures.

// Field caps, in bytes. Longer texts are truncated to the cap and counted
// in Stats.Truncated. The caps are above anything XRootD sends: a path is
// at most MAXPATHLEN (4096) bytes (XrdXrootdMonitor copies the path of a
// d record and the LFN of an isOpen from the file name, limited by it);
// the userid text is `prot/user.pid:sid@host` with a host name of at most
// 255 bytes; the login information (`&p=...&n=...&h=...&o=...&r=...&g=...
// &m=...&I=...`) and token records carry a DN, groups and roles of a few
// hundred bytes, and appinfo is limited by the client to 1024 bytes.
const (
	maxPathBytes     = 4096
	maxUserIDBytes   = 512
	maxLoginBytes    = 8192
	maxAppInfoBytes  = 1024
	maxTokenBytes    = 8192
	maxIdentBytes    = 2048
	maxGStreamLine   = 65535 // a g-stream line is at most the datagram
	maxOtherMapBytes = 4096  // FRM p/x and U records
)

// Field names a truncation, the label of xrdmon_fields_truncated_total.
type Field uint8

// The capped fields.
const (
	FieldPath Field = iota
	FieldUserID
	FieldLogin
	FieldAppInfo
	FieldToken
	FieldIdent
	FieldOther
	NumFields
)

var fieldNames = [NumFields]string{"path", "userid", "login", "appinfo", "token", "ident", "other"}

// String returns the metric label of f.
func (f Field) String() string {
	if f < NumFields {
		return fieldNames[f]
	}
	return "invalid"
}

// capField returns b cut to max bytes, counting a cut in field f.
func (s *Shard) capField(b []byte, max int, f Field) []byte {
	if len(b) <= max {
		return b
	}
	s.stats.Truncated[f]++
	return b[:max]
}

// Fixed per-entry overheads, on top of the strings an entry owns: the
// entry (slab element), its map slots and the slices that index it.
var (
	fileOverhead    = int64(unsafe.Sizeof(fileEntry{})) + 48 // fileIdx slot, fileFree
	sessionOverhead = int64(unsafe.Sizeof(session{})) + 96   // sessIdx and byText slots
	pendingOverhead = int64(unsafe.Sizeof(pendingPath{})) + 64 + int64(unsafe.Sizeof(fifoEntry{}))
	loginOverhead   = int64(unsafe.Sizeof(loginInfo{})) + 64 + 16 // the struct, its cache slot, the session's pointer
)

// Budget shares of Config.MaxStateBytes, in percent.
const (
	shareFiles    = 40
	shareSessions = 25
	sharePending  = 15
	shareIntern   = 10 // each of the two interning tables: names, paths
	// shareDisc, of shareSessions, holds the disconnected sessions: 30 MiB
	// of the default budget, about 42,000 sessions of xrdmon bench's
	// (~760 bytes each), a grace of 10 s up to 4,200 logins a second and
	// of 1.7 s at 25,000: far longer than packets of a server are late.
	shareDisc = 3
)

// budget returns share percent of the state budget; the login cache has
// the names table's share again (it holds parsed copies of the same texts).
func (c Config) budget(share int64) int64 { return c.MaxStateBytes * share / 100 }

// setFilePath sets the path of file fi, keeping the byte count.
func (s *Shard) setFilePath(fi int32, p string) {
	f := s.files.at(fi)
	d := int64(len(p)) - int64(len(f.path))
	s.fileBytes += d
	if inc := s.incOf(f.inc); inc != nil {
		inc.fileBytes += d
	}
	f.path = p
}

// resizeSession recomputes the byte cost of session i after a change: its
// own texts, and the login and token details it points to (shared between
// sessions with the same payload, so counted conservatively, once each).
func (s *Shard) resizeSession(i int32) {
	ss := s.sess.at(i)
	c := sessionOverhead + textLen(ss) + int64(len(ss.appInfo)) + loginCost(ss.login) + tokenCost(ss.token)
	s.sessBytes += c - ss.cost
	if ss.disc {
		s.discBytes += c - ss.cost
	}
	if inc := s.incOf(ss.inc); inc != nil {
		inc.sessBytes += c - ss.cost
	}
	ss.cost = c
}

func loginCost(l *loginInfo) int64 {
	if l == nil {
		return 0
	}
	return loginOverhead + int64(len(l.authProt)+len(l.dn)+len(l.host)+len(l.vo)+len(l.role)+len(l.groups)+
		len(l.monInfo)+len(l.release)+len(l.app)+len(l.info))
}

func tokenCost(t *tokenInfo) int64 {
	if t == nil {
		return 0
	}
	return int64(unsafe.Sizeof(tokenInfo{})) + int64(len(t.subject)+len(t.name)+len(t.org)+len(t.role)+len(t.groups))
}

// resizeUser recomputes the byte cost of pending user attributes p.
func (s *Shard) resizeUser(p *pendingUser) {
	c := int64(unsafe.Sizeof(pendingUser{})) + 64 + int64(unsafe.Sizeof(fifoEntry{})) + tokenCost(p.token)
	s.pendBytes += c - p.cost
	p.cost = c
}

// putPendingPath sets pending path k, keeping the byte count.
func (s *Shard) putPendingPath(k uint64, p pendingPath) {
	if old, ok := s.paths.get(k); ok {
		s.pendBytes -= pendingOverhead + int64(len(old.path))
	}
	s.paths.put(k, p)
	s.pendBytes += pendingOverhead + int64(len(p.path))
}

// delPendingPath forgets pending path k, keeping the byte count.
func (s *Shard) delPendingPath(k uint64) {
	if old, ok := s.paths.get(k); ok {
		s.pendBytes -= pendingOverhead + int64(len(old.path))
		s.paths.del(k)
	}
}

// recount computes the byte counts from the tables (after a restore, and
// in tests, where it must equal the counts kept incrementally).
func (s *Shard) recount() (files, sessions, pending int64) {
	for fi := range s.fileIdx.values() {
		files += fileOverhead + int64(len(s.files.at(fi).path))
	}
	for i := range s.sessIdx.values() {
		ss := s.sess.at(i)
		sessions += sessionOverhead + textLen(ss) + int64(len(ss.appInfo)) + loginCost(ss.login) + tokenCost(ss.token)
	}
	for p := range s.paths.values() {
		pending += pendingOverhead + int64(len(p.path))
	}
	for p := range s.users.values() {
		pending += int64(unsafe.Sizeof(pendingUser{})) + 64 + int64(unsafe.Sizeof(fifoEntry{})) + tokenCost(p.token)
	}
	return files, sessions, pending
}

// recountBytes sets the byte counts and per-entry costs from the tables
// (after a restore).
func (s *Shard) recountBytes() {
	s.fileBytes, _, _ = s.recount()
	for _, inc := range s.incList {
		inc.fileBytes, inc.sessBytes = 0, 0
	}
	for fi := range s.fileIdx.values() {
		if inc := s.incOf(s.files.at(fi).inc); inc != nil {
			inc.fileBytes += fileOverhead + int64(len(s.files.at(fi).path))
		}
	}
	s.sessBytes, s.discBytes = 0, 0
	for i := range s.sessIdx.values() {
		s.sess.at(i).cost = 0
		s.resizeSession(i)
	}
	s.pendBytes = 0
	for p := range s.paths.values() {
		s.pendBytes += pendingOverhead + int64(len(p.path))
	}
	for p := range s.users.values() {
		p.cost = 0
		s.resizeUser(p)
	}
}

// heaviest returns the server incarnation holding the most bytes by
// size, nil when there is none. Budget evictions take entries from it, so
// that one sender flooding a table (many logins, long paths) loses its own
// entries, not those of the others. It scans the incarnations: it runs
// only when a table is over its budget.
func (s *Shard) heaviest(size func(*incarnation) int64) *incarnation {
	var h *incarnation
	for _, inc := range s.incList {
		if h == nil || size(inc) > size(h) {
			h = inc
		}
	}
	return h
}

func incFileBytes(inc *incarnation) int64 { return inc.fileBytes }
func incSessBytes(inc *incarnation) int64 { return inc.sessBytes }
