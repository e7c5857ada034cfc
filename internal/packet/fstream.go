package packet

import (
	"bytes"
	"encoding/binary"
	"math"
)

// RecType is the type of an f-stream record (§3.1).
type RecType uint8

// The f-stream record types.
const (
	RecClose RecType = 0
	RecOpen  RecType = 1
	RecTime  RecType = 2
	RecXfr   RecType = 3
	RecDisc  RecType = 4
)

// f-stream record flags (§3.1).
const (
	FlagCloseForced uint8 = 0x01 // isClose: closed because the client disconnected
	FlagCloseOPS    uint8 = 0x02 // isClose: OPS block present
	FlagCloseSSQ    uint8 = 0x04 // isClose: SSQ block present
	FlagOpenLFN     uint8 = 0x01 // isOpen: user dictid and LFN present
	FlagOpenRW      uint8 = 0x02 // isOpen: opened read/write
	FlagTimeSID     uint8 = 0x01 // isTime: sID present
)

// Record sizes (§3).
const (
	recHdrSize   = 8
	TimeSizeOld  = 16  // isTime without sID (before v4.4)
	TimeSize     = 24  // isTime with sID
	OpenSize     = 16  // isOpen without LFN
	openLFNFixed = 20  // isOpen with the user dictid, before the LFN
	CloseSize    = 32  // isClose without OPS
	CloseOPSSize = 80  // isClose with OPS
	CloseSSQSize = 112 // isClose with OPS and SSQ
	XfrSize      = 32
	DiscSize     = 8
	sidMask      = 1<<48 - 1
)

// FStream is a decoded f-stream packet (§3): its isTime record and a view of
// the records that follow, already validated.
type FStream struct {
	Header
	TBeg   int32  // Unix s when the first record entered the buffer
	TEnd   int32  // Unix s when the packet was flushed
	SID    uint64 // server id (low 48 bits); valid when HasSID
	HasSID bool
	NXfr   int16 // isXfr records in the packet, as declared
	NRecs  int16 // records after the isTime, as declared
	recs   []byte
}

// DecodeFStream decodes and validates an f-stream packet. The first record
// must be an isTime of 16 or 24 bytes; every following record must have a
// recSize within the packet and at least its type's fixed size, a known type,
// and the declared counts must match what is present. A packet that fails
// any check is rejected whole, so nothing from it is half-applied.
func DecodeFStream(b []byte) (FStream, error) {
	h, err := parseHeaderCode(b, CodeFStream, HeaderSize+TimeSizeOld)
	if err != nil {
		return FStream{}, err
	}
	t := b[HeaderSize:]
	if RecType(t[0]) != RecTime {
		return FStream{}, ErrRecordType
	}
	size := int(binary.BigEndian.Uint16(t[2:4]))
	if size != TimeSizeOld && size != TimeSize || size > len(t) {
		return FStream{}, ErrRecordSize
	}
	f := FStream{
		Header: h,
		NXfr:   int16(binary.BigEndian.Uint16(t[4:6])),
		NRecs:  int16(binary.BigEndian.Uint16(t[6:8])),
		TBeg:   int32(binary.BigEndian.Uint32(t[8:12])),
		TEnd:   int32(binary.BigEndian.Uint32(t[12:16])),
		recs:   t[size:],
	}
	if size == TimeSize && t[1]&FlagTimeSID != 0 {
		f.SID = binary.BigEndian.Uint64(t[16:24]) & sidMask
		f.HasSID = true
	}
	n, nx := 0, 0
	for rest := f.recs; len(rest) > 0; {
		if len(rest) < recHdrSize {
			return FStream{}, ErrRecordSize
		}
		rs := int(binary.BigEndian.Uint16(rest[2:4]))
		if rs < recHdrSize || rs > len(rest) {
			return FStream{}, ErrRecordSize
		}
		var min int
		switch RecType(rest[0]) {
		case RecClose:
			min = CloseSize
		case RecOpen:
			min = OpenSize
			if rest[1]&FlagOpenLFN != 0 {
				min = openLFNFixed
			}
		case RecXfr:
			min = XfrSize
			nx++
		case RecDisc:
			min = DiscSize
		default: // unknown, or a misplaced isTime
			return FStream{}, ErrRecordType
		}
		if rs < min {
			return FStream{}, ErrRecordSize
		}
		n++
		rest = rest[rs:]
	}
	if n != int(f.NRecs) || nx != int(f.NXfr) {
		return FStream{}, ErrRecordCount
	}
	return f, nil
}

// Records returns an iterator over the records after the isTime.
func (f *FStream) Records() FileIter { return FileIter{rest: f.recs} }

// FileIter iterates over the records of a validated f-stream packet:
//
//	it := fs.Records()
//	for it.Next() {
//		switch r := it.Rec(); r.Type { ... }
//	}
type FileIter struct {
	rest []byte
	rec  FileRec
}

// Next advances to the next record; it returns false after the last one.
func (it *FileIter) Next() bool {
	if len(it.rest) < recHdrSize {
		return false
	}
	rs := int(binary.BigEndian.Uint16(it.rest[2:4]))
	if rs < recHdrSize || rs > len(it.rest) { // cannot happen after DecodeFStream
		it.rest = nil
		return false
	}
	it.rec = FileRec{
		Type:  RecType(it.rest[0]),
		Flags: it.rest[1],
		ID:    binary.BigEndian.Uint32(it.rest[4:8]),
		b:     it.rest[:rs],
	}
	it.rest = it.rest[rs:]
	return true
}

