package codec

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var b []byte
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -5)
	b = binary.AppendUvarint(b, math.MaxUint32)
	b = binary.AppendVarint(b, math.MinInt32)
	b = binary.AppendVarint(b, math.MaxInt16)
	b = append(b, 7)
	b = binary.LittleEndian.AppendUint64(b, 0x0102030405060708)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(2.5))
	b = AppendString(b, "path")
	b = AppendBytes(b, nil)
	b = binary.AppendUvarint(b, 2) // a count of 2
	b = binary.AppendUvarint(b, 1) // an index below 2
	for _, x := range []uint64{0, 127, 128, math.MaxUint64} {
		b = binary.AppendUvarint(b, x)
	}

	d := NewDec(b)
	if d.Uvarint() != 300 || d.Varint() != -5 || d.Uint32() != math.MaxUint32 || d.Int32() != math.MinInt32 ||
		d.Int16() != math.MaxInt16 || d.Byte() != 7 || d.Uint64LE() != 0x0102030405060708 || d.Float64LE() != 2.5 ||
		string(d.UvarintBytes()) != "path" || len(d.UvarintBytes()) != 0 || d.Count(1) != 2 || d.Index(2) != 1 {
		t.Fatalf("values differ; err %v", d.Err())
	}
	var v [4]uint64
	d.Uvarints(v[:])
	if v != [4]uint64{0, 127, 128, math.MaxUint64} {
		t.Errorf("Uvarints = %v", v)
	}
	d.Done()
	if d.Err() != nil || d.Len() != 0 || d.Off() != len(b) {
		t.Errorf("err %v, %d left, at %d of %d", d.Err(), d.Len(), d.Off(), len(b))
	}
}

// TestSticky: the first failure is kept, names the byte, wraps ErrCorrupt,
// and every later read returns zero.
func TestSticky(t *testing.T) {
	b := binary.AppendUvarint(nil, 1<<40)
	b = append(b, 0x80) // a truncated varint
	d := NewDec(b)
	if d.Uint32() != 0 {
		t.Error("out of range value returned")
	}
	err := d.Err()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("err = %v", err)
	}
	if d.Uvarint() != 0 || d.Byte() != 0 || d.Bytes(0) != nil || d.Varint() != 0 || d.Err() != err {
		t.Error("reads after the error return values or change it")
	}
}

func TestBounds(t *testing.T) {
	for name, read := range map[string]func(*Dec){
		"truncated varint":   func(d *Dec) { d.Uvarint() },
		"varint overflow":    func(d *Dec) { d.Varint() },
		"bytes past the end": func(d *Dec) { d.Bytes(100) },
		"negative bytes":     func(d *Dec) { d.Bytes(-1) },
		"count beyond input": func(d *Dec) { d.Count(1) },
		"count of 8-byte":    func(d *Dec) { d.Count(8) },
		"index out of range": func(d *Dec) { d.Index(1) },
		"string past end":    func(d *Dec) { d.UvarintBytes() },
		"truncated float":    func(d *Dec) { d.Float64LE() },
		"trailing bytes":     func(d *Dec) { d.Done() },
		"int16 range":        func(d *Dec) { d.Int16() },
	} {
		in := map[string][]byte{
			"truncated varint": {0x80}, "varint overflow": {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
			"count beyond input": {5, 0, 0}, "count of 8-byte": {2, 1, 2, 3, 4, 5, 6, 7, 8, 9}, "index out of range": {1},
			"string past end": {9, 1}, "truncated float": {1, 2, 3}, "trailing bytes": {1}, "int16 range": binary.AppendVarint(nil, 1<<20),
		}[name]
		d := NewDec(in)
		read(&d)
		if !errors.Is(d.Err(), ErrCorrupt) {
			t.Errorf("%s: err = %v", name, d.Err())
		}
	}
}

// FuzzDec: Uvarints reads what Uvarint in a loop reads, with the same
// error, and nothing panics on any input.
func FuzzDec(f *testing.F) {
	f.Add([]byte{1, 2, 0x80, 1, 0xff})
	f.Add(binary.AppendUvarint(binary.AppendUvarint(nil, math.MaxUint64), 5))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := len(b)%12 + 1
		bulk, loop := NewDec(b), NewDec(b)
		got := make([]uint64, n)
		bulk.Uvarints(got)
		for i := range n {
			if x := loop.Uvarint(); x != got[i] && loop.Err() == nil {
				t.Fatalf("value %d: Uvarints %d, Uvarint %d", i, got[i], x)
			}
		}
		if (bulk.Err() == nil) != (loop.Err() == nil) || (bulk.Err() == nil && bulk.Off() != loop.Off()) {
			t.Fatalf("Uvarints: %v at %d; Uvarint: %v at %d", bulk.Err(), bulk.Off(), loop.Err(), loop.Off())
		}
		d := NewDec(b)
		for d.Err() == nil && d.Len() > 0 {
			d.UvarintBytes()
			d.Count(3)
			d.Int16()
			d.Float64LE()
		}
	})
}
