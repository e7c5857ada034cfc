package file

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/sourcetest"
)

// collect runs f.Read on r and returns copies of all packets received.
func collect(t *testing.T, f *File, r *bytes.Reader) []source.Packet {
	t.Helper()
	out := make(chan *source.Batch, 1000)
	if err := f.Read(context.Background(), r, out); err != nil {
		t.Fatalf("read: %v", err)
	}
	close(out)
	var got []source.Packet
	for b := range out {
		for _, p := range b.Packets {
			p.Data = bytes.Clone(p.Data)
			got = append(got, p)
		}
		if b.Ack != nil {
			t.Error("file batches must not have Ack")
		}
		b.Free()
	}
	return got
}

func newFile(t *testing.T, cfg Options) (*File, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	f, err := New(cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	return f, reg
}

func testPackets(n int) []source.Packet {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	senders := []netip.AddrPort{
		netip.MustParseAddrPort("192.0.2.7:40001"),
		netip.MustParseAddrPort("[2001:db8::7]:40002"),
	}
	var pkts []source.Packet
	for i := range n {
		size := 1 + i*97%3000
		if i == n-1 {
			size = 65000 // near the largest datagram
		}
		data := bytes.Repeat([]byte{byte(i)}, size)
		copy(data, fmt.Sprintf("pkt%d", i))
		pkts = append(pkts, source.Packet{Data: data, Sender: senders[i%2], Received: base.Add(time.Duration(i) * time.Millisecond)})
	}
	return pkts
}

func TestPcapRoundTrip(t *testing.T) {
	for _, format := range []Format{Pcap, PcapNG} {
		t.Run(fmt.Sprint("format=", format), func(t *testing.T) {
			want := testPackets(600)
			var buf bytes.Buffer
			pw, err := NewPcapWriter(&buf, netip.MustParseAddrPort("198.51.100.1:9930"), format)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range want {
				if err := pw.WritePacket(p); err != nil {
					t.Fatal(err)
				}
			}
			if err := pw.Flush(); err != nil {
				t.Fatal(err)
			}
			f, _ := newFile(t, Options{BatchSize: 64})
			got := collect(t, f, bytes.NewReader(buf.Bytes()))
			if len(got) != len(want) {
				t.Fatalf("read %d packets, want %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i].Data, want[i].Data) || got[i].Sender != want[i].Sender || !got[i].Received.Equal(want[i].Received) {
					t.Fatalf("packet %d: got %d bytes from %v at %v; want %d bytes from %v at %v", i,
						len(got[i].Data), got[i].Sender, got[i].Received, len(want[i].Data), want[i].Sender, want[i].Received)
				}
			}
			if n := testutil.ToFloat64(f.packets); n != float64(len(want)) {
				t.Errorf("packets counter %v", n)
			}
		})
	}
}

func TestWritePcapFile(t *testing.T) {
	want := testPackets(10)
	path := filepath.Join(t.TempDir(), "cap.pcap")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WritePcap(fh, netip.MustParseAddrPort("198.51.100.1:9930"), want); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	f, _ := newFile(t, Options{Paths: []string{path, path}})
	out := make(chan *source.Batch, 100)
	if err := f.Run(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	close(out)
	n := 0
	for b := range out {
		n += len(b.Packets)
		b.Free()
	}
	if n != 2*len(want) {
		t.Errorf("read %d packets from the file twice, want %d", n, 2*len(want))
	}
}

// TestLinkTypes writes captures of every supported link type with UDP
// datagrams and frames to skip, and checks what is read and what is counted.
func TestLinkTypes(t *testing.T) {
	src4 := netip.MustParseAddrPort("192.0.2.1:1000")
	src6 := netip.MustParseAddrPort("[2001:db8::1]:1001")
	dst4 := netip.MustParseAddrPort("192.0.2.2:9930")
	dst6 := netip.MustParseAddrPort("[2001:db8::2]:9930")
	links := []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2,
		layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, layers.LinkTypeNull, layers.LinkTypeLoop}
	for _, link := range links {
		t.Run(link.String(), func(t *testing.T) {
			var frames [][]byte
			add := func(b []byte, err error) []byte {
				if err != nil {
					t.Fatal(err)
				}
				frames = append(frames, b)
				return b
			}
			add(appendFrame(nil, link, src4, dst4, []byte("v4")))
			add(appendFrame(nil, link, src6, dst6, []byte("v6")))
			// Not UDP: protocol TCP.
			tcp := add(appendFrame(nil, link, src4, dst4, []byte("tcp-ish")))
			tcp[len(tcp)-len("tcp-ish")-8-20+9] = 6
			// IPv4 fragment: more-fragments flag.
			frag := add(appendFrame(nil, link, src4, dst4, []byte("frag")))
			frag[len(frag)-len("frag")-8-20+6] |= 0x20
			// IPv6 fragment: next header 44.
			frag6 := add(appendFrame(nil, link, src6, dst6, []byte("frag6")))
			frag6[len(frag6)-len("frag6")-8-40+6] = 44
			// Truncated by the snap length.
			cut := add(appendFrame(nil, link, src4, dst4, bytes.Repeat([]byte("x"), 100)))
			frames[len(frames)-1] = cut[:len(cut)-50]

			var buf bytes.Buffer
			w := pcapgo.NewWriterNanos(&buf)
			if err := w.WriteFileHeader(65535, link); err != nil {
				t.Fatal(err)
			}
			for _, fr := range frames {
				if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(fr), Length: len(fr)}, fr); err != nil {
					t.Fatal(err)
				}
			}
			f, _ := newFile(t, Options{})
			got := collect(t, f, bytes.NewReader(buf.Bytes()))
			if len(got) != 2 || string(got[0].Data) != "v4" || got[0].Sender != src4 || string(got[1].Data) != "v6" || got[1].Sender != src6 {
				t.Fatalf("got %+v", got)
			}
			for reason, want := range map[string]float64{"not_udp": 1, "ip_fragment": 2, "truncated": 1, "malformed": 0} {
				if n := testutil.ToFloat64(f.skipped.WithLabelValues(reason)); n != want {
					t.Errorf("skipped{%s} = %v, want %v", reason, n, want)
				}
			}
		})
	}
}

