package correlate

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
	"unsafe"

	"github.com/xrdmon/xrdmon/internal/record"
)

// Tick expires what has waited too long at now (the collector's clock):
// open files without news for OpenTTL (timeout), waiting files after
// PendingTTL (their pending reason: disconnect or no_open), pending
// references after PendingTTL, idle sessions after SessionTTL,
// disconnected sessions after PendingTTL, superseded incarnations after
// PendingTTL and idle empty ones after SessionTTL. Call it every few
// seconds; its cost is proportional to what expires plus the number of
// server incarnations.
func (s *Shard) Tick(now time.Time) {
	s.setNow(now)
	n := s.nowS
	openTTL := int64(s.cfg.OpenTTL / time.Second)
	pendTTL := int64(s.cfg.PendingTTL / time.Second)
	sessTTL := int64(s.cfg.SessionTTL / time.Second)
	discTTL := pendTTL
	if g := int64(s.cfg.DisconnectGrace / time.Second); g > 0 && g < pendTTL {
		discTTL = g
	}
	for s.pendFiles.head >= 0 {
		i := s.pendFiles.head
		f := s.files.at(i)
		if int64(f.queued)+pendTTL > n {
			break
		}
		s.finishFile(i, f.pend, f.tLast, nil)
	}
	for s.lru.head >= 0 {
		i := s.lru.head
		f := s.files.at(i)
		if int64(f.queued)+openTTL > n {
			break
		}
		if int64(f.seen)+openTTL > n { // news since queued: queue again
			s.requeue(i)
			continue
		}
		s.finishFile(i, rTimeout, f.tLast, nil)
	}
	s.expireTraces(openTTL)
	for s.pending.len() > 0 && s.pending.front().at+pendTTL <= n {
		s.expirePending()
	}
	for s.sessDisc.head >= 0 && s.sess.at(s.sessDisc.head).seen+discTTL <= n {
		i := s.sessDisc.head
		if s.sess.at(i).files.head >= 0 { // files still waiting: give them time
			// Move it behind the others with a fresh time and go on: the
			// loop ends when it meets a session seen at n again.
			s.sess.at(i).seen = n
			ltouch(&s.sess, &s.sessDisc, sessLRU, i)
			continue
		}
		s.removeSession(i)
	}
	for rounds := s.sessLRU.n; s.sessLRU.head >= 0 && rounds > 0; rounds-- {
		i := s.sessLRU.head
		ss := s.sess.at(i)
		if ss.seen+sessTTL > n {
			break
		}
		if ss.files.head >= 0 { // in use by an open file: keep
			ss.seen = n
			ltouch(&s.sess, &s.sessLRU, sessLRU, i)
			continue
		}
		s.removeSession(i)
	}
	for i := 0; i < len(s.incList); {
		inc := s.incList[i]
		idle := n - inc.seen
		if (inc.superseded && idle >= pendTTL) ||
			(inc.files.n == 0 && inc.sessions.n == 0 && idle >= sessTTL) {
			r := rTimeout
			if inc.superseded {
				r = rRestart
			}
			s.dropIncarnation(inc, r) // removes it from incList
			continue
		}
		i++
	}
}

// Flush ends the input at now: every file still open is emitted as a
// partial record (end_of_input, or its pending reason: disconnect,
// no_open), sequence holes still in the reorder windows are counted lost,
// and all state is dropped. Counters are kept; the shard may be used
// again as if new.
func (s *Shard) Flush(now time.Time) {
	s.setNow(now)
	for s.pendFiles.head >= 0 {
		i := s.pendFiles.head
		s.finishFile(i, s.files.at(i).pend, s.files.at(i).tLast, nil)
	}
	for s.lru.head >= 0 {
		i := s.lru.head
		s.finishFile(i, rEndOfInput, s.files.at(i).tLast, nil)
	}
	for _, inc := range s.incList {
		for inc.files.head >= 0 {
			i := inc.files.head
			s.finishFile(i, rEndOfInput, s.files.at(i).tLast, nil)
		}
	}
	s.dropSessions()
	for len(s.incList) > 0 {
		s.dropIncarnation(s.incList[0], rEndOfInput)
	}
	for s.traceLRU.head >= 0 {
		s.dropTrace(s.traceLRU.head)
	}
	s.paths.clear()
	s.users.clear()
	s.pending = fifo{}
}

// recordID is record.RecordID written into the shard's arena, so that an
// emitted record costs no allocation for its id.
func (s *Shard) recordID(inc *incarnation, fileID uint32, start, end time.Time) string {
	var buf [128]byte
	b := append(buf[:0], "xrdmon/record/v1\x00"...)
	ip := inc.ip
	if len(ip) > 64 {
		ip = ip[:64]
	}
	b = append(b, byte(len(ip)))
	b = append(b, ip...)
	b = binary.BigEndian.AppendUint64(b, uint64(int64(inc.key.stod)))
	b = binary.BigEndian.AppendUint64(b, inc.key.sid&sidMask)
	b = binary.BigEndian.AppendUint32(b, fileID)
	b = binary.BigEndian.AppendUint64(b, uint64(start.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(end.UnixNano()))
	sum := sha256.Sum256(b)
	id := s.arena.take(32)
	hex.Encode(id, sum[:16])
	return unsafe.String(&id[0], 32)
}

// eventID is record.EventID written into the shard's arena.
func (s *Shard) eventID(inc *incarnation, provider byte, pseq uint8, tEnd int64, index int, line []byte) string {
	id := record.AppendEventID(s.arena.take(32)[:0], inc.ip, int64(inc.key.stod), inc.key.sid, provider, pseq, tEnd, index, line)
	return unsafe.String(&id[0], 32)
}

// arena hands out bytes from chunks of arenaChunk, one allocation per
// chunk instead of one per record id, event id or g-stream line. What it
// hands out is never written again by the shard; a chunk is freed by the
// garbage collector once nothing holds what it handed out (events are
// typed and stored within a barrier or two; a record a linker holds back
// keeps its id's chunk, at most arenaChunk bytes).
type arena struct{ b []byte }

// arenaChunk is the size of an arena's chunks. Lines longer than a
// quarter of it get an allocation of their own.
const arenaChunk = 16 << 10

// take returns n bytes of the arena, for the caller to fill.
func (a *arena) take(n int) []byte {
	if n > arenaChunk/4 {
		return make([]byte, n)
	}
	if len(a.b)+n > cap(a.b) {
		a.b = make([]byte, 0, arenaChunk)
	}
	off := len(a.b)
	a.b = a.b[:off+n]
	return a.b[off : off+n : off+n]
}

// clone returns a copy of b in the arena.
func (a *arena) clone(b []byte) []byte {
	c := a.take(len(b))
	copy(c, b)
	return c
}

// dropSessions forgets every session at once, as Flush drops all state
// once every file is finished: taking each out of its lists and indexes
// (removeSession) would cost the end of a replay of hundreds of thousands
// of logins tens of milliseconds for nothing.
func (s *Shard) dropSessions() {
	for _, inc := range s.incList {
		inc.sessions = newList()
		inc.byText.clear()
		inc.sessBytes = 0
	}
	s.sessIdx.clear()
	s.sess = slab[session]{}
	s.sessLRU, s.sessDisc = newList(), newList()
	s.sessBytes, s.discBytes = 0, 0
}
