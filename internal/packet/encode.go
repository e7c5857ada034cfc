package packet

import (
	"encoding/binary"
	"math"
	"strconv"
)

// The encoder builds datagrams exactly as an XRootD server lays them out. It
// is used by the load generator and by tests; like the decoder it appends
// into a caller's buffer and does not allocate when that buffer is large
// enough.

// AppendMap appends a map record with the given header fields (h.Plen is
// computed), dictid and info text.
func AppendMap(dst []byte, h Header, dictID uint32, info []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, mapFixed)...)
	binary.BigEndian.PutUint32(dst[start+8:start+12], dictID)
	dst = append(dst, info...)
	h.Plen = uint16(len(dst) - start)
	putHeader(dst[start:], h)
	return dst
}

// AppendUserID appends `prot/user.pid:sid@host`; an empty Prot gives the
// FRM form without "prot/". A Raw user id is written as prot/User.
func AppendUserID(dst []byte, u UserID) []byte {
	if len(u.Prot) > 0 {
		dst = append(dst, u.Prot...)
		dst = append(dst, '/')
	}
	dst = append(dst, u.User...)
	if u.Raw {
		return dst
	}
	dst = append(dst, '.')
	dst = append(dst, u.PID...)
	dst = append(dst, ':')
	dst = append(dst, u.SID...)
	dst = append(dst, '@')
	return append(dst, u.Host...)
}

// AppendKV appends `&key=value`.
func AppendKV(dst []byte, key string, value []byte) []byte {
	dst = append(dst, '&')
	dst = append(dst, key...)
	dst = append(dst, '=')
	return append(dst, value...)
}

// AppendKVInt appends `&key=<decimal>`.
func AppendKVInt(dst []byte, key string, v int64) []byte {
	dst = append(dst, '&')
	dst = append(dst, key...)
	dst = append(dst, '=')
	return strconv.AppendInt(dst, v, 10)
}

// AppendLogin appends the payload of a 'u' record. With HasAuth it writes
// the auth form (&p= &n= &h= &o= &r= &g= &m=); the client keys (&R= &x= &y=)
// follow when any is set, and &I= when IPv is 4 or 6.
func AppendLogin(dst []byte, l Login) []byte {
	if l.HasAuth {
		dst = AppendKV(dst, "p", l.AuthProt)
		dst = AppendKV(dst, "n", l.Name)
		dst = AppendKV(dst, "h", l.Host)
		dst = AppendKV(dst, "o", l.Org)
		dst = AppendKV(dst, "r", l.Role)
		dst = AppendKV(dst, "g", l.Groups)
		dst = AppendKV(dst, "m", l.MonInfo)
	}
	if len(l.Release) > 0 || len(l.App) > 0 || len(l.Info) > 0 {
		dst = AppendKV(dst, "R", l.Release)
		dst = AppendKV(dst, "x", l.App)
		dst = AppendKV(dst, "y", l.Info)
	}
	if l.IPv == 4 || l.IPv == 6 {
		dst = AppendKVInt(dst, "I", int64(l.IPv))
	}
	return dst
}

// AppendServerIdent appends the payload of a '=' record.
func AppendServerIdent(dst []byte, s ServerIdent) []byte {
	dst = AppendKV(dst, "site", s.Site)
	dst = AppendKVInt(dst, "port", int64(s.Port))
	dst = AppendKV(dst, "inst", s.Inst)
	dst = AppendKV(dst, "pgm", s.Program)
	if len(s.Version) > 0 {
		dst = AppendKV(dst, "ver", s.Version)
	}
	return dst
}

// AppendToken appends the payload of a 'T' record.
func AppendToken(dst []byte, t Token) []byte {
	dst = AppendKVInt(dst, "Uc", int64(t.UserDictID))
	dst = AppendKV(dst, "s", t.Subject)
	dst = AppendKV(dst, "n", t.Name)
	dst = AppendKV(dst, "o", t.Org)
	dst = AppendKV(dst, "r", t.Role)
	return AppendKV(dst, "g", t.Groups)
}

// AppendUEAC appends the payload of a 'U' record.
func AppendUEAC(dst []byte, u UEAC) []byte {
	dst = AppendKVInt(dst, "Uc", int64(u.UserDictID))
	dst = AppendKVInt(dst, "Ec", int64(u.Experiment))
	return AppendKVInt(dst, "Ac", int64(u.Activity))
}

