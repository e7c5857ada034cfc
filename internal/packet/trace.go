package packet

import (
	"bytes"
	"encoding/binary"
)

// TraceEntrySize is the size of a t-stream entry (§4.1).
const TraceEntrySize = 16

// TraceKind is the kind of a t-stream entry, from its first byte.
type TraceKind uint8

// The t-stream entry kinds (§4.1). Byte 0 below 0x80 is a read or write.
const (
	TraceIO     TraceKind = 0x00 // read (length > 0) or write (length < 0)
	TraceOpen   TraceKind = 0x80
	TraceReadv  TraceKind = 0x90
	TraceReadu  TraceKind = 0x91
	TraceAppID  TraceKind = 0xA0
	TraceClose  TraceKind = 0xC0
	TraceDisc   TraceKind = 0xD0
	TraceWindow TraceKind = 0xE0
)

// Trace is a decoded, validated t-stream packet.
type Trace struct {
	Header
	body []byte
}

// DecodeTrace decodes a t-stream packet: a whole number of 16-byte entries,
// each of a known kind.
func DecodeTrace(b []byte) (Trace, error) {
	h, err := parseHeaderCode(b, CodeTrace, HeaderSize+1) // no entry at all: ErrShort
	if err != nil {
		return Trace{}, err
	}
	body := b[HeaderSize:]
	if len(body)%TraceEntrySize != 0 {
		return Trace{}, ErrRecordSize
	}
	for i := 0; i < len(body); i += TraceEntrySize {
		if traceKind(body[i]) == 0xFF {
			return Trace{}, ErrRecordType
		}
	}
	return Trace{Header: h, body: body}, nil
}

func traceKind(b0 byte) TraceKind {
	if b0 < 0x80 {
		return TraceIO
	}
	switch k := TraceKind(b0); k {
	case TraceOpen, TraceReadv, TraceReadu, TraceAppID, TraceClose, TraceDisc, TraceWindow:
		return k
	}
	return 0xFF
}

// Len returns the number of entries.
func (t *Trace) Len() int { return len(t.body) / TraceEntrySize }

// Entry returns entry i, 0 <= i < Len().
func (t *Trace) Entry(i int) TraceEntry {
	return TraceEntry{b: t.body[i*TraceEntrySize : (i+1)*TraceEntrySize]}
}

// TraceEntry is a view of one 16-byte t-stream entry.
type TraceEntry struct{ b []byte }

// Kind returns the entry's kind.
func (e TraceEntry) Kind() TraceKind { return traceKind(e.b[0]) }

func (e TraceEntry) arg1() uint32 { return binary.BigEndian.Uint32(e.b[8:12]) }
func (e TraceEntry) arg2() uint32 { return binary.BigEndian.Uint32(e.b[12:16]) }

// DictID returns arg2: the file dictid, or the user dictid for a DISC entry.
func (e TraceEntry) DictID() uint32 { return e.arg2() }

// IO returns the offset and length of a read/write entry: length > 0 is a
// read, < 0 a write of -length bytes.
func (e TraceEntry) IO() (offset int64, length int32) {
	return int64(binary.BigEndian.Uint64(e.b[0:8])), int32(e.arg1())
}

// OpenSize returns the file size of an OPEN entry (low 56 bits).
func (e TraceEntry) OpenSize() int64 {
	return int64(binary.BigEndian.Uint64(e.b[0:8]) & (1<<56 - 1))
}

// Readv returns the readv sequence number, segment count and total bytes of
// a READV or READU entry.
func (e TraceEntry) Readv() (seq uint8, segments int16, total int32) {
	return e.b[1], int16(binary.BigEndian.Uint16(e.b[2:4])), int32(e.arg1())
}

// CloseTotals returns the bytes read and written of a CLOSE entry, shifted
// back (the low shift bits are lost by the producer).
func (e TraceEntry) CloseTotals() (read, written uint64) {
	rs, ws := e.b[1]&63, e.b[2]&63
	return uint64(binary.BigEndian.Uint32(e.b[4:8])) << rs, uint64(e.arg1()) << ws
}

// Disc returns the flags (0x01 forced, 0x02 bound path) and the connected
// seconds of a DISC entry.
func (e TraceEntry) Disc() (flags uint8, seconds uint32) { return e.b[1], e.arg1() }

// Window returns the low 56 bits of the sID and the end of the previous and
// start of the next window of a WINDOW entry.
func (e TraceEntry) Window() (sid uint64, prevEnd, nextStart int32) {
	return binary.BigEndian.Uint64(e.b[0:8]) & (1<<56 - 1), int32(e.arg1()), int32(e.arg2())
}

// Redir is a decoded, validated r-stream packet (§4.2).
type Redir struct {
	Header
	SID  uint64 // low 56 bits of the sID
	body []byte
}

