// Package codec is the one cursor of xrdmon's binary formats: the
// correlation checkpoint (docs/checkpoint.md), the rollup parts
// (docs/rollups.md), the store's blocks (internal/store/FORMAT.md) and the
// binary record (docs/records.md) all read through a Dec and write by
// appending.
//
// A Dec reads varints, fixed-width integers and byte strings from a
// buffer with a sticky error: the first malformed or missing field sets
// the error, every later read returns a zero value, and the decoder
// checks Err once at the end, as Prometheus' tsdb/encoding Decbuf does.
// Counts are bounded by the bytes left, so corrupt input cannot size an
// allocation. Writing needs no cursor: the Append functions of
// encoding/binary, and AppendBytes here for a length-prefixed string.
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrCorrupt is wrapped by every error a Dec reports.
var ErrCorrupt = errors.New("corrupt binary data")

// Dec reads b from the start. The zero Dec reads nothing.
type Dec struct {
	b   []byte
	off int
	err error
}

// NewDec returns a Dec reading b (not copied: Bytes returns parts of it).
func NewDec(b []byte) Dec { return Dec{b: b} }

// Err returns the first error, wrapping ErrCorrupt, or nil.
func (d *Dec) Err() error { return d.err }

// Off returns the bytes read so far.
func (d *Dec) Off() int { return d.off }

// Len returns the bytes left.
func (d *Dec) Len() int { return len(d.b) - d.off }

// Rest returns the bytes left without reading them.
func (d *Dec) Rest() []byte { return d.b[d.off:] }

// Skip moves past n bytes that Rest showed (n <= len(Rest())). With Rest,
// it lets a hot decoder read a field without a call.
func (d *Dec) Skip(n int) { d.off += n }

// Fail sets the error, unless one is set: the message, at the current
// byte, wrapping ErrCorrupt; nothing more is read. Decoders call it for
// what only they can check (a value out of its range, a bad tag).
func (d *Dec) Fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("at byte %d: %s: %w", d.off, fmt.Sprintf(format, args...), ErrCorrupt)
		d.b = d.b[:d.off] // every later read finds nothing
	}
}

// Uvarint reads an unsigned varint. The one-byte case is inlined.
func (d *Dec) Uvarint() uint64 {
	if b := d.b[d.off:]; len(b) > 0 && b[0] < 0x80 {
		d.off++
		return uint64(b[0])
	}
	return d.uvarintSlow()
}

func (d *Dec) uvarintSlow() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.failVarint(n)
		return 0
	}
	d.off += n
	return x
}

// Varint reads a signed (zig-zag) varint: an unsigned one decoded as
// binary.Varint does.
func (d *Dec) Varint() int64 {
	ux := d.Uvarint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

func (d *Dec) failVarint(n int) {
	if n == 0 {
		d.Fail("truncated varint")
	} else {
		d.Fail("varint overflows 64 bits")
	}
}

// Uint32 reads an unsigned varint that must fit 32 bits.
func (d *Dec) Uint32() uint32 {
	x := d.Uvarint()
	if x > math.MaxUint32 {
		d.Fail("value %d out of range", x)
		return 0
	}
	return uint32(x)
}

// Int32 reads a signed varint that must fit 32 bits.
func (d *Dec) Int32() int32 { return int32(d.varintIn(math.MinInt32, math.MaxInt32)) }

// Int16 reads a signed varint that must fit 16 bits.
func (d *Dec) Int16() int16 { return int16(d.varintIn(math.MinInt16, math.MaxInt16)) }

// varintIn reads a signed varint that must be in [lo, hi].
func (d *Dec) varintIn(lo, hi int64) int64 {
	x := d.Varint()
	if x < lo || x > hi {
		d.Fail("value %d out of range", x)
		return 0
	}
	return x
}

// Byte reads one byte.
func (d *Dec) Byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.Fail("truncated")
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

// Uvarints reads len(dst) unsigned varints into dst: Uvarint in a loop,
// without length checks where enough bytes are left for any varint.
func (d *Dec) Uvarints(dst []uint64) {
	b, off := d.b, d.off
	for i := range dst {
		if len(b)-off >= binary.MaxVarintLen64 {
			var v uint64
			for shift := uint(0); shift < 64; shift += 7 {
				c := b[off]
				off++
				if c < 0x80 {
					if shift == 63 && c > 1 {
						break // overflow: the slow path below reports it
					}
					dst[i] = v | uint64(c)<<shift
					goto next
				}
				v |= uint64(c&0x7f) << shift
			}
			off -= binary.MaxVarintLen64
		}
		d.off = off
		dst[i] = d.uvarintSlow()
		b, off = d.b, d.off
	next:
	}
	d.off = off
}

// Float64LE reads a float64 as 8 bytes, little-endian.
func (d *Dec) Float64LE() float64 {
	if b := d.b[d.off:]; len(b) >= 8 {
		d.off += 8
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	d.Fail("truncated float")
	return 0
}

// Uint32LE reads 4 bytes, little-endian.
func (d *Dec) Uint32LE() uint32 {
	if b := d.Bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

// Uint64LE reads 8 bytes, little-endian.
func (d *Dec) Uint64LE() uint64 {
	if b := d.Bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// Bytes reads the next n bytes (a part of the buffer, not a copy).
func (d *Dec) Bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b)-d.off {
		d.Fail("%d bytes past the end", n)
		return nil
	}
	p := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return p
}

// UvarintBytes reads a byte string written by AppendBytes.
func (d *Dec) UvarintBytes() []byte {
	n := d.Uvarint()
	if n > uint64(d.Len()) {
		d.Fail("string of %d bytes past the end", n)
		return nil
	}
	return d.Bytes(int(n))
}

// Count reads an element count. Every element takes at least min bytes
// (at least 1), so a count beyond what is left is corrupt and never sizes
// an allocation.
func (d *Dec) Count(min int) int {
	x := d.Uvarint()
	if x > uint64(d.Len()/max(min, 1)) || x > math.MaxInt32 {
		d.Fail("count %d beyond the input", x)
		return 0
	}
	return int(x)
}

// Index reads a position below n.
func (d *Dec) Index(n int) int {
	x := d.Uvarint()
	if x >= uint64(n) {
		d.Fail("index %d out of range %d", x, n)
		return 0
	}
	return int(x)
}

// Done fails unless every byte was read.
func (d *Dec) Done() {
	if d.err == nil && d.off != len(d.b) {
		d.Fail("%d trailing bytes", len(d.b)-d.off)
	}
}

// AppendBytes appends b with its length as a uvarint (read by
// UvarintBytes).
func AppendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// AppendString is AppendBytes of a string.
func AppendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}
