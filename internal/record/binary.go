package record

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/xrdmon/xrdmon/internal/codec"
)

// This file holds the compact binary form of Record and Event, the form the
// store keeps. The layout is documented on AppendBinary and in
// docs/records.md §6.

// Kind-and-version bytes.
const (
	binaryRecordV1 = 0x01
	binaryEventV1  = 0x41
	binaryEventBit = 0x40

	recordFieldsV1 = 61
	eventFieldsV1  = 13
)

// Record flag bits.
const (
	rfIPv6 = 1 << iota
	rfReadWrite
	rfForced
	rfHasOps
	rfHasSSQ
	rfStartZero
	rfEndZero
	rfReceivedZero
	rfStartWide
	rfEndWide
	rfReceivedWide
	rfHasIO
	rfStartUnknown
	rfClockAhead
)

// Event flag bits.
const (
	efValid = 1 << iota
	efData
	efRaw
	efTimeZero
	efReceivedZero
	efTimeWide
	efReceivedWide
)

// Errors of DecodeBinary and DecodeEventBinary, wrapped with the field
// where they happened.
var (
	// ErrBinaryVersion is returned for a kind-and-version byte the decoder
	// does not know (a newer format, or data that is not this encoding).
	ErrBinaryVersion = errors.New("unknown binary version")
	// ErrBinaryCorrupt is returned for data that is truncated, has lengths
	// past its end, values out of range or trailing bytes (the binary
	// cursor's error, codec.ErrCorrupt).
	ErrBinaryCorrupt = codec.ErrCorrupt
)

// The Unix seconds for which a time's nanoseconds fit in an int64.
const (
	minNanoSec = math.MinInt64/1_000_000_000 + 1
	maxNanoSec = math.MaxInt64/1_000_000_000 - 1
)

// timeFlags reports whether t is the zero time and whether it needs the
// wide form.
func timeFlags(t time.Time) (zero, wide bool) {
	if t.IsZero() {
		return true, false
	}
	s := t.Unix()
	return false, s < minNanoSec || s > maxNanoSec
}

// appendTimeBin appends t in its binary form (nothing when it is zero).
func appendTimeBin(dst []byte, t time.Time, zero, wide bool) []byte {
	switch {
	case zero:
		return dst
	case wide:
		dst = binary.AppendVarint(dst, t.Unix())
		return binary.AppendUvarint(dst, uint64(t.Nanosecond()))
	}
	return binary.AppendVarint(dst, t.UnixNano())
}

func appendFloatBin(dst []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
}

// appendBinHead appends the head that records and events share: the kind
// and the field count (one uvarint byte each), the size of the string
// section and its bytes, the flags and the strings' lengths.
func appendBinHead(dst []byte, kind, fields byte, strs []string, flags uint64) []byte {
	n := 0
	for _, s := range strs {
		n += len(s)
	}
	dst = append(dst, kind, fields)
	dst = binary.AppendUvarint(dst, uint64(n))
	for _, s := range strs {
		dst = append(dst, s...)
	}
	dst = binary.AppendUvarint(dst, flags)
	for _, s := range strs {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
	}
	return dst
}

func boolBit(v bool, bit uint64) uint64 {
	if v {
		return bit
	}
	return 0
}

