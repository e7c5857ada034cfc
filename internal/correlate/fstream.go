package correlate

import (
	"net/netip"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

func (s *Shard) handleF(data []byte, addr netip.Addr) {
	fs, err := packet.DecodeFStream(data)
	if err != nil {
		s.rejectDecoded(data, addr, err, DomainF)
		return
	}
	inc := s.resolve(addr, fs.Stod, fs.SID, fs.HasSID)
	inc.heard[StreamF] = s.nowS
	s.accept(packet.KindFStream)
	if !s.observe(inc, DomainF, uint16(fs.Pseq)) {
		return
	}
	// (LFNs are capped in open.)
	tBeg, tEnd := uint32(fs.TBeg), uint32(fs.TEnd)
	it := fs.Records()
	for it.Next() {
		r := it.Rec()
		switch r.Type {
		case packet.RecOpen:
			s.open(inc, r.Open(), tBeg, tEnd)
		case packet.RecXfr:
			s.xfr(inc, r.Xfr(), tBeg, tEnd)
		case packet.RecClose:
			c := r.Close()
			s.close(inc, &c, tBeg, tEnd)
		case packet.RecDisc:
			s.disc(inc, r.ID, tEnd)
		}
	}
}

// newFile allocates a file entry for (inc, fileID), making room under the
// bounds first.
func (s *Shard) newFile(inc *incarnation, fileID uint32, tBeg, tEnd uint32) int32 {
	for s.fileIdx.len() >= s.cfg.MaxOpenFiles {
		if s.lru.head >= 0 {
			s.evict(&s.lru, fileLRU)
		} else {
			i := s.pendFiles.head
			s.finishFile(i, s.files.at(i).pend, s.files.at(i).tLast, nil)
		}
	}
	for s.fileBytes >= s.cfg.budget(shareFiles) {
		h := s.heaviest(incFileBytes)
		if h == nil || h.files.head < 0 {
			break
		}
		s.evict(&h.files, fileInc)
	}
	for inc.files.n >= int32(s.cfg.MaxOpenFilesPerServer) {
		s.evict(&inc.files, fileInc)
	}
	i := s.files.alloc()
	*s.files.at(i) = fileEntry{
		inc: inc.id, fileID: fileID, sess: -1,
		tOpen: tBeg, tLast: tEnd, seen: uint32(s.nowS), queued: uint32(s.nowS),
	}
	s.fileIdx.put(dictKey(inc.id, fileID), i)
	s.fileBytes += fileOverhead
	inc.fileBytes += fileOverhead
	lpush(&s.files, &s.lru, fileLRU, i)
	lpush(&s.files, &inc.files, fileInc, i)
	return i
}

// linkSession links file fi to the session of its user dictid, if known.
// hint is a slab index where that session may be (-1: no idea); it is
// used, saving a look-up, only if it holds that session.
func (s *Shard) linkSession(fi int32, inc *incarnation, hint int32) {
	f := s.files.at(fi)
	if f.sess >= 0 || f.user == 0 {
		return
	}
	si := hint
	if si < 0 || int(si) >= s.sess.len() || s.sess.at(si).inc != inc.id || s.sess.at(si).dictID != f.user {
		var ok bool
		if si, ok = s.sessIdx.get(dictKey(inc.id, f.user)); !ok {
			return
		}
	}
	f.sess = si
	lpush(&s.files, &s.sess.at(si).files, fileSess, fi)
}

// touchFile records news of a file. The LRU lists are not reordered here
// (that would touch two more entries per record, cache misses with many
// open files); a list is kept in the order files were queued, and an entry
// whose seen is later than its queued time gets a second chance (it is
// queued again) when it reaches the head: see requeue.
func (s *Shard) touchFile(fi int32, tEnd uint32) {
	f := s.files.at(fi)
	f.tLast = tEnd
	f.seen = uint32(s.nowS)
}

// requeue moves file fi to the tail of its LRU lists, as of its last news.
func (s *Shard) requeue(fi int32) {
	f := s.files.at(fi)
	f.queued = f.seen
	if f.flags&fPending == 0 {
		ltouch(&s.files, &s.lru, fileLRU, fi)
	}
	ltouch(&s.files, &s.incOf(f.inc).files, fileInc, fi)
}

// evict emits the least recently used file of list l (k: which list) as
// evicted, giving a bounded number of second chances to files with news
// since they were queued.
func (s *Shard) evict(l *list, k int) {
	for tries := 0; ; tries++ {
		i := l.head
		f := s.files.at(i)
		if tries < 8 && f.seen != f.queued && f.flags&fPending == 0 {
			s.requeue(i)
			continue
		}
		s.finishFile(i, rEvicted, f.tLast, nil)
		return
	}
}

func (s *Shard) open(inc *incarnation, o packet.FileOpen, tBeg, tEnd uint32) {
	k := dictKey(inc.id, o.FileID)
	fi, ok := s.fileIdx.get(k)
	if ok && s.files.at(fi).flags&fOpen != 0 {
		// A second open of a file id we hold open: the first access's close
		// was never seen. Emit what we know of it, start afresh.
		s.finishFile(fi, rEvicted, s.files.at(fi).tLast, nil)
		ok = false
	}
	if !ok {
		fi = s.newFile(inc, o.FileID, tBeg, tEnd)
	}
	f := s.files.at(fi)
	f.flags |= fOpen
	f.tOpen = tBeg
	f.size = o.FileSize
	if o.RW {
		f.flags |= fRW
	}
	p, pending := s.paths.get(k)
	hint := int32(-1)
	if o.HasLFN {
		// The d record that usually precedes an open with LFN carried the
		// same path: reuse its string rather than intern the LFN again.
		lfn := s.capField(o.LFN, maxPathBytes, FieldPath)
		if pending && p.path == string(lfn) {
			s.setFilePath(fi, p.path)
		} else {
			s.setFilePath(fi, s.pathsI.bytes(lfn))
		}
		f.user = o.User
	}
	if pending {
		if f.path == "" {
			s.setFilePath(fi, p.path)
		}
		if f.user == 0 {
			f.user = p.user
		}
		hint = p.sess
		s.delPendingPath(k)
	}
	s.linkSession(fi, inc, hint)
	if s.cfg.ReportOpens {
		s.reportOpen(f, inc, tEnd)
	}
	if f.flags&fClosed != 0 { // its close came first: complete now
		cd := s.closes[fi]
		if s.holdForTrace(fi, inc, &cd.c, cd.tEnd) {
			return
		}
		s.finishFile(fi, rComplete, cd.tEnd, &cd.c)
		return
	}
	s.touchFile(fi, tEnd)
}

func (s *Shard) xfr(inc *incarnation, x packet.FileXfr, tBeg, tEnd uint32) {
	fi, ok := s.fileIdx.get(dictKey(inc.id, x.FileID))
	if !ok { // its open was lost: keep what we learn, the close will say no_open
		fi = s.newFile(inc, x.FileID, tBeg, tEnd)
	}
	f := s.files.at(fi)
	if f.flags&fClosed != 0 {
		return // a late xfr of a file whose close is waiting for its open
	}
	f.read, f.readv, f.wrt = x.Read, x.Readv, x.Write
	f.flags |= fXfr
	s.progress(f, inc, tEnd)
	s.touchFile(fi, tEnd)
}

func (s *Shard) close(inc *incarnation, c *packet.FileClose, tBeg, tEnd uint32) {
	fi, ok := s.fileIdx.get(dictKey(inc.id, c.FileID))
	if ok && s.files.at(fi).flags&(fClosed|fOpen) == fOpen {
		if !s.holdForTrace(fi, inc, c, tEnd) {
			s.finishFile(fi, rComplete, tEnd, c)
		}
		return
	}
	if ok && s.files.at(fi).flags&fClosed != 0 { // a second close for a waiting one: emit the first
		cd := s.closes[fi]
		s.finishFile(fi, rNoOpen, cd.tEnd, &cd.c)
		ok = false
	}
	// The open may still come (reordered packets: only isXfr updates, or
	// nothing, seen so far): wait PendingTTL.
	if !ok {
		fi = s.newFile(inc, c.FileID, tBeg, tEnd)
	}
	f := s.files.at(fi)
	f.flags |= fClosed
	f.read, f.readv, f.wrt = c.Read, c.Readv, c.Write
	s.closes[fi] = &closeData{c: *c, tEnd: tEnd}
	s.pendFile(fi, rNoOpen)
}

// pendFile moves an open file to the waiting list with reason r.
func (s *Shard) pendFile(fi int32, r uint8) {
	f := s.files.at(fi)
	if f.flags&fPending != 0 {
		return
	}
	lremove(&s.files, &s.lru, fileLRU, fi)
	f.flags |= fPending
	f.pend = r
	f.queued = uint32(s.nowS)
	lpush(&s.files, &s.pendFiles, fileLRU, fi)
}

// disc applies an isDisc: the session ended. Files still open wait
// PendingTTL for a reordered close, then are emitted as disconnect.
func (s *Shard) disc(inc *incarnation, userID uint32, tEnd uint32) {
	si, ok := s.sessIdx.get(dictKey(inc.id, userID))
	if !ok {
		return
	}
	ss := s.sess.at(si)
	for fi := ss.files.head; fi >= 0; fi = s.files.at(fi).ln[fileSess].next {
		f := s.files.at(fi)
		if f.flags&fPending == 0 {
			f.tLast = tEnd
			s.pendFile(fi, rDisconnect)
		}
	}
	ss.seen = s.nowS
	if !ss.disc {
		ss.disc = true
		s.discBytes += ss.cost
		lremove(&s.sess, &s.sessLRU, sessLRU, si)
		lpush(&s.sess, &s.sessDisc, sessLRU, si)
		s.trimDisc()
	}
}

// trimDisc holds the disconnected sessions to their budget (shareDisc):
// over it, the oldest give up the rest of their grace, counted in
// Stats.EvictedSess. One still waiting for its files keeps it (forgetting
// it would strip their user fields) and goes behind the others, as in
// Tick; a few of those at most are passed over per call, so that a
// disconnect costs O(1) whatever waits.
func (s *Shard) trimDisc() {
	budget := s.cfg.budget(shareDisc)
	for rounds := 8; s.discBytes > budget && s.sessDisc.head >= 0 && rounds > 0; {
		i := s.sessDisc.head
		if ss := s.sess.at(i); ss.files.head >= 0 {
			ss.seen = s.nowS
			ltouch(&s.sess, &s.sessDisc, sessLRU, i)
			rounds--
			continue
		}
		s.evictSession(i)
	}
}

// finishFile emits file fi as a record with reason r (a pending file keeps
// its pending reason unless r is rComplete), ending at end (server clock),
// and forgets it. c is the close, if one was seen.
func (s *Shard) finishFile(fi int32, r uint8, end uint32, c *packet.FileClose) {
	f := s.files.at(fi)
	if f.flags&fPending != 0 && r != rComplete && f.pend != rNoOpen {
		r = f.pend
	}
	if f.flags&fClosed != 0 && c == nil {
		cd := s.closes[fi]
		c, end = &cd.c, cd.tEnd
		if r != rComplete {
			r = rNoOpen
		}
	}
	inc := s.incOf(f.inc)
	s.emit(f, inc, r, end, c)
	s.removeFile(fi, inc)
}

func (s *Shard) removeFile(fi int32, inc *incarnation) {
	f := s.files.at(fi)
	if f.flags&fPending != 0 {
		lremove(&s.files, &s.pendFiles, fileLRU, fi)
	} else {
		lremove(&s.files, &s.lru, fileLRU, fi)
	}
	lremove(&s.files, &inc.files, fileInc, fi)
	if f.sess >= 0 {
		lremove(&s.files, &s.sess.at(f.sess).files, fileSess, fi)
	}
	if f.flags&fClosed != 0 {
		delete(s.closes, fi)
	}
	s.fileIdx.del(dictKey(f.inc, f.fileID))
	s.fileBytes -= fileOverhead + int64(len(f.path))
	inc.fileBytes -= fileOverhead + int64(len(f.path))
	*f = fileEntry{}
	s.files.release(fi)
}

func unixTime(t uint32) time.Time { return time.Unix(int64(t), 0).UTC() }

// emit appends the record of file f.
func (s *Shard) emit(f *fileEntry, inc *incarnation, r uint8, end uint32, c *packet.FileClose) {
	if f.prog > 0 {
		s.dropProgress(f)
	}
	if len(s.out) == cap(s.out) {
		s.nextChunk()
	}
	s.out = append(s.out, record.Record{})
	rec := &s.out[len(s.out)-1]
	s.fill(rec, f, inc, end)
	if f.flags&fOpen == 0 {
		// The open was never seen: its time is unknown. The f-stream
		// window of the close (or isXfr) that created the entry is not
		// when the file was opened (docs/records.md §2).
		rec.Start, rec.StartUnknown = rec.End, true
	}
	rec.RecordID = s.recordID(inc, f.fileID, rec.Start, rec.End)
	rec.Reason = RecordReasons[r]
	if c != nil {
		rec.Forced = c.Forced
		rec.ReadBytes, rec.ReadvBytes, rec.WriteBytes = c.Read, c.Readv, c.Write
		if c.HasOps {
			o := &c.Ops
			rec.HasOps = true
			rec.ReadOps, rec.ReadvOps, rec.WriteOps = o.Read, o.Readv, o.Write
			rec.ReadvSegs, rec.ReadvSegsMin, rec.ReadvSegsMax = o.Rsegs, o.RsMin, o.RsMax
			rec.ReadMin, rec.ReadMax = o.RdMin, o.RdMax
			rec.ReadvMin, rec.ReadvMax = o.RvMin, o.RvMax
			rec.WriteMin, rec.WriteMax = o.WrMin, o.WrMax
		}
		if c.HasSSQ {
			q := &c.SSQ
			rec.HasSSQ = true
			rec.ReadSqSum, rec.ReadvSqSum, rec.ReadvSegSqSum, rec.WriteSqSum = q.Read, q.Readv, q.ReadvSegs, q.Write
		}
	}
	if rec.End.After(s.now.Add(s.cfg.ClockAheadTolerance)) {
		// The server's clock is ahead of ours: the record lands in the
		// future. Kept as the server says, flagged and counted.
		rec.ClockAhead = true
		s.stats.ClockAhead++
	}
	s.attachTrace(rec, f, inc)
	s.stats.Records[r]++
}

// progress reports, with Config.ReportProgress, the bytes an open file has
// moved so far (Output.Progress) when an isXfr at tEnd falls in a later minute
// than its open: rollups count the bytes of long transfers as they flow.
// A file whose open was not seen has no dimensions yet and reports nothing
// (its close carries all). A later snapshot of the same file in the same
// minute replaces the earlier one (the bytes are cumulative: the rollups
// count the same).
func (s *Shard) progress(f *fileEntry, inc *incarnation, tEnd uint32) {
	if !s.cfg.ReportProgress || f.flags&fOpen == 0 || tEnd/60 <= f.tOpen/60 {
		return
	}
	if s.progShed {
		s.stats.ProgressShed++
		return
	}
	prev := int32(0)
	if f.progGen == s.progGen && f.prog > 0 {
		i := f.prog - 1
		if p := &s.prog[i]; p.End.Unix()/60 == int64(max(tEnd, f.tOpen))/60 {
			s.fill(p, f, inc, tEnd)
			return
		}
		prev = f.prog
	}
	s.prog = append(s.prog, record.Record{})
	s.progLink = append(s.progLink, prev)
	s.fill(&s.prog[len(s.prog)-1], f, inc, tEnd)
	f.prog, f.progGen = int32(len(s.prog)), s.progGen
}

// ShedProgress makes the shard take no progress snapshots while on
// (Stats.ProgressShed counts the isXfr updates that would have made one):
// the pipeline sets it while the input is behind, so that the packet path
// gives up the bytes in flight before it gives up packets. Nothing is
// lost: a file's bytes count at its next snapshot or at its close, only
// in a later minute. A snapshot taken before stays.
func (s *Shard) ShedProgress(on bool) { s.progShed = on }

// dropProgress drops the progress snapshots of f not yet taken: its record
// carries all its bytes, and a progress event after its record in the log
// would be counted twice by the rollups. It follows f's own snapshots
// (progLink), never the whole list.
func (s *Shard) dropProgress(f *fileEntry) {
	if f.progGen != s.progGen {
		return
	}
	for i := f.prog; i > 0; {
		next := s.progLink[i-1]
		if next < 0 {
			break
		}
		s.progLink[i-1] = -1
		s.progDead++
		i = next
	}
	f.prog = 0
}

// fill sets what a record of file f says before its close: the server,
// the session, the file and its bytes so far; its end is end (at least
// the open).
func (s *Shard) fill(rec *record.Record, f *fileEntry, inc *incarnation, end uint32) {
	if end < f.tOpen {
		end = f.tOpen
	}
	rec.Start, rec.End, rec.Received = unixTime(f.tOpen), unixTime(end), s.now
	rec.ServerIP, rec.ServerHost = inc.ip, inc.host
	rec.ServerID, rec.ServerStod = inc.key.sid, int64(inc.key.stod)
	rec.Site, rec.Instance, rec.Program, rec.Version = inc.site, inc.inst, inc.pgm, inc.ver
	rec.UserDictID = f.user
	si := f.sess
	if si < 0 && f.user != 0 {
		if i, ok := s.sessIdx.get(dictKey(inc.id, f.user)); ok {
			si = i
		}
	}
	if si >= 0 {
		ss := s.sess.at(si)
		rec.Protocol, rec.User, rec.ClientHost = ss.prot, ss.user, ss.host
		if l := ss.login; l != nil {
			rec.IPv6 = l.ipv6
			rec.AuthProtocol, rec.DN, rec.MonInfo = l.authProt, l.dn, l.monInfo
			rec.VO, rec.Role, rec.Groups = l.vo, l.role, l.groups
			rec.ClientRelease, rec.AppName, rec.AppInfo = l.release, l.app, l.info
		}
		if ss.appInfo != "" {
			rec.AppInfo = ss.appInfo
		}
		if t := ss.token; t != nil {
			rec.TokenSubject, rec.TokenUser, rec.TokenOrg = t.subject, t.name, t.org
			rec.TokenRole, rec.TokenGroups = t.role, t.groups
			if rec.VO == "" {
				rec.VO = t.org
			}
		}
		if ss.hasUEAC {
			rec.Experiment, rec.Activity = ss.exp, ss.act
		}
	}
	rec.FileID = f.fileID
	rec.Path = f.path
	rec.FileSize = f.size
	rec.ReadWrite = f.flags&fRW != 0
	rec.ReadBytes, rec.ReadvBytes, rec.WriteBytes = f.read, f.readv, f.wrt
}

// reportOpen reports an open with a known client and path to the redirect
// Linker.
func (s *Shard) reportOpen(f *fileEntry, inc *incarnation, tEnd uint32) {
	if f.sess < 0 || f.path == "" || s.sess.at(f.sess).host == "" {
		return
	}
	ss := s.sess.at(f.sess)
	s.opens = append(s.opens, Open{
		ServerIP: inc.ip, ServerStod: int64(inc.key.stod), ServerID: inc.key.sid, FileID: f.fileID,
		ClientHost: ss.host, User: ss.user, Path: f.path, Start: int64(f.tOpen), StartMax: int64(max(tEnd, f.tOpen)), Received: s.nowS,
	})
}