func TestEthernetVLAN(t *testing.T) {
	src := netip.MustParseAddrPort("192.0.2.1:1000")
	fr, err := appendFrame(nil, layers.LinkTypeEthernet, src, netip.MustParseAddrPort("192.0.2.2:9930"), []byte("vlan"))
	if err != nil {
		t.Fatal(err)
	}
	tagged := append(append(bytes.Clone(fr[:12]), 0x81, 0x00, 0x00, 0x64), fr[12:]...)
	data, from, err := udpPayload(layers.LinkTypeEthernet, tagged)
	if err != nil || string(data) != "vlan" || from != src {
		t.Fatalf("got %q %v %v", data, from, err)
	}
}

func TestUDPChecksums(t *testing.T) {
	// A frame's IPv4 header checksum verifies to zero.
	fr, _ := appendFrame(nil, layers.LinkTypeRaw, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2"), []byte("abc"))
	if c := ^fold(sum(0, fr[:20])); c != 0 {
		t.Errorf("IPv4 header checksum does not verify: %#x", c)
	}
	// The UDP checksum over pseudo-header and segment verifies too.
	s := sum(0, fr[12:20]) + 17 + uint32(binary.BigEndian.Uint16(fr[24:]))
	if c := ^fold(sum(s, fr[20:])); c != 0 {
		t.Errorf("UDP checksum does not verify: %#x", c)
	}
}

func TestRealPacketsJSONL(t *testing.T) {
	path := sourcetest.RealPacketsPath(t)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := newFile(t, Options{BatchSize: 4})
	got := collect(t, f, bytes.NewReader(raw))
	if len(got) != 11 {
		t.Fatalf("read %d packets, want 11", len(got))
	}
	v6 := 0
	for _, p := range got {
		if p.Sender.Addr().Is6() {
			v6++
		}
		if len(p.Data) < 8 || p.Received.IsZero() {
			t.Errorf("bad packet %+v", p)
		}
	}
	if v6 != 2 {
		t.Errorf("%d IPv6 senders, want 2", v6)
	}

	// The same through stdin ("-"), with a bad line and a filter that drops
	// the IPv6 senders.
	f, _ = newFile(t, Options{Paths: []string{"-"}, Filter: source.FilterConfig{Allow: []string{"127.0.0.0/8"}}})
	f.stdin = strings.NewReader("not json\n\n" + string(raw))
	out := make(chan *source.Batch, 100)
	if err := f.Run(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	close(out)
	n := 0
	for b := range out {
		n += len(b.Packets)
		b.Free()
	}
	if n != 9 {
		t.Errorf("stdin: %d packets passed the filter, want 9", n)
	}
	if c := sourcetest.SumLabels(f.badLines, source.ShovelerReasons); c != 1 {
		t.Errorf("invalid lines %v, want 1", c)
	}
}

func TestReadCancelled(t *testing.T) {
	var buf bytes.Buffer
	if err := WritePcap(&buf, netip.MustParseAddrPort("198.51.100.1:9930"), testPackets(100)); err != nil {
		t.Fatal(err)
	}
	f, _ := newFile(t, Options{BatchSize: 1})
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan *source.Batch) // nobody reads
	cancel()
	if err := f.Read(ctx, bytes.NewReader(buf.Bytes()), out); err == nil {
		t.Error("Read returned nil after cancellation with a full channel")
	}
}

// TestOversizedLineSkipped: a 10 MB JSON line (a datagram can be at most
// 65,535 bytes) is counted as oversized and skipped without being held in
// memory whole; the lines around it are read.
func TestOversizedLineSkipped(t *testing.T) {
	good := func(i int) string {
		return fmt.Sprintf(`{"remote":"192.0.2.1:1094","version":"t","data":"%s"}`+"\n",
			base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("datagram-%d", i))))
	}
	huge := `{"remote":"192.0.2.1:1094","version":"t","data":"` + strings.Repeat("QUFB", 10<<20/4) + `"}` + "\n"
	// Just over the cap when decoded: 65,536 bytes of datagram.
	over := fmt.Sprintf(`{"remote":"192.0.2.1:1094","version":"t","data":"%s"}`+"\n",
		base64.StdEncoding.EncodeToString(make([]byte, source.MaxDatagram+1)))
	in := good(1) + huge + good(2) + over + good(3)
	f, _ := newFile(t, Options{BatchSize: 4})
	r := bytes.NewReader([]byte(in))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	got := collect(t, f, r)
	runtime.ReadMemStats(&after)
	if len(got) != 3 {
		t.Fatalf("read %d packets, want the 3 good ones", len(got))
	}
	if n := testutil.ToFloat64(f.badLines.WithLabelValues("oversized")); n != 2 {
		t.Errorf("oversized lines counted %v, want 2", n)
	}
	// The 10 MB line was never copied whole (the input itself is 10 MB).
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 4<<20 {
		t.Errorf("reading allocated %d MB: the oversized line was buffered", grown>>20)
	}
}