// AppendBinary appends the binary form of r to dst and returns the extended
// slice. It does not allocate when dst has room. DecodeBinary gives back r
// exactly (strings byte for byte, floats bit for bit), except that times are
// in UTC and lose their monotonic clock reading. The form is much cheaper to
// decode than JSON (one allocation for all the strings of a record) and
// less than half its size.
//
// # Layout
//
// A record (AppendBinary) is
//
//	byte     kind and version: 0x01 (record, version 1)
//	uvarint  n: the number of fields that follow (61 in version 1; 57
//	         before redirects and I/O profiles were added)
//	uvarint  S: the length of the string section
//	S bytes  the string section: the bytes of every string field, in field
//	         order, without separators
//	fields   n fields, in this fixed order:
//	  1      flags (uvarint): bit 0 IPv6, 1 ReadWrite, 2 Forced, 3 HasOps,
//	         4 HasSSQ, 5/6/7 Start/End/Received is the zero time,
//	         8/9/10 Start/End/Received is "wide" (see times below),
//	         11 HasIO, 12 StartUnknown, 13 ClockAhead
//	  2–28   the length (uvarint) of each string, whose bytes are the next
//	         ones of the string section: RecordID, Reason, ServerIP,
//	         ServerHost, Site, Instance, Program, Version, Protocol, User,
//	         ClientHost, ClientName, AuthProtocol, DN, MonInfo, VO, Role,
//	         Groups, ClientRelease, AppName, AppInfo, TokenSubject, TokenUser,
//	         TokenOrg, TokenRole, TokenGroups, Path
//	  29–31  Start, End, Received (times, below)
//	  32–53  ServerID (uvarint), ServerStod (varint), UserDictID (uvarint),
//	         Experiment, Activity (varint), FileID (uvarint), FileSize,
//	         ReadBytes, ReadvBytes, WriteBytes, ReadOps, ReadvOps, WriteOps,
//	         ReadvSegs, ReadvSegsMin, ReadvSegsMax, ReadMin, ReadMax,
//	         ReadvMin, ReadvMax, WriteMin, WriteMax (varint)
//	  54–57  ReadSqSum, ReadvSqSum, ReadvSegSqSum, WriteSqSum: 8 bytes each,
//	         IEEE 754 bits, little endian
//	  58     RedirectHops (varint)
//	  59–60  RedirectDelayMS, RedirectDelayMaxMS (varint)
//	  61     IO: uvarint length, then the profile (0 bytes unless HasIO):
//	         uvarint 9, Complete (0/1), Reads, Readvs, Writes, ReadBytes,
//	         ReadvBytes, WriteBytes, SequentialReads, ReadvSegments
//	         (varint); then ReadSizes, WriteSizes, ReadvSizes, ReadvCounts,
//	         each a byte n and its first n buckets (uvarint)
//
// An event (AppendEventBinary) is
//
//	byte     kind and version: 0x41 (event, version 1)
//	uvarint  n (13 in version 1), uvarint S, S bytes: as for a record
//	  1      flags (uvarint): bit 0 Valid, 1 Data is not nil, 2 Raw is not
//	         nil, 3/4 Time/Received is the zero time, 5/6 Time/Received is
//	         wide
//	  2–7    string lengths: EventID, Type, Provider, ServerIP, ServerHost,
//	         Site
//	  8–9    Time, Received
//	  10–11  ServerID (uvarint), ServerStod (varint)
//	  12–13  Data, Raw: uvarint length, then the bytes
//
// uvarint and varint are encoding/binary's: base-128 varints, varint being
// the zigzag form for signed values. A time whose zero flag is set takes no
// bytes and decodes as time.Time{}. Otherwise it is its Unix time in
// nanoseconds (varint), or, when the wide flag is set because it does not
// fit in int64 nanoseconds (before 1678 or after 2262), its Unix seconds
// (varint) then nanoseconds (uvarint). Decoded times are in UTC, without
// a monotonic clock reading; the instant is exact.
//
// # Compatibility
//
// The first byte is never '{', so a reader can tell a binary blob from the
// JSON of AppendJSON/AppendEventJSON. Its bit 0x40 marks an event, its low
// six bits are the version. The version changes only when a field changes
// meaning or encoding; a decoder rejects versions it does not know.
// New fields are only ever added after the last one (new bools as new flag
// bits, new strings with their bytes after the others in the string
// section), and n says how many fields were written: a decoder reads the
// fields it knows that are present, leaves fields missing from older data at
// their zero value, and skips the fields of a newer writer it does not know
// (with their string bytes). When n is not larger than the number of fields
// the decoder knows, the data must end exactly after them.
func AppendBinary(dst []byte, r *Record) []byte {
	strs := [...]string{
		r.RecordID, string(r.Reason), r.ServerIP, r.ServerHost, r.Site, r.Instance, r.Program, r.Version,
		r.Protocol, r.User, r.ClientHost, r.ClientName, r.AuthProtocol, r.DN, r.MonInfo, r.VO, r.Role,
		r.Groups, r.ClientRelease, r.AppName, r.AppInfo, r.TokenSubject, r.TokenUser, r.TokenOrg,
		r.TokenRole, r.TokenGroups, r.Path,
	}
	sz, sw := timeFlags(r.Start)
	ez, ew := timeFlags(r.End)
	rz, rw := timeFlags(r.Received)
	flags := boolBit(r.IPv6, rfIPv6) | boolBit(r.ReadWrite, rfReadWrite) | boolBit(r.Forced, rfForced) |
		boolBit(r.HasOps, rfHasOps) | boolBit(r.HasSSQ, rfHasSSQ) |
		boolBit(sz, rfStartZero) | boolBit(ez, rfEndZero) | boolBit(rz, rfReceivedZero) |
		boolBit(sw, rfStartWide) | boolBit(ew, rfEndWide) | boolBit(rw, rfReceivedWide)
	flags |= boolBit(r.HasIO, rfHasIO) | boolBit(r.StartUnknown, rfStartUnknown) | boolBit(r.ClockAhead, rfClockAhead)

	dst = appendBinHead(dst, binaryRecordV1, recordFieldsV1, strs[:], flags)
	dst = appendTimeBin(dst, r.Start, sz, sw)
	dst = appendTimeBin(dst, r.End, ez, ew)
	dst = appendTimeBin(dst, r.Received, rz, rw)
	dst = binary.AppendUvarint(dst, r.ServerID)
	dst = binary.AppendVarint(dst, r.ServerStod)
	dst = binary.AppendUvarint(dst, uint64(r.UserDictID))
	dst = binary.AppendVarint(dst, int64(r.Experiment))
	dst = binary.AppendVarint(dst, int64(r.Activity))
	dst = binary.AppendUvarint(dst, uint64(r.FileID))
	dst = binary.AppendVarint(dst, r.FileSize)
	dst = binary.AppendVarint(dst, r.ReadBytes)
	dst = binary.AppendVarint(dst, r.ReadvBytes)
	dst = binary.AppendVarint(dst, r.WriteBytes)
	dst = binary.AppendVarint(dst, int64(r.ReadOps))
	dst = binary.AppendVarint(dst, int64(r.ReadvOps))
	dst = binary.AppendVarint(dst, int64(r.WriteOps))
	dst = binary.AppendVarint(dst, r.ReadvSegs)
	dst = binary.AppendVarint(dst, int64(r.ReadvSegsMin))
	dst = binary.AppendVarint(dst, int64(r.ReadvSegsMax))
	dst = binary.AppendVarint(dst, int64(r.ReadMin))
	dst = binary.AppendVarint(dst, int64(r.ReadMax))
	dst = binary.AppendVarint(dst, int64(r.ReadvMin))
	dst = binary.AppendVarint(dst, int64(r.ReadvMax))
	dst = binary.AppendVarint(dst, int64(r.WriteMin))
	dst = binary.AppendVarint(dst, int64(r.WriteMax))
	dst = appendFloatBin(dst, r.ReadSqSum)
	dst = appendFloatBin(dst, r.ReadvSqSum)
	dst = appendFloatBin(dst, r.ReadvSegSqSum)
	dst = appendFloatBin(dst, r.WriteSqSum)
	dst = binary.AppendVarint(dst, int64(r.RedirectHops))
	dst = binary.AppendVarint(dst, r.RedirectDelayMS)
	dst = binary.AppendVarint(dst, r.RedirectDelayMaxMS)
	if !r.HasIO {
		return append(dst, 0)
	}
	lenAt := len(dst)
	dst = append(dst, 0)
	var empty IOProfile
	io := r.IO
	if io == nil {
		io = &empty
	}
	dst = appendIOBinary(dst, io)
	if n := len(dst) - lenAt - 1; n < 0x80 {
		dst[lenAt] = byte(n)
	} else { // rare: a long profile; move it to make room for its length
		var lb [binary.MaxVarintLen64]byte
		l := binary.PutUvarint(lb[:], uint64(n))
		dst = append(dst, lb[:l-1]...)
		copy(dst[lenAt+l:], dst[lenAt+1:lenAt+1+n])
		copy(dst[lenAt:], lb[:l])
	}
	return dst
}