// appendFRMHead appends what the payloads of 'p' and 'x' records start
// with: the file's name on its own line, then its tod and sz.
func appendFRMHead(dst, name []byte, tod, size int64) []byte {
	dst = append(dst, name...)
	dst = append(dst, '\n')
	dst = AppendKVInt(dst, "tod", tod)
	return AppendKVInt(dst, "sz", size)
}

// AppendPurge appends the payload of a 'p' record (after its user id line).
func AppendPurge(dst []byte, p Purge) []byte {
	dst = appendFRMHead(dst, p.Name, p.Tod, p.Size)
	dst = AppendKVInt(dst, "at", p.Atime)
	dst = AppendKVInt(dst, "ct", p.Ctime)
	dst = AppendKVInt(dst, "mt", p.Mtime)
	fn := []byte{'l'}
	if p.Physical {
		fn[0] = 'p'
	}
	return AppendKV(dst, "fn", fn)
}

// AppendFRMXfer appends the payload of an 'x' record (after its user id line).
func AppendFRMXfer(dst []byte, x FRMXfer) []byte {
	dst = appendFRMHead(dst, x.LFN, x.Tod, x.Size)
	dst = AppendKVInt(dst, "qt", x.QueueTime)
	dst = AppendKVInt(dst, "tm", x.XferTime)
	dst = AppendKVInt(dst, "op", int64(x.Op))
	dst = AppendKVInt(dst, "rc", x.RC)
	if len(x.Detail) > 0 {
		dst = AppendKV(dst, "pd", x.Detail)
	}
	return dst
}

// FStreamBuilder builds one f-stream packet. Use it as:
//
//	var fb packet.FStreamBuilder
//	fb.Reset(buf[:0], hdr, tBeg, tEnd, sid, true)
//	fb.Open(...); fb.Xfr(...); fb.Close(...)
//	pkt := fb.Finish(tEnd)
//
// Len tells the size so far, for filling packets up to fbsz as servers do.
// A builder is not safe for concurrent use.
type FStreamBuilder struct {
	buf    []byte
	start  int
	h      Header
	nRecs  int
	nXfr   int
	hasSID bool
}

// Reset starts a new packet appended to dst. With hasSID the isTime record
// is 24 bytes and carries sid; without it, 16 bytes (pre-v4.4 servers).
func (f *FStreamBuilder) Reset(dst []byte, h Header, tBeg, tEnd int32, sid uint64, hasSID bool) {
	h.Code = CodeFStream
	f.h, f.nRecs, f.nXfr, f.hasSID = h, 0, 0, hasSID
	f.start = len(dst)
	size := TimeSizeOld
	if hasSID {
		size = TimeSize
	}
	dst = append(dst, make([]byte, HeaderSize+size)...)
	t := dst[f.start+HeaderSize:]
	t[0] = byte(RecTime)
	if hasSID {
		t[1] = FlagTimeSID
		binary.BigEndian.PutUint64(t[16:24], sid&sidMask)
	}
	binary.BigEndian.PutUint16(t[2:4], uint16(size))
	binary.BigEndian.PutUint32(t[8:12], uint32(tBeg))
	binary.BigEndian.PutUint32(t[12:16], uint32(tEnd))
	f.buf = dst
}

// Len returns the packet's size so far.
func (f *FStreamBuilder) Len() int { return len(f.buf) - f.start }

// Records returns the number of records added after the isTime.
func (f *FStreamBuilder) Records() int { return f.nRecs }

func (f *FStreamBuilder) rec(t RecType, flags uint8, size int, id uint32) []byte {
	off := len(f.buf)
	f.buf = append(f.buf, make([]byte, size)...)
	r := f.buf[off:]
	r[0], r[1] = byte(t), flags
	binary.BigEndian.PutUint16(r[2:4], uint16(size))
	binary.BigEndian.PutUint32(r[4:8], id)
	f.nRecs++
	return r
}

// OpenRecordSize returns the recSize of an isOpen with an LFN of n bytes:
// (16+4+n+8) &^ 3, leaving 5 to 8 NULs after the name (§3.3).
func OpenRecordSize(n int) int { return (openLFNFixed + n + 8) &^ 3 }

