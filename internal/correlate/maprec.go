package correlate

import (
	"bytes"
	"net/netip"
	"unsafe"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

func (s *Shard) handleMap(data []byte, addr netip.Addr) {
	m, err := packet.DecodeMap(data)
	if err != nil {
		d := DomainMain
		if len(data) > 0 && (data[0] == packet.CodePurge || data[0] == packet.CodeXfer) {
			d = DomainFRM
		}
		s.rejectDecoded(data, addr, err, d)
		return
	}
	uid, payload := m.Split()
	uid = s.capField(uid, maxUserIDBytes, FieldUserID)
	switch m.Code {
	case packet.CodePath:
		payload = s.capField(payload, maxPathBytes, FieldPath)
	case packet.CodeUser:
		payload = s.capField(payload, maxLoginBytes, FieldLogin)
	case packet.CodeInfo:
		payload = s.capField(payload, maxAppInfoBytes, FieldAppInfo)
	case packet.CodeToken:
		payload = s.capField(payload, maxTokenBytes, FieldToken)
	case packet.CodeIdent:
		payload = s.capField(payload, maxIdentBytes, FieldIdent)
	default:
		payload = s.capField(payload, maxOtherMapBytes, FieldOther)
	}
	sid, ok := sidFromUserID(uid)
	inc := s.resolve(addr, m.Stod, sid, ok)
	inc.heard[StreamMap] = s.nowS
	d := DomainMain
	switch m.Code {
	case packet.CodePurge, packet.CodeXfer:
		d, inc.frm = DomainFRM, true
	case packet.CodeIdent:
		if !bytes.HasPrefix(uid, []byte("=/")) { // FRM daemons send no "=/" (§2.2)
			d, inc.frm = DomainFRM, true
		}
	}
	// Parse before the sequence check so a bad record is rejected, not
	// half-applied; its sequence number still counts as received.
	var (
		ident packet.ServerIdent
		tok   packet.Token
		ueac  packet.UEAC
		purge packet.Purge
		xfer  packet.FRMXfer
	)
	switch m.Code {
	case packet.CodeIdent:
		ident, err = packet.ParseServerIdent(payload)
	case packet.CodeToken:
		tok, err = packet.ParseToken(payload)
	case packet.CodeUEAC:
		ueac, err = packet.ParseUEAC(payload)
	case packet.CodePurge:
		purge, err = packet.ParsePurge(payload)
	case packet.CodeXfer:
		xfer, err = packet.ParseFRMXfer(payload)
	}
	apply := s.observe(inc, d, uint16(m.Pseq))
	if err != nil {
		s.rejectDecoded(nil, addr, err, d) // counts only; sequence done above
		return
	}
	s.accept(packet.KindMap)
	if !apply {
		return
	}
	switch m.Code {
	case packet.CodeIdent:
		inc.site = s.names.bytes(ident.Site)
		inc.inst = s.names.bytes(ident.Inst)
		inc.pgm = s.names.bytes(ident.Program)
		inc.ver = s.names.bytes(ident.Version)
		if at := bytes.LastIndexByte(uid, '@'); at >= 0 {
			inc.host = s.names.bytes(uid[at+1:])
		}
	case packet.CodeUser:
		s.login(inc, m.DictID, uid, payload)
	case packet.CodePath:
		s.path(inc, m.DictID, uid, payload)
	case packet.CodeInfo:
		if i, ok := s.sessionOfText(inc, uid); ok {
			s.sess.at(i).appInfo = s.names.bytes(payload)
			s.resizeSession(i)
			s.touchSession(i)
		}
	case packet.CodeToken:
		t := s.tokenInfo(tok)
		if i, ok := s.sessIdx.get(dictKey(inc.id, tok.UserDictID)); ok {
			s.sess.at(i).token = t
			s.resizeSession(i)
			s.touchSession(i)
		} else {
			p := s.pendUser(inc, tok.UserDictID)
			p.token = t
			s.resizeUser(p)
		}
	case packet.CodeUEAC:
		if i, ok := s.sessIdx.get(dictKey(inc.id, ueac.UserDictID)); ok {
			ss := s.sess.at(i)
			ss.exp, ss.act, ss.hasUEAC = ueac.Experiment, ueac.Activity, true
			s.touchSession(i)
		} else {
			p := s.pendUser(inc, ueac.UserDictID)
			p.exp, p.act, p.hasUEAC = ueac.Experiment, ueac.Activity, true
		}
	case packet.CodePurge:
		s.stats.FRMRecords++
		s.emitFRM(inc, m, purge.Tod, record.EventFRMPurge, payload, frmPurgeData(&purge))
	case packet.CodeXfer:
		s.stats.FRMRecords++
		s.emitFRM(inc, m, xfer.Tod, record.EventFRMTransfer, payload, frmXferData(&xfer))
	}
}

func (s *Shard) pendUser(inc *incarnation, dictID uint32) *pendingUser {
	k := dictKey(inc.id, dictID)
	p, _ := s.users.get(k)
	if p == nil {
		s.boundPending()
		p = &pendingUser{at: s.nowS}
		s.users.put(k, p)
		s.resizeUser(p)
		s.pushPending(k, pendUser)
	}
	return p
}

// boundPending makes room for one more pending reference.
func (s *Shard) boundPending() {
	for (s.paths.len()+s.users.len() >= s.cfg.MaxPending || s.pendBytes >= s.cfg.budget(sharePending)) && s.pending.len() > 0 {
		s.expirePending()
	}
}

// pushPending queues pending reference k (of kind pendPath or pendUser,
// just set at nowS) for expiry.
//
// A reference resolved (or replaced) before it expires leaves a stale entry
// behind, skipped when popped. Most references are resolved within
// milliseconds (a d record by its open), so without care the queue would
// hold every reference of the last PendingTTL (300 s: millions at a high
// rate), grow without the MaxPending bound, and be written into every
// checkpoint. So it is compacted whenever it has doubled since the last
// compaction, which costs at most two map look-ups per push (amortised).
func (s *Shard) pushPending(k uint64, kind uint8) {
	if n := s.pending.len(); n >= minCompact && n >= s.pending.compactAt {
		s.compactPending()
	}
	s.pending.push(fifoEntry{key: k, at: s.nowS, kind: kind})
}

// compactPending drops the stale entries of the expiry queue, those for
// which expirePending would do nothing, keeping the order of the others,
// and sets the next compaction at twice the length kept: each compaction
// then scans at most twice as many entries as were pushed since the last.
func (s *Shard) compactPending() {
	f := &s.pending
	q := f.q[:0]
	for _, e := range f.q[f.head:] {
		var live bool
		switch e.kind {
		case pendPath:
			p, ok := s.paths.get(e.key)
			live = ok && p.at == e.at
		case pendUser:
			p, ok := s.users.get(e.key)
			live = ok && p.at == e.at
		}
		if live {
			q = append(q, e)
		}
	}
	f.q, f.head = q, 0
	f.compactAt = max(2*len(q), minCompact)
}

// expirePending pops the oldest pending reference; a still-unresolved one
// is dropped and counted.
func (s *Shard) expirePending() {
	e := s.pending.front()
	switch e.kind {
	case pendPath:
		if p, ok := s.paths.get(e.key); ok && p.at == e.at {
			s.delPendingPath(e.key)
			s.stats.PendingDropped++
		}
	case pendUser:
		if p, ok := s.users.get(e.key); ok && p.at == e.at {
			s.pendBytes -= p.cost
			s.users.del(e.key)
			s.stats.PendingDropped++
		}
	}
	s.pending.pop()
}

// login applies a u record: a session keyed by (incarnation, dictid).
func (s *Shard) login(inc *incarnation, dictID uint32, uid, payload []byte) {
	k := dictKey(inc.id, dictID)
	i, ok := s.sessIdx.get(k)
	if !ok {
		i = s.newSession(inc, dictID)
		s.sessIdx.put(k, i)
	} else {
		s.touchSession(i)
	}
	ss := s.sess.at(i)
	u := packet.ParseUserID(uid, true)
	ss.prot = s.names.bytes(u.Prot)
	ss.user = s.names.bytes(u.User)
	ss.host = s.names.bytes(u.Host)
	unindexText(inc, ss, i)
	s.setText(ss, uid, u)
	defer s.resizeSession(i)
	inc.byText.put(ss.textKey, i) // the latest session with this text wins
	ss.login = s.loginInfo(payload)
	if p, _ := s.users.get(k); p != nil {
		if p.token != nil {
			ss.token = p.token
		}
		if p.hasUEAC {
			ss.exp, ss.act, ss.hasUEAC = p.exp, p.act, true
		}
		s.pendBytes -= p.cost
		s.users.del(k)
	}
}

func (s *Shard) loginInfo(payload []byte) *loginInfo {
	h := s.logins.hash(payload)
	if li := s.logins.get(h); li != nil {
		return li
	}
	l := packet.ParseLogin(payload)
	if len(s.loginSlab) == cap(s.loginSlab) {
		s.loginSlab = make([]loginInfo, 0, 64)
	}
	s.loginSlab = s.loginSlab[:len(s.loginSlab)+1]
	li := &s.loginSlab[len(s.loginSlab)-1]
	*li = loginInfo{
		authProt: s.names.bytes(l.AuthProt),
		dn:       s.names.bytes(l.Name),
		host:     s.names.bytes(l.Host),
		vo:       s.names.bytes(l.Org),
		role:     s.names.bytes(l.Role),
		groups:   s.names.bytes(l.Groups),
		monInfo:  s.names.bytes(l.MonInfo),
		release:  s.names.bytes(l.Release),
		app:      s.names.bytes(l.App),
		info:     s.names.bytes(l.Info),
		ipv6:     l.IPv == 6,
	}
	s.logins.put(h, li)
	return li
}

// tokenInfo returns the shared form of a token's fields: a user's
// sessions carry the same token, and its form is made once.
func (s *Shard) tokenInfo(tok packet.Token) *tokenInfo {
	f := [...]string{view(tok.Subject), view(tok.Name), view(tok.Org), view(tok.Role), view(tok.Groups)}
	if t := s.tokens[f]; t != nil {
		return t
	}
	return s.shareToken(&tokenInfo{
		subject: s.names.bytes(tok.Subject),
		name:    s.names.bytes(tok.Name),
		org:     s.names.bytes(tok.Org),
		role:    s.names.bytes(tok.Role),
		groups:  s.names.bytes(tok.Groups),
	})
}

// shareToken returns the shared token with t's fields, or shares t. The
// tokens shared are a map, not a cache that forgets by hash, so that a
// restored shard shares them as the shard it was taken of did (its
// checkpoint is the same bytes); it is emptied when it holds maxTokens
// or would pass an eighth of the interning budget in bytes (the sessions
// keep theirs).
func (s *Shard) shareToken(t *tokenInfo) *tokenInfo {
	f := [...]string{t.subject, t.name, t.org, t.role, t.groups}
	if c := s.tokens[f]; c != nil {
		return c
	}
	cost := tokenCost(t) + tokenSlot
	if len(s.tokens) >= maxTokens || s.tokenBytes+cost > s.cfg.budget(shareIntern)/8 {
		clear(s.tokens)
		s.tokenBytes = 0
	}
	s.tokens[f] = t
	s.tokenBytes += cost
	return t
}

// maxTokens bounds the shared tokens; tokenSlot is a map slot's bytes.
const (
	maxTokens = 1 << 12
	tokenSlot = int64(unsafe.Sizeof([5]string{})) + 16
)

// view is b as a string for a lookup, not to be kept: it shares b's bytes.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func (s *Shard) newSession(inc *incarnation, dictID uint32) int32 {
	// Disconnected sessions (kept only for late packets) go first, then
	// the least recently used active one.
	for s.sessIdx.len() >= s.cfg.MaxSessions {
		i := s.sessDisc.head
		if i < 0 {
			i = s.sessLRU.head
		}
		if i < 0 {
			break
		}
		s.evictSession(i)
	}
	// Over the byte budget, the server holding the most session bytes
	// gives up its least recently used session.
	for s.sessBytes >= s.cfg.budget(shareSessions) {
		h := s.heaviest(incSessBytes)
		if h == nil || h.sessions.head < 0 {
			break
		}
		s.evictSession(h.sessions.head)
	}
	for inc.sessions.n >= int32(s.cfg.MaxSessionsPerServer) {
		s.evictSession(inc.sessions.head)
	}
	i := s.sess.alloc()
	*s.sess.at(i) = session{inc: inc.id, dictID: dictID, seen: s.nowS, files: newList()}
	s.resizeSession(i)
	lpush(&s.sess, &s.sessLRU, sessLRU, i)
	lpush(&s.sess, &inc.sessions, sessInc, i)
	return i
}