// AppendEventBinary appends the binary form of e (see AppendBinary for the
// layout) to dst and returns the extended slice. It does not
// allocate when dst has room. DecodeEventBinary gives back e exactly, except
// that times are in UTC and lose their monotonic clock reading.
func AppendEventBinary(dst []byte, e *Event) []byte {
	strs := [...]string{e.EventID, string(e.Type), e.Provider, e.ServerIP, e.ServerHost, e.Site}
	tz, tw := timeFlags(e.Time)
	rz, rw := timeFlags(e.Received)
	flags := boolBit(e.Valid, efValid) | boolBit(e.Data != nil, efData) | boolBit(e.Raw != nil, efRaw) |
		boolBit(tz, efTimeZero) | boolBit(rz, efReceivedZero) | boolBit(tw, efTimeWide) | boolBit(rw, efReceivedWide)

	dst = appendBinHead(dst, binaryEventV1, eventFieldsV1, strs[:], flags)
	dst = appendTimeBin(dst, e.Time, tz, tw)
	dst = appendTimeBin(dst, e.Received, rz, rw)
	dst = binary.AppendUvarint(dst, e.ServerID)
	dst = binary.AppendVarint(dst, e.ServerStod)
	dst = codec.AppendBytes(dst, e.Data)
	return codec.AppendBytes(dst, e.Raw)
}