// Open adds an isOpen record; with o.HasLFN it carries o.User and o.LFN.
func (f *FStreamBuilder) Open(o FileOpen) {
	var flags uint8
	size := OpenSize
	if o.RW {
		flags |= FlagOpenRW
	}
	if o.HasLFN {
		flags |= FlagOpenLFN
		size = OpenRecordSize(len(o.LFN))
	}
	r := f.rec(RecOpen, flags, size, o.FileID)
	binary.BigEndian.PutUint64(r[8:16], uint64(o.FileSize))
	if o.HasLFN {
		binary.BigEndian.PutUint32(r[16:20], o.User)
		copy(r[openLFNFixed:], o.LFN)
	}
}

// Close adds an isClose record of 32, 80 (HasOps) or 112 (HasSSQ) bytes.
func (f *FStreamBuilder) Close(c FileClose) {
	var flags uint8
	size := CloseSize
	if c.Forced {
		flags |= FlagCloseForced
	}
	if c.HasOps || c.HasSSQ {
		flags |= FlagCloseOPS
		size = CloseOPSSize
	}
	if c.HasSSQ {
		flags |= FlagCloseSSQ
		size = CloseSSQSize
	}
	r := f.rec(RecClose, flags, size, c.FileID)
	binary.BigEndian.PutUint64(r[8:16], uint64(c.Read))
	binary.BigEndian.PutUint64(r[16:24], uint64(c.Readv))
	binary.BigEndian.PutUint64(r[24:32], uint64(c.Write))
	if size >= CloseOPSSize {
		o, p := r[32:80], c.Ops
		binary.BigEndian.PutUint32(o[0:4], uint32(p.Read))
		binary.BigEndian.PutUint32(o[4:8], uint32(p.Readv))
		binary.BigEndian.PutUint32(o[8:12], uint32(p.Write))
		binary.BigEndian.PutUint16(o[12:14], uint16(p.RsMin))
		binary.BigEndian.PutUint16(o[14:16], uint16(p.RsMax))
		binary.BigEndian.PutUint64(o[16:24], uint64(p.Rsegs))
		binary.BigEndian.PutUint32(o[24:28], uint32(p.RdMin))
		binary.BigEndian.PutUint32(o[28:32], uint32(p.RdMax))
		binary.BigEndian.PutUint32(o[32:36], uint32(p.RvMin))
		binary.BigEndian.PutUint32(o[36:40], uint32(p.RvMax))
		binary.BigEndian.PutUint32(o[40:44], uint32(p.WrMin))
		binary.BigEndian.PutUint32(o[44:48], uint32(p.WrMax))
	}
	if size == CloseSSQSize {
		s := r[80:112]
		binary.BigEndian.PutUint64(s[0:8], math.Float64bits(c.SSQ.Read))
		binary.BigEndian.PutUint64(s[8:16], math.Float64bits(c.SSQ.Readv))
		binary.BigEndian.PutUint64(s[16:24], math.Float64bits(c.SSQ.ReadvSegs))
		binary.BigEndian.PutUint64(s[24:32], math.Float64bits(c.SSQ.Write))
	}
}

// Xfr adds an isXfr record.
func (f *FStreamBuilder) Xfr(x FileXfr) {
	r := f.rec(RecXfr, 0, XfrSize, x.FileID)
	binary.BigEndian.PutUint64(r[8:16], uint64(x.Read))
	binary.BigEndian.PutUint64(r[16:24], uint64(x.Readv))
	binary.BigEndian.PutUint64(r[24:32], uint64(x.Write))
	f.nXfr++
}

// Disc adds an isDisc record for the session of user dictid userID.
func (f *FStreamBuilder) Disc(userID uint32) {
	f.rec(RecDisc, 0, DiscSize, userID)
}

// Finish completes the packet (plen, record counts, tEnd) and returns dst
// with the packet appended.
func (f *FStreamBuilder) Finish(tEnd int32) []byte {
	p := f.buf[f.start:]
	f.h.Plen = uint16(len(p))
	putHeader(p, f.h)
	t := p[HeaderSize:]
	binary.BigEndian.PutUint16(t[4:6], uint16(f.nXfr))
	binary.BigEndian.PutUint16(t[6:8], uint16(f.nRecs))
	binary.BigEndian.PutUint32(t[12:16], uint32(tEnd))
	return f.buf
}
