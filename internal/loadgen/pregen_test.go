package loadgen

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// fakeBatch records what one server's socket was given, datagram by
// datagram.
type fakeBatch struct {
	mu    *sync.Mutex
	got   *[][]byte
	calls *int
}

func (f fakeBatch) WriteBatch(ms []ipv4.Message, _ int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.calls++
	for _, m := range ms {
		*f.got = append(*f.got, bytes.Clone(m.Buffers[0]))
	}
	return len(ms), nil
}

// fakeUDP returns a UDP output whose servers' sockets record their
// datagrams.
func fakeUDP(servers, workers int) (*UDP, [][][]byte) {
	var mu sync.Mutex
	got := make([][][]byte, servers)
	calls := 0
	u := &UDP{Workers: workers, msgs: make([][]ipv4.Message, servers)}
	for s := range servers {
		u.bw = append(u.bw, fakeBatch{mu: &mu, got: &got[s], calls: &calls})
	}
	return u, got
}

// TestPregeneratedSend checks the arena and the sender without sockets:
// every packet is sent once, one server's packets in order, datagrams
// crossing chunk boundaries intact, and the Sent hook replays the marks
// only once their packets are out.
func TestPregeneratedSend(t *testing.T) {
	const servers, n = 7, 1500
	for _, workers := range []int{1, 3} {
		u, got := fakeUDP(servers, workers)
		var sentN []int
		p := &Pregenerated{u: u, max: 1 << 30, sent: func(k int, _ time.Time) { sentN = append(sentN, k) }}
		want := make([][][]byte, servers)
		for i := range n {
			size := 100 + i%50
			if workers == 1 && i%10 != 0 {
				size = 55000 + i%50 // 74 MB in all: the arena needs two chunks
			}
			data := bytes.Repeat([]byte{byte(i), byte(i >> 8)}, size/2)
			srv := (i * 31 / 7) % servers
			if err := p.add(data, srv); err != nil {
				t.Fatal(err)
			}
			want[srv] = append(want[srv], data)
			if i%100 == 99 {
				p.mark(i/10, time.Time{}) // records 0..i/10-1 final after packet i
			}
		}
		if workers == 1 && len(p.chunks) < 2 {
			t.Fatalf("%d chunks: the test should cross a chunk boundary", len(p.chunks))
		}
		if p.Len() != n {
			t.Fatalf("Len = %d, want %d", p.Len(), n)
		}
		if err := p.Send(context.Background()); err != nil {
			t.Fatal(err)
		}
		if u.Sent != n || u.Failed != 0 {
			t.Errorf("workers %d: sent %d, failed %d; want %d, 0", workers, u.Sent, u.Failed, n)
		}
		for s := range servers {
			if len(got[s]) != len(want[s]) {
				t.Fatalf("workers %d, server %d: %d datagrams, want %d", workers, s, len(got[s]), len(want[s]))
			}
			for k := range want[s] {
				if !bytes.Equal(got[s][k], want[s][k]) {
					t.Fatalf("workers %d, server %d: datagram %d differs (out of order or corrupt)", workers, s, k)
				}
			}
		}
		// Rounds of 1024 packets: after the first round the marks of
		// packets 99..999 are out (last: 99 records), then all.
		if len(sentN) != 2 || sentN[0] != 99 || sentN[1] != 149 {
			t.Errorf("workers %d: Sent hook calls %v, want [99 149]", workers, sentN)
		}
	}
}