// binReader reads the fields of one binary record or event, on the
// project's binary cursor (codec.Dec). Each read takes the next field, or
// returns the zero value when no field is left: when the data has fewer
// fields than the decoder knows, or after an error.
type binReader struct {
	codec.Dec
	n    uint64 // fields present
	left uint64 // fields present and not yet read
	s    string // the string section (a copy)
	soff int
	verr error // the version byte is not this type's
}

// newBinReader returns a reader of b, started (start) for version.
func newBinReader(b []byte, version byte) binReader {
	d := binReader{Dec: codec.NewDec(b)}
	d.start(version)
	return d
}

// start checks the kind-and-version byte, reads the field count and copies
// the string section.
func (d *binReader) start(version byte) {
	r := d.Rest()
	if len(r) == 0 {
		d.Fail("empty data")
		return
	}
	d.Skip(1)
	if b := r[0]; b != version {
		switch {
		case b == '{':
			d.verr = fmt.Errorf("data is JSON, not the binary form: %w", ErrBinaryVersion)
		case b^version == binaryEventBit:
			d.verr = fmt.Errorf("data is the binary form of another type (byte 0x%02x, want 0x%02x): %w", b, version, ErrBinaryVersion)
		default:
			d.verr = fmt.Errorf("version byte 0x%02x, want 0x%02x: %w", b, version, ErrBinaryVersion)
		}
		return
	}
	n := d.Uvarint()
	d.s = string(d.UvarintBytes())
	if d.Err() == nil {
		d.n, d.left = n, n
	}
}

// err returns the first error.
func (d *binReader) err() error {
	if d.verr != nil {
		return d.verr
	}
	return d.Err()
}

// finish checks what follows the last known field: nothing, unless the
// writer wrote more fields (n > known) than this decoder knows.
func (d *binReader) finish(known uint64) {
	if d.err() != nil || d.n > known {
		return
	}
	if d.Len() != 0 {
		d.fail("trailing bytes")
	} else if d.soff != len(d.s) {
		d.fail("string section longer than the strings")
	}
}

// fail records the first error, for the field just read, and stops reading.
func (d *binReader) fail(msg string) {
	if field := d.n - d.left; field == 0 {
		d.Fail("header: %s", msg)
	} else {
		d.Fail("field %d: %s", field, msg)
	}
	d.left = 0
}

func (d *binReader) uvarint() uint64 {
	if d.left == 0 {
		return 0
	}
	d.left--
	if r := d.Rest(); len(r) > 0 && r[0] < 0x80 { // most fields: one byte, no call
		d.Skip(1)
		return uint64(r[0])
	}
	return d.Uvarint()
}

// uvarints reads the next len(dst) fields, all uvarints, into dst (0 for
// fields not present).
func (d *binReader) uvarints(dst []uint64) {
	k := min(uint64(len(dst)), d.left)
	d.Uvarints(dst[:k])
	clear(dst[k:])
	d.left -= k
}

// strs sets *dst[i] to the next lens[i] bytes of the string section.
func (d *binReader) strs(dst []*string, lens []uint64) {
	s, soff := d.s, d.soff
	for i, n := range lens {
		if n > uint64(len(s)-soff) {
			d.soff = soff
			d.fail("string past the end of the string section")
			return
		}
		*dst[i] = s[soff : soff+int(n)]
		soff += int(n)
	}
	d.soff = soff
}

// The kinds of integer fields, for the range checks of checkKinds.
const (
	kindU64 = iota // uvarint, any value
	kindI64        // varint, any value
	kindU32        // uvarint, uint32
	kindI32        // varint, int32
	kindI16        // varint, int16
)

