package postgres

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/xrdmon/xrdmon/internal/record"
)

// copyBuf encodes rows in COPY's binary format (the PostgreSQL manual,
// "COPY", "Binary Format"): a header, then per row the number of fields
// and each field as a 4-byte length (-1 for NULL) and the value in the
// type's binary send format, then a trailer. Appending a row allocates
// nothing once the buffer has grown; the types are fixed by the column
// lists recordColumns and eventColumns.
type copyBuf struct {
	b       []byte
	scratch []byte // a row's JSON before it is appended
}

var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// pgEpoch is 2000-01-01, the origin of PostgreSQL's timestamps, in Unix µs.
const pgEpoch = 946684800 * 1000000

func (c *copyBuf) reset() {
	c.b = append(c.b[:0], copyHeader...)
}

// finish appends the trailer and returns the encoded data.
func (c *copyBuf) finish() []byte {
	c.b = binary.BigEndian.AppendUint16(c.b, 0xffff)
	return c.b
}

func (c *copyBuf) fields(n int) { c.b = binary.BigEndian.AppendUint16(c.b, uint16(n)) }
func (c *copyBuf) null()        { c.b = binary.BigEndian.AppendUint32(c.b, math.MaxUint32) }

func (c *copyBuf) int8(v int64) {
	c.b = binary.BigEndian.AppendUint32(c.b, 8)
	c.b = binary.BigEndian.AppendUint64(c.b, uint64(v))
}

func (c *copyBuf) int4(v int32) {
	c.b = binary.BigEndian.AppendUint32(c.b, 4)
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(v))
}

func (c *copyBuf) int2(v int16) {
	c.b = binary.BigEndian.AppendUint32(c.b, 2)
	c.b = binary.BigEndian.AppendUint16(c.b, uint16(v))
}

func (c *copyBuf) float8(v float64) {
	c.b = binary.BigEndian.AppendUint32(c.b, 8)
	c.b = binary.BigEndian.AppendUint64(c.b, math.Float64bits(v))
}

func (c *copyBuf) bool(v bool) {
	c.b = binary.BigEndian.AppendUint32(c.b, 1)
	if v {
		c.b = append(c.b, 1)
	} else {
		c.b = append(c.b, 0)
	}
}

// timestamptz appends t with microsecond precision (truncated, as pgx
// does).
func (c *copyBuf) timestamptz(t time.Time) {
	c.int8(t.Unix()*1000000 + int64(t.Nanosecond())/1000 - pgEpoch)
}

// text appends s, with NUL bytes and invalid UTF-8 replaced by U+FFFD
// (see clean).
func (c *copyBuf) text(s string) {
	if needsClean(s) {
		s = clean(s)
	}
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(s)))
	c.b = append(c.b, s...)
}

// bytea appends b as is.
func (c *copyBuf) bytea(b []byte) {
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(b)))
	c.b = append(c.b, b...)
}

// jsonb appends data as jsonb (version 1, then the text), or NULL when
// data is empty or the JSON null.
func (c *copyBuf) jsonb(data []byte) {
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		c.null()
		return
	}
	s := string(data)
	if needsClean(s) || strings.Contains(s, `\u0000`) {
		s = cleanJSON(data)
	}
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(s)+1))
	c.b = append(c.b, 1)
	c.b = append(c.b, s...)
}

// record appends r as a row of recordColumns.
func (c *copyBuf) record(r *record.Record) {
	c.fields(len(recordColumns))
	c.text(r.RecordID)
	c.timestamptz(partitionTime(r))
	if r.Start.IsZero() {
		c.null()
	} else {
		c.timestamptz(r.Start)
	}
	c.timestamptz(r.Received)
	c.text(string(r.Reason))
	c.text(r.ServerIP)
	c.text(r.ServerHost)
	c.int8(int64(r.ServerID))
	c.int8(r.ServerStod)
	c.text(r.Site)
	c.text(r.Instance)
	c.text(r.Program)
	c.text(r.Version)
	c.text(r.Protocol)
	c.text(r.User)
	c.int8(int64(r.UserDictID))
	c.text(r.ClientHost)
	c.text(r.ClientName)
	c.bool(r.IPv6)
	c.text(r.AuthProtocol)
	c.text(r.DN)
	c.text(r.MonInfo)
	c.text(r.VO)
	c.text(r.Role)
	c.text(r.Groups)
	c.text(r.ClientRelease)
	c.text(r.AppName)
	c.text(r.AppInfo)
	c.text(r.TokenSubject)
	c.text(r.TokenUser)
	c.text(r.TokenOrg)
	c.text(r.TokenRole)
	c.text(r.TokenGroups)
	c.int4(r.Experiment)
	c.int4(r.Activity)
	c.int8(int64(r.FileID))
	c.text(r.Path)
	c.int8(r.FileSize)
	c.bool(r.ReadWrite)
	c.bool(r.Forced)
	c.int8(r.ReadBytes)
	c.int8(r.ReadvBytes)
	c.int8(r.WriteBytes)
	c.bool(r.HasOps)
	c.int4(r.ReadOps)
	c.int4(r.ReadvOps)
	c.int4(r.WriteOps)
	c.int8(r.ReadvSegs)
	c.int2(r.ReadvSegsMin)
	c.int2(r.ReadvSegsMax)
	c.int4(r.ReadMin)
	c.int4(r.ReadMax)
	c.int4(r.ReadvMin)
	c.int4(r.ReadvMax)
	c.int4(r.WriteMin)
	c.int4(r.WriteMax)
	c.bool(r.HasSSQ)
	c.float8(r.ReadSqSum)
	c.float8(r.ReadvSqSum)
	c.float8(r.ReadvSegSqSum)
	c.float8(r.WriteSqSum)
	c.int4(r.RedirectHops)
	c.int8(r.RedirectDelayMS)
	c.int8(r.RedirectDelayMaxMS)
	if r.HasIO {
		var empty record.IOProfile
		io := r.IO
		if io == nil {
			io = &empty
		}
		c.scratch = io.AppendJSON(c.scratch[:0])
		c.jsonb(c.scratch)
	} else {
		c.null()
	}
}

// event appends e as a row of eventColumns.
func (c *copyBuf) event(e *record.Event) {
	c.fields(len(eventColumns))
	c.text(e.EventID)
	c.timestamptz(e.Time)
	c.timestamptz(e.Received)
	c.text(string(e.Type))
	c.text(e.Provider)
	c.text(e.ServerIP)
	c.text(e.ServerHost)
	c.int8(int64(e.ServerID))
	c.int8(e.ServerStod)
	c.text(e.Site)
	c.jsonb(e.Data)
	c.bool(e.Valid)
}

// needsClean reports whether s holds a NUL byte or invalid UTF-8.
func needsClean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == 0 || c >= utf8.RuneSelf {
			return strings.IndexByte(s[i:], 0) >= 0 || !utf8.ValidString(s[i:])
		}
	}
	return false
}