func (s *Shard) evictSession(i int32) {
	s.stats.EvictedSess++
	s.removeSession(i)
}

func (s *Shard) touchSession(i int32) {
	ss := s.sess.at(i)
	ss.seen = s.nowS
	if !ss.disc {
		ltouch(&s.sess, &s.sessLRU, sessLRU, i)
	}
	inc := s.incOf(ss.inc)
	ltouch(&s.sess, &inc.sessions, sessInc, i)
}

// removeSession forgets a session; its files stay open without user fields.
func (s *Shard) removeSession(i int32) {
	ss := s.sess.at(i)
	for ss.files.head >= 0 {
		f := ss.files.head
		lremove(&s.files, &ss.files, fileSess, f)
		s.files.at(f).sess = -1
	}
	if ss.disc {
		s.discBytes -= ss.cost
		lremove(&s.sess, &s.sessDisc, sessLRU, i)
	} else {
		lremove(&s.sess, &s.sessLRU, sessLRU, i)
	}
	if inc := s.incOf(ss.inc); inc != nil {
		inc.sessBytes -= ss.cost
		lremove(&s.sess, &inc.sessions, sessInc, i)
		unindexText(inc, ss, i)
	}
	s.sessIdx.del(dictKey(ss.inc, ss.dictID))
	s.sessBytes -= ss.cost
	*ss = session{}
	s.sess.release(i)
}

// path applies a d record: the path of file dictid. The file may already
// be open (an isOpen without LFN); otherwise the path waits PendingTTL for
// the open. The userid text links the file to the latest session with
// that text, for opens that carry no user dictid.
func (s *Shard) path(inc *incarnation, dictID uint32, uid, payload []byte) {
	k := dictKey(inc.id, dictID)
	var user uint32
	sess := int32(-1)
	if i, ok := s.sessionOfText(inc, uid); ok {
		user, sess = s.sess.at(i).dictID, i
	}
	if fi, ok := s.fileIdx.get(k); ok {
		f := s.files.at(fi)
		if f.path == "" {
			s.setFilePath(fi, s.pathsI.bytes(payload))
		}
		if f.user == 0 && user != 0 {
			f.user = user
			s.linkSession(fi, inc, sess)
		}
		return
	}
	if s.paths.len()+s.users.len() >= s.cfg.MaxPending || s.pendBytes >= s.cfg.budget(sharePending) { // boundPending has work only then
		if !s.paths.has(k) {
			s.boundPending()
		}
	}
	s.putPendingPath(k, pendingPath{path: s.pathsI.bytes(payload), user: user, sess: sess, at: s.nowS})
	s.pushPending(k, pendPath)
}
