package loadgen

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// TestUDP sends a run to a local socket and checks every datagram arrives,
// from its server's own address.
func TestUDP(t *testing.T) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_ = ln.SetReadBuffer(8 << 20)

	cfg := smallConfig()
	cfg.Servers, cfg.Duration, cfg.Count = 5, 0, 3000
	cfg.Restarts = 0
	cfg.Rate = 50000 // gentle enough for the receiver to keep up
	_, want := generate(t, cfg)

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
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	truth, err := g.Run(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if out.Sent != int64(len(want.Packets)) {
		t.Errorf("sent %d datagrams, want %d", out.Sent, len(want.Packets))
	}

	senderOf := map[netip.AddrPort]int{}
	ips := map[netip.Addr]bool{}
	for _, s := range truth.Servers {
		ap := netip.MustParseAddrPort(s.Sender)
		senderOf[ap] = s.Index
		ips[ap.Addr()] = true
	}
	if len(senderOf) != cfg.Servers {
		t.Fatalf("%d distinct sender addresses for %d servers", len(senderOf), cfg.Servers)
	}
	if runtime.GOOS == "linux" && len(ips) != cfg.Servers {
		t.Errorf("%d distinct sender IPs for %d servers", len(ips), cfg.Servers)
	}
	// Per server, the datagrams arrive in order and are the generated ones.
	checkPerServerOrder(t, want, got, senderOf)
}

// rx is a datagram received by a test's listener.
type rx struct {
	data   []byte
	sender netip.AddrPort
}

// checkPerServerOrder reads the datagrams of want from got and checks that
// each server's arrive in order, unchanged, from that server's sender.
func checkPerServerOrder(t *testing.T, want *Memory, got <-chan rx, senderOf map[netip.AddrPort]int) {
	t.Helper()
	perServer := map[int][][]byte{}
	for i, p := range want.Packets {
		perServer[want.Servers[i]] = append(perServer[want.Servers[i]], p.Data)
	}
	n := 0
	for p := range got {
		srv, ok := senderOf[p.sender]
		if !ok {
			t.Fatalf("datagram from unknown sender %s", p.sender)
		}
		q := perServer[srv]
		if len(q) == 0 || !bytes.Equal(q[0], p.data) {
			t.Fatalf("server %d: unexpected datagram", srv)
		}
		perServer[srv] = q[1:]
		if n++; n == len(want.Packets) {
			break
		}
	}
	if n != len(want.Packets) {
		t.Errorf("received %d datagrams, sent %d", n, len(want.Packets))
	}
}

// TestUDPRefused checks that a destination with no listener does not stop
// the run: refused datagrams are counted.
func TestUDPRefused(t *testing.T) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.LocalAddr().String()
	ln.Close()
	out, err := NewUDP(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cfg := smallConfig()
	cfg.Duration, cfg.Count, cfg.Restarts = 0, 500, 0
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Run(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	if out.Sent+out.Failed != 500 {
		t.Errorf("sent %d + failed %d, want 500", out.Sent, out.Failed)
	}
}
