package record

import "testing"

// Run with:
//
//	go test ./internal/record -run XXX -bench . -benchmem
func BenchmarkEncode(b *testing.B) {
	r := goldenRecord()
	for _, name := range []string{SchemaNative, SchemaGRACC, SchemaWLCG} {
		enc, err := Encoder(name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("schema="+name, func(b *testing.B) {
			buf := enc(nil, r)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = enc(buf[:0], r)
			}
		})
	}
}

func BenchmarkAppendEventJSON(b *testing.B) {
	typ, data, valid := ParseEvent('P', []byte(tpcLine))
	e := &Event{EventID: "0123456789abcdef0123456789abcdef", Type: typ, Provider: "P", ServerIP: "192.0.2.1", Data: data, Valid: valid}
	buf := AppendEventJSON(nil, e)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendEventJSON(buf[:0], e)
	}
}

func BenchmarkParseEvent(b *testing.B) {
	for _, c := range []struct {
		name     string
		provider byte
		line     string
	}{
		{"C", 'C', pfcLine},
		{"P", 'P', tpcLine},
		{"C-repair", 'C', `{"event":"file_close","lfn":"/a\b"c","size":1,"remotes":[]}`},
	} {
		b.Run("provider="+c.name, func(b *testing.B) {
			line := []byte(c.line)
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				ParseEvent(c.provider, line)
			}
		})
	}
}

func BenchmarkRecordID(b *testing.B) {
	r := goldenRecord()
	b.ReportAllocs()
	for b.Loop() {
		_ = RecordID(r.ServerIP, r.ServerStod, r.ServerID, r.FileID, r.Start, r.End)
	}
}

// BenchmarkAppendFloat is the floats of a GRACC record: whole numbers
// (byte counts, zeros, averages of equal reads) and fractions.
func BenchmarkAppendFloat(b *testing.B) {
	benchAppend(b, appendFloat, 0, 262144, 45186401, 261193.06936416184, 12471.338370768455, 1, 97633)
}

// BenchmarkAppendString is the strings of a GRACC record: a path, names
// and a DN, none of which needs escaping.
func BenchmarkAppendString(b *testing.B) {
	benchAppend(b, appendString, "/store/data/Run2026D/Tau/MINIAOD/622767/0ebdac98742a5fd8.root", "xrd0005.site5.loadgen.example",
		"LOADGEN_SITE_5", "cms0066", "/DC=org/DC=loadgen/OU=People/CN=cms0066", "1f3a4da5-935c-47b2-856d-bdb77067ef79", "xroot")
}

// benchAppend measures appending vals with appendOne into a reused buffer.
func benchAppend[T any](b *testing.B, appendOne func([]byte, T) []byte, vals ...T) {
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for _, v := range vals {
			buf = appendOne(buf, v)
		}
	}
}