// recordNumKinds are the kinds of the record's integer fields, which start
// at field recordFirstNum.
var recordNumKinds = [...]uint8{
	kindU64, kindI64, kindU32, kindI32, kindI32, kindU32, kindI64, kindI64, kindI64, kindI64,
	kindI32, kindI32, kindI32, kindI64, kindI16, kindI16, kindI32, kindI32, kindI32, kindI32, kindI32, kindI32,
}

const recordFirstNum = 32

// checkKinds checks that the raw values v of the fields numbered first,
// first+1... fit their kinds.
func (d *binReader) checkKinds(v []uint64, kinds []uint8, first uint64) {
	for i, k := range kinds {
		u := v[i]
		var ok bool
		switch k {
		case kindU32:
			ok = u <= math.MaxUint32
		case kindI32:
			z := zigzag(u)
			ok = z == int64(int32(z))
		case kindI16:
			z := zigzag(u)
			ok = z == int64(int16(z))
		default:
			ok = true
		}
		if !ok {
			d.Fail("field %d: value out of range", first+uint64(i))
			d.left = 0
		}
	}
}

func zigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

func (d *binReader) varint() int64 {
	return zigzag(d.uvarint())
}

// view reads a length and returns that many bytes of the data (not a
// copy); nil when the field is not present.
func (d *binReader) view() []byte {
	n := d.uvarint()
	r := d.Rest()
	if n > uint64(len(r)) {
		d.fail("bytes past the end")
		return nil
	}
	d.Skip(int(n))
	return r[:n:n]
}

// bytes reads a length and returns a copy of that many bytes: nil unless
// present.
func (d *binReader) bytes(present bool) []byte {
	b := d.view()
	if !present {
		if len(b) != 0 {
			d.fail("bytes for a nil slice")
		}
		return nil
	}
	c := make([]byte, len(b))
	copy(c, b)
	return c
}

func (d *binReader) time(zero, wide bool) time.Time {
	if zero || wide || d.left == 0 {
		return d.timeSlow(zero, wide)
	}
	return time.Unix(0, d.varint()).UTC()
}