// r-stream entry kinds (§4.2).
const (
	RedirTime  uint8 = 0x00 // timing mark
	RedirFS    uint8 = 0x80 // redirect from the file system / cmsd (| op)
	RedirXrd   uint8 = 0x90 // redirect decided by the xrootd layer (| op)
	redirSlot        = 8
	redirFixed       = HeaderSize + redirSlot
	redSIDMark uint8 = 0xF0
)

// DecodeRedir decodes an r-stream packet: the server-id slot, then 8-byte
// slots of timing marks and redirect entries with their text slots.
func DecodeRedir(b []byte) (Redir, error) {
	h, err := parseHeaderCode(b, CodeRedir, redirFixed)
	if err != nil {
		return Redir{}, err
	}
	if b[8] != redSIDMark {
		return Redir{}, ErrRecordType
	}
	body := b[redirFixed:]
	if len(body)%redirSlot != 0 {
		return Redir{}, ErrRecordSize
	}
	for rest := body; len(rest) > 0; {
		switch rest[0] & 0xF0 {
		case RedirTime:
			if rest[0] != RedirTime {
				return Redir{}, ErrRecordType
			}
			rest = rest[redirSlot:]
		case RedirFS, RedirXrd:
			n := redirSlot * (1 + int(rest[1]))
			if rest[1] == 0 || n > len(rest) {
				return Redir{}, ErrRecordSize
			}
			rest = rest[n:]
		default:
			return Redir{}, ErrRecordType
		}
	}
	return Redir{
		Header: h,
		SID:    binary.BigEndian.Uint64(b[8:16]) & (1<<56 - 1),
		body:   body,
	}, nil
}

// Entries returns an iterator over the packet's entries.
func (r *Redir) Entries() RedirIter { return RedirIter{rest: r.body} }

// RedirIter iterates over the entries of a validated r-stream packet.
type RedirIter struct {
	rest []byte
	ent  RedirEntry
}

// RedirEntry is one r-stream entry: a timing mark (Mark true) or a redirect.
type RedirEntry struct {
	Mark   bool
	Window uint32 // timing mark: window size in s
	Time   int32  // timing mark: Unix s
	Xrootd bool   // redirect decided by the xrootd layer (0x90), else by the file system (0x80)
	Op     uint8  // low nibble: 1 chmod ... 0x0e trunc
	Port   uint16 // see §4.2: not always the target's port
	User   uint32 // user dictid (0 = unknown)
	Host   []byte // target host; may be empty
	Path   []byte
}

// Next advances to the next entry.
func (it *RedirIter) Next() bool {
	if len(it.rest) < redirSlot {
		return false
	}
	s := it.rest
	if s[0] == RedirTime {
		it.ent = RedirEntry{
			Mark:   true,
			Window: uint32(s[1])<<16 | uint32(s[2])<<8 | uint32(s[3]),
			Time:   int32(binary.BigEndian.Uint32(s[4:8])),
		}
		it.rest = s[redirSlot:]
		return true
	}
	n := redirSlot * (1 + int(s[1]))
	if n > len(s) || s[1] == 0 { // cannot happen after DecodeRedir
		it.rest = nil
		return false
	}
	text := s[redirSlot:n]
	if i := bytes.IndexByte(text, 0); i >= 0 {
		text = text[:i]
	}
	e := RedirEntry{
		Xrootd: s[0]&0xF0 == RedirXrd,
		Op:     s[0] & 0x0F,
		Port:   binary.BigEndian.Uint16(s[2:4]),
		User:   binary.BigEndian.Uint32(s[4:8]),
	}
	// host:path; the host may itself contain ':' (IPv6), the path starts
	// with '/' when present, so split at the last ':' before the first '/'.
	head := text
	if i := bytes.IndexByte(text, '/'); i >= 0 {
		head = text[:i]
	}
	split := bytes.LastIndexByte(head, ':')
	if split >= 0 {
		e.Host, e.Path = text[:split], text[split+1:]
	} else {
		e.Path = text
	}
	it.ent = e
	it.rest = s[n:]
	return true
}

// Entry returns the current entry.
func (it *RedirIter) Entry() RedirEntry { return it.ent }

// t-stream DISC entry flags (§4.1).
const (
	TraceDiscForced uint8 = 0x01 // the session was forcibly ended
	TraceDiscBound  uint8 = 0x02 // a bound path (secondary data connection) ended
)

// AppID returns the text of an APPID entry: bytes 4-15 up to the first NUL.
// The producer rarely gets this right (§4.1); treat it as a hint.
func (e TraceEntry) AppID() []byte {
	t := e.b[4:16]
	for i, c := range t {
		if c == 0 {
			return t[:i]
		}
	}
	return t
}