// TestJSONLinesStampedWhenRead: a JSON line carries no time, so it is
// stamped with the time its bytes were read (one clock reading per read of
// the input, not per line): a line written to a slow stream after a pause
// has a later time than the one before it, and the packets and bytes read
// are counted once the batch is handed over.
func TestJSONLinesStampedWhenRead(t *testing.T) {
	line := func(i int) string {
		return fmt.Sprintf(`{"remote":"192.0.2.1:1094","version":"t","data":"%s"}`+"\n",
			base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("datagram-%d", i))))
	}
	const pause = 60 * time.Millisecond
	pr, pw := io.Pipe()
	f, _ := newFile(t, Options{BatchSize: 16, Filter: source.FilterConfig{Allow: []string{"192.0.2.0/24"}}})
	var countedWhileWaiting atomic.Bool
	go func() {
		_, _ = io.WriteString(pw, line(1)+line(2))
		time.Sleep(pause)
		// What was read is counted before the stream is waited for, even
		// when no packet of it was handed over (the filter drops this one).
		_, _ = io.WriteString(pw, strings.Replace(line(0), "192.0.2.1", "198.51.100.1", 1))
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if testutil.ToFloat64(f.packets) == 3 {
				countedWhileWaiting.Store(true)
				break
			}
		}
		_, _ = io.WriteString(pw, line(3))
		pw.Close()
	}()
	out := make(chan *source.Batch, 16)
	start := time.Now()
	if err := f.Read(context.Background(), pr, out); err != nil {
		t.Fatal(err)
	}
	close(out)
	var got []source.Packet
	for b := range out {
		got = append(got, b.Packets...)
	}
	if len(got) != 3 {
		t.Fatalf("read %d packets, want 3", len(got))
	}
	if got[0].Received.Before(start) || !got[1].Received.Equal(got[0].Received) {
		t.Errorf("lines read together stamped %v and %v (read from %v)", got[0].Received, got[1].Received, start)
	}
	if !countedWhileWaiting.Load() {
		t.Error("the lines read were not counted while the stream was waited for")
	}
	if d := got[2].Received.Sub(got[1].Received); d < pause {
		t.Errorf("the line written %v later is stamped %v later", pause, d)
	}
	if n := testutil.ToFloat64(f.packets); n != 4 {
		t.Errorf("packets counted %v, want 4", n)
	}
	if n := testutil.ToFloat64(f.bytes); n != float64(4*len("datagram-1")) {
		t.Errorf("bytes counted %v, want %d", n, 4*len("datagram-1"))
	}
}
