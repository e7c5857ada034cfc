package record

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"

	"github.com/xrdmon/xrdmon/internal/codec"
)

// IOProfile is the I/O pattern of one file access as the server's t-stream
// traced it (`xrootd.monitor ... io` or `iov`): how many reads, vector
// reads and writes, their sizes as log2 histograms, how sequential the
// reads were and how many segments the vector reads had. Its size is fixed
// whatever the number of operations (docs/records.md §5.12).
type IOProfile struct {
	// Complete is true when the trace's close of the file was seen: every
	// operation of the access is counted. False when the record had to be
	// emitted without it (the trace was late, lost or cut by a restart).
	Complete bool `json:"complete"`
	// Partial says why a profile is not complete (empty when it is).
	Partial IOPartial `json:"partial,omitempty"`
	// Operations traced, and their bytes.
	Reads      int64 `json:"reads"`
	Readvs     int64 `json:"readvs"`
	Writes     int64 `json:"writes"`
	ReadBytes  int64 `json:"read_bytes"`
	ReadvBytes int64 `json:"readv_bytes"`
	WriteBytes int64 `json:"write_bytes"`
	// SequentialReads counts the reads that start where the previous read
	// of the file ended (the first read: at offset 0).
	SequentialReads int64 `json:"sequential_reads"`
	// ReadvSegments is the number of segments of all vector reads.
	ReadvSegments int64 `json:"readv_segments"`
	// Log2 histograms: bucket i counts values v with bits.Len(v) == i, that
	// is v in [2^(i-1), 2^i); bucket 0 counts zeros. Counts saturate.
	ReadSizes   Log2Hist `json:"read_sizes_log2"`
	WriteSizes  Log2Hist `json:"write_sizes_log2"`
	ReadvSizes  Log2Hist `json:"readv_sizes_log2"`
	ReadvCounts Log2Hist `json:"readv_segments_log2"` // segments per vector read
}

// IOPartial is why an I/O profile is incomplete (docs/records.md §5.12).
type IOPartial uint8

// The reasons, in their binary codes.
const (
	IOWhole     IOPartial = iota // complete: the trace's close of the file was seen, nothing missing
	IONoClose                    // the trace's close of the file did not come within the pending TTL
	IOLost                       // packets of the server's trace stream were lost while the file was traced
	IOReordered                  // trace packets arrived out of order: sequential reads, and reads versus vector-read segments, may be miscounted
	IOUntraced                   // no trace entry of the file arrived (lost, or the profile was dropped over its bound)
	numIOPartial
)

var ioPartialNames = [numIOPartial]string{"", "no_close", "lost", "reordered", "untraced"}

// String returns the reason's JSON name ("" for IOWhole).
func (r IOPartial) String() string {
	if r < numIOPartial {
		return ioPartialNames[r]
	}
	return "unknown"
}

// MarshalText writes the reason's name.
func (r IOPartial) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Log2Hist is a histogram with power-of-two buckets (see IOProfile).
type Log2Hist [32]uint32

// Add counts v (negative values count as their magnitude).
func (h *Log2Hist) Add(v int64) {
	if v < 0 {
		v = -v
	}
	i := min(bits.Len64(uint64(v)), len(h)-1)
	if h[i] != ^uint32(0) {
		h[i]++
	}
}

// used returns the number of buckets up to the last non-zero one.
func (h *Log2Hist) used() int {
	n := len(h)
	for n > 0 && h[n-1] == 0 {
		n--
	}
	return n
}

// MarshalJSON writes the buckets up to the last non-zero one (what
// appendJSON writes); encoding/json reads such a short array back with
// the missing buckets zero.
func (h Log2Hist) MarshalJSON() ([]byte, error) { return h.appendJSON(nil), nil }

// appendJSON appends the buckets up to the last non-zero one as an array.
func (h *Log2Hist) appendJSON(dst []byte) []byte {
	dst = append(dst, '[')
	for i, c := range h[:h.used()] {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(c), 10)
	}
	return append(dst, ']')
}