func (d *binReader) timeSlow(zero, wide bool) time.Time {
	if d.left == 0 {
		return time.Time{}
	}
	if zero {
		d.left--
		return time.Time{}
	}
	// wide: seconds and nanoseconds, in one field.
	d.left--
	sec := zigzag(d.Uvarint())
	nsec := d.Uvarint()
	if d.Err() != nil {
		return time.Time{}
	}
	if nsec >= 1e9 {
		d.fail("nanoseconds out of range")
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

func (d *binReader) float() float64 {
	if d.left == 0 {
		return 0
	}
	d.left--
	return d.Float64LE()
}

// DecodeBinary decodes the binary form of a record (AppendBinary) into r,
// replacing all of r. Nothing in r refers to b afterwards: the strings share
// one new allocation, so b may be reused at once. On error, which wraps
// ErrBinaryVersion or ErrBinaryCorrupt, r is left unchanged.
func DecodeBinary(b []byte, r *Record) error {
	d := newBinReader(b, binaryRecordV1)
	var x Record
	flags := d.uvarint()
	x.IPv6 = flags&rfIPv6 != 0
	x.ReadWrite = flags&rfReadWrite != 0
	x.Forced = flags&rfForced != 0
	x.HasOps = flags&rfHasOps != 0
	x.HasSSQ = flags&rfHasSSQ != 0
	x.StartUnknown = flags&rfStartUnknown != 0
	x.ClockAhead = flags&rfClockAhead != 0

	strs := [...]*string{
		&x.RecordID, (*string)(&x.Reason), &x.ServerIP, &x.ServerHost, &x.Site, &x.Instance, &x.Program, &x.Version,
		&x.Protocol, &x.User, &x.ClientHost, &x.ClientName, &x.AuthProtocol, &x.DN, &x.MonInfo, &x.VO, &x.Role,
		&x.Groups, &x.ClientRelease, &x.AppName, &x.AppInfo, &x.TokenSubject, &x.TokenUser, &x.TokenOrg,
		&x.TokenRole, &x.TokenGroups, &x.Path,
	}
	var lens [len(strs)]uint64
	d.uvarints(lens[:])
	d.strs(strs[:], lens[:])

	x.Start = d.time(flags&rfStartZero != 0, flags&rfStartWide != 0)
	x.End = d.time(flags&rfEndZero != 0, flags&rfEndWide != 0)
	x.Received = d.time(flags&rfReceivedZero != 0, flags&rfReceivedWide != 0)

	var v [len(recordNumKinds)]uint64
	d.uvarints(v[:])
	d.checkKinds(v[:], recordNumKinds[:], recordFirstNum)
	x.ServerID = v[0]
	x.ServerStod = zigzag(v[1])
	x.UserDictID = uint32(v[2])
	x.Experiment = int32(zigzag(v[3]))
	x.Activity = int32(zigzag(v[4]))
	x.FileID = uint32(v[5])
	x.FileSize = zigzag(v[6])
	x.ReadBytes = zigzag(v[7])
	x.ReadvBytes = zigzag(v[8])
	x.WriteBytes = zigzag(v[9])
	x.ReadOps = int32(zigzag(v[10]))
	x.ReadvOps = int32(zigzag(v[11]))
	x.WriteOps = int32(zigzag(v[12]))
	x.ReadvSegs = zigzag(v[13])
	x.ReadvSegsMin = int16(zigzag(v[14]))
	x.ReadvSegsMax = int16(zigzag(v[15]))
	x.ReadMin = int32(zigzag(v[16]))
	x.ReadMax = int32(zigzag(v[17]))
	x.ReadvMin = int32(zigzag(v[18]))
	x.ReadvMax = int32(zigzag(v[19]))
	x.WriteMin = int32(zigzag(v[20]))
	x.WriteMax = int32(zigzag(v[21]))

	x.ReadSqSum = d.float()
	x.ReadvSqSum = d.float()
	x.ReadvSegSqSum = d.float()
	x.WriteSqSum = d.float()
	x.RedirectHops = int32(d.varint())
	x.RedirectDelayMS = d.varint()
	x.RedirectDelayMaxMS = d.varint()
	x.HasIO = flags&rfHasIO != 0
	if io := d.view(); x.HasIO {
		var p IOProfile
		if !decodeIOBinary(io, &p) {
			d.fail("bad I/O profile")
		} else if p != (IOProfile{}) {
			x.IO = &p
		}
	} else if len(io) > 0 {
		d.fail("I/O profile without its flag")
	}
	d.finish(recordFieldsV1)
	if err := d.err(); err != nil {
		return fmt.Errorf("decode record: %w", err)
	}
	*r = x
	return nil
}

// DecodeEventBinary decodes the binary form of an event (AppendEventBinary)
// into e, replacing all of e. Nothing in e refers to b afterwards: the
// strings share one new allocation, Data and Raw are copies. On error, which
// wraps ErrBinaryVersion or ErrBinaryCorrupt, e is left unchanged.
func DecodeEventBinary(b []byte, e *Event) error {
	d := newBinReader(b, binaryEventV1)
	var x Event
	flags := d.uvarint()
	x.Valid = flags&efValid != 0
	strs := [...]*string{&x.EventID, (*string)(&x.Type), &x.Provider, &x.ServerIP, &x.ServerHost, &x.Site}
	var lens [len(strs)]uint64
	d.uvarints(lens[:])
	d.strs(strs[:], lens[:])
	x.Time = d.time(flags&efTimeZero != 0, flags&efTimeWide != 0)
	x.Received = d.time(flags&efReceivedZero != 0, flags&efReceivedWide != 0)
	x.ServerID = d.uvarint()
	x.ServerStod = d.varint()
	x.Data = d.bytes(flags&efData != 0)
	x.Raw = d.bytes(flags&efRaw != 0)
	d.finish(eventFieldsV1)
	if err := d.err(); err != nil {
		return fmt.Errorf("decode event: %w", err)
	}
	*e = x
	return nil
}

// DecodeStored decodes a record stored in either form: the binary form, or
// JSON (a blob that starts with '{', as written by earlier versions).
func DecodeStored(b []byte, r *Record) error {
	if len(b) > 0 && b[0] == '{' {
		*r = Record{}
		return json.Unmarshal(b, r)
	}
	return DecodeBinary(b, r)
}

// DecodeStoredEvent is DecodeStored for events.
func DecodeStoredEvent(b []byte, e *Event) error {
	if len(b) > 0 && b[0] == '{' {
		*e = Event{}
		return json.Unmarshal(b, e)
	}
	return DecodeEventBinary(b, e)
}
