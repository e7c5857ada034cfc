package packet

import (
	"encoding/binary"
	"strconv"
)

// TraceBuilder builds one t-stream packet of 16-byte entries (§4.1). A
// server starts and ends each buffer with a window mark; the builder does
// not enforce that, so tests can build odd packets. Use it as:
//
//	var tb packet.TraceBuilder
//	tb.Reset(buf[:0], hdr)
//	tb.Window(sid, start, start)
//	tb.Open(fileID, size); tb.IO(fileID, 0, 4096); tb.Close(fileID, 4096, 0)
//	tb.Window(sid, end, end)
//	pkt := tb.Finish()
//
// A builder is not safe for concurrent use.
type TraceBuilder struct {
	buf   []byte
	start int
	h     Header
}

// Reset starts a new packet appended to dst.
func (t *TraceBuilder) Reset(dst []byte, h Header) {
	h.Code = CodeTrace
	t.h = h
	t.start = len(dst)
	t.buf = append(dst, make([]byte, HeaderSize)...)
}

// Len returns the packet's size so far.
func (t *TraceBuilder) Len() int { return len(t.buf) - t.start }

// Entries returns the number of entries added.
func (t *TraceBuilder) Entries() int { return (t.Len() - HeaderSize) / TraceEntrySize }

func (t *TraceBuilder) entry(b0 byte, arg1, arg2 uint32) []byte {
	off := len(t.buf)
	t.buf = append(t.buf, make([]byte, TraceEntrySize)...)
	e := t.buf[off:]
	e[0] = b0
	binary.BigEndian.PutUint32(e[8:12], arg1)
	binary.BigEndian.PutUint32(e[12:16], arg2)
	return e
}

// IO adds a read (length > 0) or write (length < 0) of file dictID at
// offset, which must be in [0, 2^63) as a file offset is.
func (t *TraceBuilder) IO(dictID uint32, offset int64, length int32) {
	e := t.entry(0, uint32(length), dictID)
	binary.BigEndian.PutUint64(e[0:8], uint64(offset)&(1<<63-1))
}

// Open adds an OPEN entry; the size keeps its low 56 bits.
func (t *TraceBuilder) Open(dictID uint32, size int64) {
	e := t.entry(0, 0, dictID)
	binary.BigEndian.PutUint64(e[0:8], uint64(size)&(1<<56-1))
	e[0] = byte(TraceOpen)
}

// Readv adds a READV entry (READU when unwound, iov mode).
func (t *TraceBuilder) Readv(dictID uint32, seq uint8, segments int16, total int32, unwound bool) {
	k := TraceReadv
	if unwound {
		k = TraceReadu
	}
	e := t.entry(byte(k), uint32(total), dictID)
	e[1] = seq
	binary.BigEndian.PutUint16(e[2:4], uint16(segments))
}

// AppID adds an APPID entry with up to 12 bytes of text in bytes 4-15 (the
// layout the producer intends; §4.1).
func (t *TraceBuilder) AppID(text []byte) {
	e := t.entry(byte(TraceAppID), 0, 0)
	copy(e[4:16], text)
}

// Close adds a CLOSE entry. The totals are shifted right until they fit in
// 32 bits, as the producer does, so the low bits of totals of 4 GiB or more
// are lost.
func (t *TraceBuilder) Close(dictID uint32, read, written int64) {
	rs, rv := traceShift(read)
	ws, wv := traceShift(written)
	e := t.entry(byte(TraceClose), wv, dictID)
	e[1], e[2] = rs, ws
	binary.BigEndian.PutUint32(e[4:8], rv)
}

// traceShift mirrors XrdXrootdMonitor::do_Shift.
func traceShift(v int64) (shift uint8, val uint32) {
	u := uint64(v) & (1<<63 - 1)
	for u&0x7fffffff00000000 != 0 {
		u >>= 1
		shift++
	}
	return shift, uint32(u)
}

// Disc adds a DISC entry for user dictid userID: flags (TraceDisc*) and the
// seconds the session was connected.
func (t *TraceBuilder) Disc(userID uint32, flags uint8, seconds uint32) {
	e := t.entry(byte(TraceDisc), seconds, userID)
	e[1] = flags
}

// Window adds a WINDOW time mark carrying the low 56 bits of sid, the end
// of the previous window and the start of the next one.
func (t *TraceBuilder) Window(sid uint64, prevEnd, nextStart int32) {
	e := t.entry(0, uint32(prevEnd), uint32(nextStart))
	binary.BigEndian.PutUint64(e[0:8], sid&(1<<56-1))
	e[0] = byte(TraceWindow)
}

