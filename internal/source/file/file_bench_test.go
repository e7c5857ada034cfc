package file

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"testing"

	"github.com/xrdmon/xrdmon/internal/source"
)

// BenchmarkReadPcap measures reading a pcap capture into batches.
func BenchmarkReadPcap(b *testing.B) {
	var buf bytes.Buffer
	pkts := testPackets(1000)
	pkts = pkts[:len(pkts)-1]
	if err := WritePcap(&buf, netip.MustParseAddrPort("198.51.100.1:9930"), pkts); err != nil {
		b.Fatal(err)
	}
	benchRead(b, buf.Bytes(), len(pkts))
}

// BenchmarkReadJSONLines measures reading shoveler JSON lines (the bus
// capture replay reads) into batches: parsing, base64, stamping and
// counting each line.
//
//	go test -run '^$' -bench ReadJSONLines ./internal/source/file
func BenchmarkReadJSONLines(b *testing.B) {
	var buf bytes.Buffer
	pkts := testPackets(1000)
	for i := range pkts {
		data := pkts[i].Data[:min(len(pkts[i].Data), 400)] // a map or f-stream datagram's size
		fmt.Fprintf(&buf, `{"remote":"192.0.2.%d:1094","version":"v5.7.1","data":"%s"}`+"\n", i%16, base64.StdEncoding.EncodeToString(data))
	}
	benchRead(b, buf.Bytes(), len(pkts))
}

// benchRead reads input, which holds n packets, again and again, and
// reports packets/s and ns a packet.
func benchRead(b *testing.B, input []byte, n int) {
	f, err := New(Options{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	out := make(chan *source.Batch, 16)
	done := make(chan struct{})
	go func() {
		for bt := range out {
			bt.Free()
		}
		close(done)
	}()
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	for b.Loop() {
		if err := f.Read(context.Background(), bytes.NewReader(input), out); err != nil {
			b.Fatal(err)
		}
	}
	close(out)
	<-done
	packets := float64(n) * float64(b.N)
	b.ReportMetric(packets/b.Elapsed().Seconds(), "packets/s")
	b.ReportMetric(b.Elapsed().Seconds()*1e9/packets, "ns/packet")
}