// Rec returns the current record.
func (it *FileIter) Rec() FileRec { return it.rec }

// FileRec is one f-stream record: its header fields and a view of its bytes.
type FileRec struct {
	Type  RecType
	Flags uint8
	// ID is the file dictid for open, close and xfr records, and the user
	// dictid for disc records.
	ID uint32
	b  []byte
}

// Size returns the record's recSize.
func (r FileRec) Size() int { return len(r.b) }

// FileOpen is an isOpen record (§3.3).
type FileOpen struct {
	FileID   uint32
	FileSize int64 // bytes at open
	RW       bool  // opened read/write
	HasLFN   bool
	User     uint32 // user dictid of the opener (0: not reported); only with HasLFN
	// LFN is the logical file name up to its NUL terminator; it is not
	// checked for UTF-8 (a path is kept whatever its bytes: consumers
	// sanitise when emitting text).
	LFN []byte
}

// Open decodes an isOpen record. Call it only when Type is RecOpen.
func (r FileRec) Open() FileOpen {
	o := FileOpen{
		FileID:   r.ID,
		FileSize: int64(binary.BigEndian.Uint64(r.b[8:16])),
		RW:       r.Flags&FlagOpenRW != 0,
	}
	if r.Flags&FlagOpenLFN != 0 && len(r.b) >= openLFNFixed {
		o.HasLFN = true
		o.User = binary.BigEndian.Uint32(r.b[16:20])
		lfn := r.b[openLFNFixed:]
		if i := bytes.IndexByte(lfn, 0); i >= 0 {
			lfn = lfn[:i]
		}
		o.LFN = lfn
	}
	return o
}

// Ops is the OPS block of an isClose record (§3.4).
type Ops struct {
	Read, Readv, Write int32 // number of calls
	RsMin, RsMax       int16 // smallest/largest readv segment count
	Rsegs              int64 // total readv segments
	RdMin, RdMax       int32 // smallest/largest read size
	RvMin, RvMax       int32 // smallest/largest readv total size
	WrMin, WrMax       int32 // smallest/largest write size
}

// SSQ is the SSQ block of an isClose record: sums of squares (§3.4).
type SSQ struct {
	Read, Readv, ReadvSegs, Write float64
}

// FileClose is an isClose record (§3.4).
type FileClose struct {
	FileID             uint32
	Forced             bool
	Read, Readv, Write int64 // bytes over the file's lifetime
	HasOps             bool
	Ops                Ops
	HasSSQ             bool
	SSQ                SSQ
}

// Close decodes an isClose record. Call it only when Type is RecClose.
// Optional blocks are decoded only when flagged and within recSize (§9.5).
func (r FileRec) Close() FileClose {
	c := FileClose{
		FileID: r.ID,
		Forced: r.Flags&FlagCloseForced != 0,
		Read:   int64(binary.BigEndian.Uint64(r.b[8:16])),
		Readv:  int64(binary.BigEndian.Uint64(r.b[16:24])),
		Write:  int64(binary.BigEndian.Uint64(r.b[24:32])),
	}
	if r.Flags&(FlagCloseOPS|FlagCloseSSQ) != 0 && len(r.b) >= CloseOPSSize {
		o := r.b[32:80]
		c.HasOps = true
		c.Ops = Ops{
			Read:  int32(binary.BigEndian.Uint32(o[0:4])),
			Readv: int32(binary.BigEndian.Uint32(o[4:8])),
			Write: int32(binary.BigEndian.Uint32(o[8:12])),
			RsMin: int16(binary.BigEndian.Uint16(o[12:14])),
			RsMax: int16(binary.BigEndian.Uint16(o[14:16])),
			Rsegs: int64(binary.BigEndian.Uint64(o[16:24])),
			RdMin: int32(binary.BigEndian.Uint32(o[24:28])),
			RdMax: int32(binary.BigEndian.Uint32(o[28:32])),
			RvMin: int32(binary.BigEndian.Uint32(o[32:36])),
			RvMax: int32(binary.BigEndian.Uint32(o[36:40])),
			WrMin: int32(binary.BigEndian.Uint32(o[40:44])),
			WrMax: int32(binary.BigEndian.Uint32(o[44:48])),
		}
	}
	if r.Flags&FlagCloseSSQ != 0 && len(r.b) >= CloseSSQSize {
		s := r.b[80:112]
		c.HasSSQ = true
		c.SSQ = SSQ{
			Read:      math.Float64frombits(binary.BigEndian.Uint64(s[0:8])),
			Readv:     math.Float64frombits(binary.BigEndian.Uint64(s[8:16])),
			ReadvSegs: math.Float64frombits(binary.BigEndian.Uint64(s[16:24])),
			Write:     math.Float64frombits(binary.BigEndian.Uint64(s[24:32])),
		}
	}
	return c
}

// FileXfr is an isXfr record (§3.5): cumulative byte counts since open.
type FileXfr struct {
	FileID             uint32
	Read, Readv, Write int64
}

// Xfr decodes an isXfr record. Call it only when Type is RecXfr.
func (r FileRec) Xfr() FileXfr {
	return FileXfr{
		FileID: r.ID,
		Read:   int64(binary.BigEndian.Uint64(r.b[8:16])),
		Readv:  int64(binary.BigEndian.Uint64(r.b[16:24])),
		Write:  int64(binary.BigEndian.Uint64(r.b[24:32])),
	}
}