// Finish completes the packet (plen) and returns dst with the packet
// appended.
func (t *TraceBuilder) Finish() []byte {
	t.h.Plen = uint16(t.Len())
	putHeader(t.buf[t.start:], t.h)
	return t.buf
}

// RedirBuilder builds one r-stream packet (§4.2): the server-id slot, then
// timing marks and redirect entries with their host:path text slots. A
// server starts and ends each packet with a timing mark. A builder is not
// safe for concurrent use.
type RedirBuilder struct {
	buf   []byte
	start int
	h     Header
}

// maxRedirText is the most text a redirect entry can carry: 255 slots,
// with at least one NUL.
const maxRedirText = 255*redirSlot - 1

// Reset starts a new packet appended to dst for the server sid (low 56
// bits).
func (r *RedirBuilder) Reset(dst []byte, h Header, sid uint64) {
	h.Code = CodeRedir
	r.h = h
	r.start = len(dst)
	dst = append(dst, make([]byte, redirFixed)...)
	binary.BigEndian.PutUint64(dst[r.start+8:r.start+16], sid&(1<<56-1))
	dst[r.start+8] = redSIDMark
	r.buf = dst
}

// Len returns the packet's size so far.
func (r *RedirBuilder) Len() int { return len(r.buf) - r.start }

// Mark adds a timing mark: the window size in s (24 bits) and a Unix time.
func (r *RedirBuilder) Mark(window uint32, t int32) {
	off := len(r.buf)
	r.buf = append(r.buf, make([]byte, redirSlot)...)
	s := r.buf[off:]
	s[0] = RedirTime
	s[1], s[2], s[3] = byte(window>>16), byte(window>>8), byte(window)
	binary.BigEndian.PutUint32(s[4:8], uint32(t))
}

// Redirect adds a redirect entry from e's Xrootd, Op, Port, User, Host and
// Path, with the text `host:path` NUL-padded to whole slots. Text longer
// than 2039 bytes is cut.
func (r *RedirBuilder) Redirect(e RedirEntry) {
	n := len(e.Host) + 1 + len(e.Path)
	if n > maxRedirText {
		n = maxRedirText
	}
	slots := n/redirSlot + 1 // at least one NUL
	off := len(r.buf)
	r.buf = append(r.buf, make([]byte, redirSlot*(1+slots))...)
	s := r.buf[off:]
	s[0] = RedirFS | e.Op&0x0F
	if e.Xrootd {
		s[0] = RedirXrd | e.Op&0x0F
	}
	s[1] = byte(slots)
	binary.BigEndian.PutUint16(s[2:4], e.Port)
	binary.BigEndian.PutUint32(s[4:8], e.User)
	text := s[redirSlot : redirSlot+n]
	k := copy(text, e.Host)
	if k < len(text) {
		text[k] = ':'
		copy(text[k+1:], e.Path)
	}
}

// Finish completes the packet (plen) and returns dst with the packet
// appended.
func (r *RedirBuilder) Finish() []byte {
	r.h.Plen = uint16(r.Len())
	putHeader(r.buf[r.start:], r.h)
	return r.buf
}

// AppendGStream appends a binary g-stream packet (§5): the header with
// tBeg, tEnd, the provider type in the top byte of the sID field and sid's
// low 56 bits, then the lines, each followed by '\n' except the last, which
// ends in a NUL. h.Code and h.Plen are set here.
func AppendGStream(dst []byte, h Header, tBeg, tEnd int32, provider byte, sid uint64, lines [][]byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, GStreamHeaderSize)...)
	g := dst[start:]
	binary.BigEndian.PutUint32(g[8:12], uint32(tBeg))
	binary.BigEndian.PutUint32(g[12:16], uint32(tEnd))
	binary.BigEndian.PutUint64(g[16:24], sid&(1<<56-1)|uint64(provider)<<56)
	dst = appendLines(dst, lines)
	h.Code = CodeGStream
	h.Plen = uint16(len(dst) - start)
	putHeader(dst[start:], h)
	return dst
}

// appendLines appends records separated by '\n', the last one ending in a
// NUL, as XrdXrootdGSReal does.
func appendLines(dst []byte, lines [][]byte) []byte {
	for _, l := range lines {
		dst = append(dst, l...)
		dst = append(dst, '\n')
	}
	if len(lines) > 0 {
		dst[len(dst)-1] = 0
	}
	return dst
}