// TestPregenerateUDP pregenerates a run, sends it paced to a local socket
// and checks that the receiver gets the same datagrams Run produces, per
// server in order, and that the hooks see every record.
func TestPregenerateUDP(t *testing.T) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_ = ln.SetReadBuffer(8 << 20)

	cfg := smallConfig()
	cfg.Servers, cfg.Duration, cfg.Count, cfg.Restarts = 5, 0, 3000, 0
	cfg.Rate = 50000
	wantTruth, want := generate(t, cfg)

	got := make(chan rx, 4096)
	go func() {
		buf := make([]byte, 65536)
		for {
			_ = ln.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, from, err := ln.ReadFromUDPAddrPort(buf)
			if err != nil {
				close(got)
				return
			}
			got <- rx{bytes.Clone(buf[:n]), netip.AddrPortFrom(from.Addr().Unmap(), from.Port())}
		}
	}()

	out, err := NewUDP(ln.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var records int
	var sent []int
	g.SetHooks(Hooks{
		Record: func(int, *record.Record) { records++ },
		Sent: func(n int, _ time.Time) {
			mu.Lock()
			sent = append(sent, n)
			mu.Unlock()
		},
	})
	p, truth, err := g.Pregenerate(context.Background(), out, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != len(want.Packets) || p.Bytes() != wantTruth.Bytes || truth.Config.Rate != cfg.Rate {
		t.Fatalf("pregenerated %d packets, %d bytes (rate %g); want %d, %d (%g)",
			p.Len(), p.Bytes(), truth.Config.Rate, len(want.Packets), wantTruth.Bytes, cfg.Rate)
	}
	mu.Lock()
	if len(sent) != 0 {
		t.Errorf("Sent hook called %d times before sending", len(sent))
	}
	mu.Unlock()
	if records != len(wantTruth.Records) {
		t.Errorf("Record hook saw %d records, want %d", records, len(wantTruth.Records))
	}
	if err := p.Send(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out.Sent != int64(len(want.Packets)) || out.Failed != 0 {
		t.Errorf("sent %d, failed %d; want %d, 0", out.Sent, out.Failed, len(want.Packets))
	}
	mu.Lock()
	if len(sent) == 0 || sent[len(sent)-1] != records {
		t.Errorf("Sent hook: %v, want it to end with %d", sent, records)
	}
	mu.Unlock()

	senderOf := map[netip.AddrPort]int{}
	for _, s := range truth.Servers {
		senderOf[netip.MustParseAddrPort(s.Sender)] = s.Index
	}
	checkPerServerOrder(t, want, got, senderOf)
}

func TestPregenerateTooBig(t *testing.T) {
	cfg := smallConfig()
	cfg.Duration, cfg.Count, cfg.Restarts = 0, 400_000, 0
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := fakeUDP(cfg.Servers, 1)
	// Refused before anything is generated: the index alone is over.
	if _, _, err := g.Pregenerate(context.Background(), u, 1<<20); !errors.Is(err, ErrPregenerateTooBig) {
		t.Errorf("index over the bound: err %v, want ErrPregenerateTooBig", err)
	}
	// The datagrams over the bound: the first chunk already is.
	p := &Pregenerated{u: u, max: chunkSize / 2}
	if err := p.add([]byte("x"), 0); !errors.Is(err, ErrPregenerateTooBig) {
		t.Errorf("datagrams over the bound: err %v, want ErrPregenerateTooBig", err)
	}
}

// TestPregenerateMarks checks the exact marks: a record counts as sent
// only once the packet with its isClose is (never early), and the marks
// are per packet, not per 1024-packet batch.
func TestPregenerateMarks(t *testing.T) {
	out, err := NewUDP("127.0.0.1:9") // nothing is sent
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cfg := smallConfig()
	cfg.Duration, cfg.Count, cfg.Restarts = 0, 20000, 0
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.SetHooks(Hooks{Sent: func(int, time.Time) {}})
	p, truth, err := g.Pregenerate(context.Background(), out, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Where each record's close is: per (server IP, file id), the closes
	// in packet order, consumed by the records in order.
	ipOf := map[int]string{}
	for _, s := range truth.Servers {
		ipOf[s.Index] = netip.MustParseAddrPort(s.Sender).Addr().String()
	}
	type key struct {
		ip  string
		fid uint32
	}
	closes := map[key][]int{}
	for j := range p.Len() {
		data, srv := p.packet(j)
		if data[0] != packet.CodeFStream {
			continue
		}
		fs, err := packet.DecodeFStream(data)
		if err != nil {
			t.Fatal(err)
		}
		for it := fs.Records(); it.Next(); {
			if r := it.Rec(); r.Type == packet.RecClose {
				k := key{ipOf[srv], r.ID}
				closes[k] = append(closes[k], j)
			}
		}
	}
	at := make([]int, len(truth.Records)) // packet index of each record's close; -1: none
	for i, r := range truth.Records {
		at[i] = -1
		k := key{r.ServerIP, r.FileID}
		if q := closes[k]; r.Reason == record.Complete && len(q) > 0 {
			at[i], closes[k] = q[0], q[1:]
		}
	}
	if len(p.marks) < 10*(p.Len()/1024+1) {
		t.Errorf("%d marks for %d packets: not finer than the generator's batches", len(p.marks), p.Len())
	}
	reach := 0
	m := 0
	for i := range at {
		reach = max(reach, at[i]+1)
		for m < len(p.marks) && p.marks[m].final <= i {
			m++
		}
		if m == len(p.marks) {
			t.Fatalf("record %d is in no mark", i)
		}
		if p.marks[m].pkts < reach {
			t.Fatalf("record %d counts as sent after %d packets, its close is packet %d", i, p.marks[m].pkts, reach-1)
		}
	}
	if last := p.marks[len(p.marks)-1]; last.final != len(truth.Records) {
		t.Errorf("last mark: %d records, want %d", last.final, len(truth.Records))
	}
}
