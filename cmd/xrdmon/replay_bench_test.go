package main

import (
	"bufio"
	"context"
	"io"
	"testing"

	"github.com/xrdmon/xrdmon/internal/record"
)

// BenchmarkReplayWriter is replay's writer goroutine: one commit of 30,000
// records (a drain at the end of a capture makes commits this large) as
// GRACC JSON lines into a 1 MiB buffered writer.
//
//	go test ./cmd/xrdmon -run '^$' -bench ReplayWriter -benchmem
func BenchmarkReplayWriter(b *testing.B) {
	enc, err := record.Encoder(record.SchemaGRACC)
	if err != nil {
		b.Fatal(err)
	}
	recs := make([]record.Record, 30000)
	for i := range recs {
		recs[i] = record.Record{RecordID: "0123456789abcdef0123456789abcdef", Reason: "complete", ServerIP: "192.0.2.1",
			ServerHost: "xrd.example.org", Site: "SITE", User: "alice", ClientHost: "wn.example.org", Protocol: "xroot",
			DN: "/DC=org/CN=alice", VO: "cms", Path: "/store/data/Run2026A/EGamma/MINIAOD/381164/d434cf8998f3d10a.root",
			FileSize: 940178931, ReadBytes: 940178931, HasOps: true, ReadOps: 7173, ReadMin: 130547, ReadMax: 131072}
	}
	w := &replayWriter{enc: enc, w: bufio.NewWriterSize(io.Discard, 1<<20)}
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Append(context.Background(), recs, nil); err != nil {
			b.Fatal(err)
		}
	}
}
