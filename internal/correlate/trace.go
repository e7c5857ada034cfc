package correlate

import (
	"net/netip"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// The t-stream (protocol §4.1) becomes an I/O profile per file access
// (record.IOProfile): with `io` or `iov` tracing the server reports every
// read, write and vector read with the file's dictid, which is the f-stream
// file id of the same open. The profile is kept apart from the open file
// (a trace entry may come before the f-stream open, or after its close),
// in constant memory per file, and put on the record when the file is
// emitted.
//
// Ordering: each client has its own trace buffer, flushed when full or at
// the server's flush interval, so a file's last entries may arrive after
// its f-stream close. When a server traces I/O, a complete record waits
// for the trace's CLOSE entry of its file (or the client's DISC) for at
// most PendingTTL, then goes out with what was traced (IO.Complete false).
// Servers that trace only `files` (OPEN and CLOSE, no I/O) get no profile.

// traceState is the profile being built for one (incarnation, file id).
type traceState struct {
	io     record.IOProfile
	next   int64  // offset where the previous read ended
	unwind int32  // read entries still to come that are segments of a READU
	inc    uint32 // incarnation id
	fileID uint32
	seen   uint32           // collector clock: last news
	ended  bool             // the CLOSE entry was seen
	flaw   record.IOPartial // IOReordered when a packet of it came out of order
	gaps   uint64           // the server's main-stream gaps (lost + holes) when it began
	ln     [1]link
}

// mainGaps is what inc's main stream, which carries the trace, misses:
// packets counted lost and holes still waiting. When it grows while a
// file is traced, entries of the file may be missing.
func mainGaps(inc *incarnation) uint64 {
	return inc.lost[DomainMain] + inc.seq[DomainMain].holes(256)
}

func (t *traceState) lk(int) *link { return &t.ln[0] }

// maxTraces bounds the profiles being built: a tenth of the open-file
// bound (100,000 by default, about 64 MB); beyond it the least recently
// updated is dropped (its record gets an incomplete profile).
func (c Config) maxTraces() int { return max(1, c.MaxOpenFiles/10) }

func (s *Shard) handleTrace(data []byte, addr netip.Addr) {
	t, err := packet.DecodeTrace(data)
	if err != nil {
		s.rejectDecoded(data, addr, err, DomainMain)
		return
	}
	var sid uint64
	hasSID := false
	if t.Len() > 0 {
		if e := t.Entry(0); e.Kind() == packet.TraceWindow {
			sid, _, _ = e.Window()
			hasSID = true
		}
	}
	inc := s.resolve(addr, t.Stod, sid, hasSID)
	inc.heard[StreamTrace] = s.nowS
	s.accept(packet.KindTrace)
	if !s.observe(inc, DomainMain, uint16(t.Pseq)) {
		return
	}
	// A packet after a later one: the order of its entries with those of
	// the later packet is lost (sequential reads, vector-read segments).
	late := s.seqRes == seqReordered || s.seqRes == seqStale
	for i := 0; i < t.Len(); i++ {
		e := t.Entry(i)
		switch e.Kind() {
		case packet.TraceIO:
			inc.traced = true
			off, n := e.IO()
			ts := s.trace(inc, e.DictID())
			if late {
				ts.flaw = record.IOReordered
			}
			p := &ts.io
			switch {
			case ts.unwind > 0 && n >= 0: // a segment of the vector read before
				ts.unwind--
			case n >= 0:
				p.Reads++
				p.ReadBytes += int64(n)
				p.ReadSizes.Add(int64(n))
				if off == ts.next {
					p.SequentialReads++
				}
				ts.next = off + int64(n)
			default:
				p.Writes++
				p.WriteBytes += -int64(n)
				p.WriteSizes.Add(int64(n))
			}
		case packet.TraceReadv, packet.TraceReadu:
			inc.traced = true
			_, segs, total := e.Readv()
			ts := s.trace(inc, e.DictID())
			if late {
				ts.flaw = record.IOReordered
			}
			p := &ts.io
			p.Readvs++
			p.ReadvBytes += int64(total)
			p.ReadvSegments += int64(segs)
			p.ReadvSizes.Add(int64(total))
			p.ReadvCounts.Add(int64(segs))
			if e.Kind() == packet.TraceReadu {
				ts.unwind = max(int32(segs), 0)
			}
		case packet.TraceOpen:
			if inc.traced {
				s.trace(inc, e.DictID())
			}
		case packet.TraceClose:
			if !inc.traced {
				continue
			}
			ts := s.trace(inc, e.DictID())
			ts.ended = true
			s.traceEnded(inc, e.DictID())
		case packet.TraceDisc:
			// The client's buffer ends with its disconnect: whatever of
			// its files still waits has been traced completely.
			if inc.traced {
				s.traceDisc(inc, e.DictID())
			}
		}
	}
}

// trace returns the profile of (inc, fileID), creating it.
func (s *Shard) trace(inc *incarnation, fileID uint32) *traceState {
	k := dictKey(inc.id, fileID)
	if i, ok := s.traceIdx.get(k); ok {
		ts := s.traces.at(i)
		ts.seen = uint32(s.nowS)
		ltouch(&s.traces, &s.traceLRU, 0, i)
		return ts
	}
	for s.traceIdx.len() >= s.cfg.maxTraces() {
		s.dropTrace(s.traceLRU.head)
	}
	i := s.traces.alloc()
	*s.traces.at(i) = traceState{inc: inc.id, fileID: fileID, seen: uint32(s.nowS), gaps: mainGaps(inc)}
	s.traceIdx.put(k, i)
	lpush(&s.traces, &s.traceLRU, 0, i)
	return s.traces.at(i)
}

func (s *Shard) dropTrace(i int32) {
	ts := s.traces.at(i)
	s.traceIdx.del(dictKey(ts.inc, ts.fileID))
	lremove(&s.traces, &s.traceLRU, 0, i)
	*ts = traceState{}
	s.traces.release(i)
}

// waitsForTrace reports whether file fi, closed with its open seen, waits
// in pendFiles for the rest of its trace.
func (f *fileEntry) waitsForTrace() bool {
	return f.flags&(fOpen|fClosed|fPending) == fOpen|fClosed|fPending
}

// holdForTrace makes a complete file of a server that traces I/O wait for
// its trace's end; it reports whether it did (the caller then emits
// nothing now).
func (s *Shard) holdForTrace(fi int32, inc *incarnation, c *packet.FileClose, tEnd uint32) bool {
	if !inc.traced {
		return false
	}
	f := s.files.at(fi)
	if i, ok := s.traceIdx.get(dictKey(inc.id, f.fileID)); ok && s.traces.at(i).ended {
		return false
	}
	f.flags |= fClosed
	f.read, f.readv, f.wrt = c.Read, c.Readv, c.Write
	s.closes[fi] = &closeData{c: *c, tEnd: tEnd}
	f.tLast = tEnd
	if f.flags&fPending != 0 { // its close came before its open
		f.pend = rComplete
	} else {
		s.pendFile(fi, rComplete)
	}
	return true
}

// traceEnded emits file fileID of inc if it waits for its trace.
func (s *Shard) traceEnded(inc *incarnation, fileID uint32) {
	fi, ok := s.fileIdx.get(dictKey(inc.id, fileID))
	if ok && s.files.at(fi).waitsForTrace() {
		s.finishFile(fi, rComplete, s.files.at(fi).tLast, nil)
	}
}

// traceDisc emits the files of session user of inc that wait for their
// trace: the client's trace buffer ended with its disconnect.
func (s *Shard) traceDisc(inc *incarnation, user uint32) {
	si, ok := s.sessIdx.get(dictKey(inc.id, user))
	if !ok {
		return
	}
	for fi := s.sess.at(si).files.head; fi >= 0; {
		next := s.files.at(fi).ln[fileSess].next
		if s.files.at(fi).waitsForTrace() {
			s.finishFile(fi, rComplete, s.files.at(fi).tLast, nil)
		}
		fi = next
	}
}

// attachTrace puts the profile of file f on rec, for a server that traces
// I/O, and forgets it. A profile that is not complete says why
// (IOProfile.Partial): the trace's close did not come, the server's trace
// stream lost packets or delivered them out of order while the file was
// traced, or nothing of the file was traced at all.
func (s *Shard) attachTrace(rec *record.Record, f *fileEntry, inc *incarnation) {
	if !inc.traced {
		return
	}
	rec.HasIO = true
	// One allocation per traced record (not per packet): the profile
	// leaves the shard with the record.
	i, ok := s.traceIdx.get(dictKey(inc.id, f.fileID))
	if !ok {
		rec.IO = &record.IOProfile{Partial: record.IOUntraced}
		return
	}
	ts := s.traces.at(i)
	p := ts.io
	switch {
	case mainGaps(inc) > ts.gaps:
		p.Partial = record.IOLost
	case ts.flaw != record.IOWhole:
		p.Partial = ts.flaw
	case !ts.ended:
		p.Partial = record.IONoClose
	}
	p.Complete = p.Partial == record.IOWhole
	rec.IO = &p
	s.dropTrace(i)
}

// expireTraces drops profiles without news for OpenTTL (their file was
// never emitted here: no f-stream for it).
func (s *Shard) expireTraces(ttl int64) {
	for s.traceLRU.head >= 0 {
		i := s.traceLRU.head
		if int64(s.traces.at(i).seen)+ttl > s.nowS {
			return
		}
		s.dropTrace(i)
	}
}
