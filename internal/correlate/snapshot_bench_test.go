package correlate

import (
	"bytes"
	"testing"
)

// BenchmarkSnapshot measures Snapshot and RestoreShard of a shard holding
// 100,000 open files:
//
//	go test ./internal/correlate -run '^$' -bench 'Snapshot|Restore' -benchtime 20x
func BenchmarkSnapshot(b *testing.B) {
	s := bigShard(b, 100_000)
	var buf bytes.Buffer
	if err := s.Snapshot(&buf); err != nil { // warm the scratch buffers
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf.Reset()
		if err := s.Snapshot(&buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes")
	b.ReportMetric(float64(buf.Len())/100_000, "bytes/file")
}

func BenchmarkRestore(b *testing.B) {
	s := bigShard(b, 100_000)
	var buf bytes.Buffer
	if err := s.Snapshot(&buf); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := RestoreShard(DefaultConfig(), bytes.NewReader(buf.Bytes()))
		if err != nil {
			b.Fatal(err)
		}
		if r.Stats().OpenFiles != 100_000 {
			b.Fatal("open files")
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes")
}