// AppendJSON appends the profile as a JSON object (the "io" member of a
// record's native JSON) and returns the extended slice.
func (p *IOProfile) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"complete":`...)
	dst = strconv.AppendBool(dst, p.Complete)
	if p.Partial != IOWhole {
		dst = append(dst, `,"partial":"`...)
		dst = append(dst, p.Partial.String()...)
		dst = append(dst, '"')
	}
	for _, f := range [...]struct {
		k string
		v int64
	}{
		{`,"reads":`, p.Reads}, {`,"readvs":`, p.Readvs}, {`,"writes":`, p.Writes},
		{`,"read_bytes":`, p.ReadBytes}, {`,"readv_bytes":`, p.ReadvBytes}, {`,"write_bytes":`, p.WriteBytes},
		{`,"sequential_reads":`, p.SequentialReads}, {`,"readv_segments":`, p.ReadvSegments},
	} {
		dst = append(dst, f.k...)
		dst = strconv.AppendInt(dst, f.v, 10)
	}
	dst = append(dst, `,"read_sizes_log2":`...)
	dst = p.ReadSizes.appendJSON(dst)
	dst = append(dst, `,"write_sizes_log2":`...)
	dst = p.WriteSizes.appendJSON(dst)
	dst = append(dst, `,"readv_sizes_log2":`...)
	dst = p.ReadvSizes.appendJSON(dst)
	dst = append(dst, `,"readv_segments_log2":`...)
	dst = p.ReadvCounts.appendJSON(dst)
	return append(dst, '}')
}

// ioScalars is the number of integer fields of the first binary profile
// before its histograms; ioScalarsV2 adds Partial.
const (
	ioScalars   = 9
	ioScalarsV2 = 10
)

// appendIOBinary appends the profile's binary form: uvarint count of the
// scalars (10), the scalars (Complete as 0/1, then the eight counters as
// varints, then Partial), then each histogram as a uvarint bucket count
// and the buckets (uvarints), trailing empty buckets left out. A decoder
// that knows 9 scalars skips Partial.
func appendIOBinary(dst []byte, p *IOProfile) []byte {
	dst = append(dst, ioScalarsV2)
	c := uint64(0)
	if p.Complete {
		c = 1
	}
	dst = binary.AppendUvarint(dst, c)
	for _, v := range [...]int64{p.Reads, p.Readvs, p.Writes, p.ReadBytes, p.ReadvBytes, p.WriteBytes, p.SequentialReads, p.ReadvSegments} {
		dst = binary.AppendVarint(dst, v)
	}
	dst = binary.AppendUvarint(dst, uint64(p.Partial))
	for _, h := range [...]*Log2Hist{&p.ReadSizes, &p.WriteSizes, &p.ReadvSizes, &p.ReadvCounts} {
		n := h.used()
		dst = append(dst, byte(n))
		for _, c := range h[:n] {
			dst = binary.AppendUvarint(dst, uint64(c))
		}
	}
	return dst
}

// decodeIOBinary decodes appendIOBinary's form; ok is false for data that
// is not one.
func decodeIOBinary(b []byte, p *IOProfile) (ok bool) {
	d := codec.NewDec(b)
	n := d.Uvarint()
	if d.Err() != nil || n < ioScalars || n > 64 {
		return false
	}
	var v [ioScalars]uint64
	d.Uvarints(v[:])
	var partial uint64
	if n >= ioScalarsV2 {
		partial = d.Uvarint()
	}
	for range n - min(n, ioScalarsV2) { // fields of a later version
		d.Uvarint()
	}
	if d.Err() != nil || v[0] > 1 || partial >= uint64(numIOPartial) {
		return false
	}
	*p = IOProfile{Complete: v[0] == 1, Partial: IOPartial(partial)}
	for i, dst := range [...]*int64{&p.Reads, &p.Readvs, &p.Writes, &p.ReadBytes, &p.ReadvBytes, &p.WriteBytes, &p.SequentialReads, &p.ReadvSegments} {
		*dst = zigzag(v[i+1])
	}
	for _, h := range [...]*Log2Hist{&p.ReadSizes, &p.WriteSizes, &p.ReadvSizes, &p.ReadvCounts} {
		m := d.Uvarint()
		if m > uint64(len(h)) {
			return false
		}
		var c [len(Log2Hist{})]uint64
		d.Uvarints(c[:m])
		for i, x := range c[:m] {
			if x > math.MaxUint32 {
				return false
			}
			h[i] = uint32(x)
		}
	}
	d.Done()
	return d.Err() == nil
}