// AppendTextGStream appends a text-header g-stream datagram (§6.5) in the
// form t.CGI selects, built from t's Code, Pseq, Stod, SID and Src:
//
//   - Code 'g': the header (Provider, TBeg, TEnd; pseq, tbeg and tend padded
//     as the producer pads them) and lines, the last ending in a NUL;
//   - Code '=': an ident record, ending in a NUL;
//   - Code 'd' or 'i': a dict record with Provider, DictID and Data (JSON:
//     closed by `"}` and a NUL; CGI: no NUL).
//
// In CGI without Src, a newline stands where the src pairs would be, as in
// the producer's default header. Any other Code appends nothing.
func AppendTextGStream(dst []byte, t TextGStream, lines [][]byte) []byte {
	switch t.Code {
	case 'g', '=', 'd', 'i':
	default:
		return dst
	}
	if t.CGI {
		dst = append(dst, "code="...)
		dst = append(dst, t.Code)
		dst = append(dst, "&pseq="...)
		if t.Code == 'g' {
			dst = appendPadded(dst, uint64(t.Pseq), 3, '+')
		} else {
			dst = strconv.AppendUint(dst, uint64(t.Pseq), 10)
		}
		dst = append(dst, "&stod="...)
		dst = strconv.AppendUint(dst, uint64(t.Stod), 10)
		dst = append(dst, "&sid="...)
		dst = strconv.AppendUint(dst, t.SID, 10)
		if len(t.Src) > 0 {
			dst = append(dst, t.Src...)
		} else if t.Code != '=' {
			dst = append(dst, '\n')
		}
		switch t.Code {
		case 'g':
			dst = append(dst, "&gs.type="...)
			dst = append(dst, t.Provider)
			dst = append(dst, "&gs.tbeg="...)
			dst = appendPadded(dst, uint64(t.TBeg), 10, '+')
			dst = append(dst, "&gs.tend="...)
			dst = appendPadded(dst, uint64(t.TEnd), 10, '+')
			dst = append(dst, '\n')
			return appendLines(dst, lines)
		case '=':
			return append(dst, 0)
		default:
			dst = append(dst, "&gs.type="...)
			dst = append(dst, t.Provider)
			dst = append(dst, "&did="...)
			dst = strconv.AppendUint(dst, uint64(t.DictID), 10)
			dst = append(dst, "&data="...)
			return append(dst, t.Data...)
		}
	}
	dst = append(dst, `{"code":"`...)
	dst = append(dst, t.Code)
	dst = append(dst, `","pseq":`...)
	if t.Code == 'g' {
		dst = appendPadded(dst, uint64(t.Pseq), 3, ' ')
	} else {
		dst = strconv.AppendUint(dst, uint64(t.Pseq), 10)
	}
	dst = append(dst, `,"stod":`...)
	dst = strconv.AppendUint(dst, uint64(t.Stod), 10)
	dst = append(dst, `,"sid":`...)
	dst = strconv.AppendUint(dst, t.SID, 10)
	if len(t.Src) > 0 {
		dst = append(dst, `,"src":`...)
		dst = append(dst, t.Src...)
	}
	switch t.Code {
	case 'g':
		dst = append(dst, `,"gs":{"type":"`...)
		dst = append(dst, t.Provider)
		dst = append(dst, `","tbeg":`...)
		dst = appendPadded(dst, uint64(t.TBeg), 10, ' ')
		dst = append(dst, `,"tend":`...)
		dst = appendPadded(dst, uint64(t.TEnd), 10, ' ')
		dst = append(dst, "}}\n"...)
		return appendLines(dst, lines)
	case '=':
		return append(dst, '}', 0)
	default:
		dst = append(dst, `,"gs":{"type":"`...)
		dst = append(dst, t.Provider)
		dst = append(dst, `"},"did":`...)
		dst = strconv.AppendUint(dst, uint64(t.DictID), 10)
		dst = append(dst, `,"data":"`...)
		dst = append(dst, t.Data...)
		return append(dst, '"', '}', 0)
	}
}

// appendPadded appends v in decimal, right-aligned in width with pad, as
// printf("%*u") does with pad ' ' (the CGI form turns spaces into '+').
func appendPadded(dst []byte, v uint64, width int, pad byte) []byte {
	var tmp [20]byte
	d := strconv.AppendUint(tmp[:0], v, 10)
	for i := len(d); i < width; i++ {
		dst = append(dst, pad)
	}
	return append(dst, d...)
}
