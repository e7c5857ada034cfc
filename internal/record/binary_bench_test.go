package record

import (
	"encoding/json"
	"testing"
)

// BenchmarkRecordCodec compares the binary form with the JSON form for the
// realistic full record of BenchmarkEncode. Run with:
//
//	go test ./internal/record -run XXX -bench 'Codec' -benchmem
func BenchmarkRecordCodec(b *testing.B) {
	r := goldenRecord()
	bin, js := AppendBinary(nil, r), AppendJSON(nil, r)
	b.Run("op=append/form=binary", func(b *testing.B) {
		buf := make([]byte, 0, len(bin))
		b.SetBytes(int64(len(bin)))
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendBinary(buf[:0], r)
		}
	})
	b.Run("op=append/form=json", func(b *testing.B) {
		buf := make([]byte, 0, len(js))
		b.SetBytes(int64(len(js)))
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendJSON(buf[:0], r)
		}
	})
	b.Run("op=decode/form=binary", func(b *testing.B) {
		var got Record
		b.SetBytes(int64(len(bin)))
		b.ReportAllocs()
		for b.Loop() {
			if err := DecodeBinary(bin, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=decode/form=json", func(b *testing.B) {
		b.SetBytes(int64(len(js)))
		b.ReportAllocs()
		for b.Loop() {
			var got Record
			if err := json.Unmarshal(js, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEventCodec does the same for a typed tpc event.
func BenchmarkEventCodec(b *testing.B) {
	typ, data, valid := ParseEvent('P', []byte(tpcLine))
	e := &Event{EventID: "0123456789abcdef0123456789abcdef", Type: typ, Provider: "P", ServerIP: "192.0.2.1", Data: data, Valid: valid}
	bin, js := AppendEventBinary(nil, e), AppendEventJSON(nil, e)
	b.Run("op=append/form=binary", func(b *testing.B) {
		buf := make([]byte, 0, len(bin))
		b.SetBytes(int64(len(bin)))
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendEventBinary(buf[:0], e)
		}
	})
	b.Run("op=decode/form=binary", func(b *testing.B) {
		var got Event
		b.SetBytes(int64(len(bin)))
		b.ReportAllocs()
		for b.Loop() {
			if err := DecodeEventBinary(bin, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=decode/form=json", func(b *testing.B) {
		b.SetBytes(int64(len(js)))
		b.ReportAllocs()
		for b.Loop() {
			var got Event
			if err := json.Unmarshal(js, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
