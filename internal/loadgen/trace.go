package loadgen

import (
	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// Tracing (Config.Trace): at its close, an access's I/O is sent on the
// t-stream as XRootD's `io`/`iov` monitoring reports it (protocol §4.1):
// an OPEN, one entry per read and write call, a READV summary per vector
// read (with `iov` a READU followed by one entry per segment), the CLOSE;
// in packets of at most traceMaxEntries entries between window marks. The
// truth's profile (Record.IO) is what those entries say, counted as they
// are built.

// traceMaxEntries is the most entries in one t-stream packet (a 32 KiB
// buffer).
const traceMaxEntries = 2048

// tracer builds the t-stream packets of one access.
type tracer struct {
	r    *run
	s    *server
	tb   packet.TraceBuilder
	on   bool
	from int32 // window start of the packet being built
	io   *record.IOProfile
	next int64 // where the previous read ended
	ok   bool
}

func (t *tracer) room() bool {
	if t.on && t.tb.Entries() < traceMaxEntries-1 {
		return true
	}
	if t.on && !t.flush() {
		return false
	}
	if !t.r.room() {
		t.ok = false
		return false
	}
	t.tb.Reset(t.r.arena, packet.Header{Pseq: t.s.pseqMain, Stod: uint32(t.s.stod)})
	t.from = sec(t.r.now)
	t.tb.Window(t.s.sid, t.from, t.from)
	t.on = true
	return true
}

func (t *tracer) flush() bool {
	if !t.on {
		return t.ok
	}
	t.on = false
	now := sec(t.r.now)
	t.tb.Window(t.s.sid, now, now)
	start := len(t.r.arena)
	t.r.arena = t.tb.Finish()
	t.s.pseqMain++
	t.r.emit(t.s, domMain, t.r.arena[start:])
	return t.ok
}

func (t *tracer) read(dict uint32, off, n int64) bool {
	if !t.room() {
		return false
	}
	t.tb.IO(dict, off, int32(n))
	p := t.io
	p.Reads++
	p.ReadBytes += n
	p.ReadSizes.Add(n)
	if off == t.next {
		p.SequentialReads++
	}
	t.next = off + n
	return true
}

// trace sends the t-stream of access a, closed with rd, rv and wr bytes,
// and keeps its profile in a.io; false when the run must stop.
func (r *run) trace(s *server, a *access, rd, rv, wr int64) bool {
	a.io = record.IOProfile{Complete: true}
	t := &tracer{r: r, s: s, io: &a.io, ok: true}
	dict := a.fileID
	if !t.room() {
		return false
	}
	t.tb.Open(dict, a.size)
	if n, last, size, _ := chunks(rd, a.rdSize); n > 0 {
		for i := range n {
			sz := chunkLen(i, n, size, last)
			k := i
			if !a.seqRead {
				k = (i * 7919) % n // a scattered order
			}
			if !t.read(dict, k*size, sz) {
				return false
			}
		}
	}
	if n, last, size, _ := chunks(rv, a.rvSize); n > 0 {
		segs := a.rvSegs
		for i := range n {
			total := chunkLen(i, n, size, last)
			if !t.room() {
				return false
			}
			unwound := r.cfg.Trace == "iov"
			t.tb.Readv(dict, uint8(i), int16(segs), int32(total), unwound)
			p := t.io
			p.Readvs++
			p.ReadvBytes += total
			p.ReadvSegments += segs
			p.ReadvSizes.Add(total)
			p.ReadvCounts.Add(segs)
			if unwound {
				for j := range segs {
					seg := total / segs
					if j == segs-1 {
						seg = total - (segs-1)*(total/segs)
					}
					if !t.room() {
						return false
					}
					t.tb.IO(dict, (i*segs+j)*a.rvSize, int32(seg))
				}
			}
		}
	}
	if n, last, size, _ := chunks(wr, a.wrSize); n > 0 {
		for i := range n {
			sz := chunkLen(i, n, size, last)
			if !t.room() {
				return false
			}
			t.tb.IO(dict, i*size, -int32(sz))
			p := t.io
			p.Writes++
			p.WriteBytes += sz
			p.WriteSizes.Add(sz)
		}
	}
	if !t.room() {
		return false
	}
	t.tb.Close(dict, rd+rv, wr)
	return t.flush()
}
