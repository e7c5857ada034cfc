package udp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xrdmon/xrdmon/internal/source"
)

// start runs a UDP source on cfg and returns it with its output channel.
func start(t testing.TB, cfg Options, reg prometheus.Registerer) (*UDP, chan *source.Batch) {
	t.Helper()
	u, err := New(cfg, nil, reg)
	if err != nil {
		if strings.Contains(err.Error(), "address not available") || strings.Contains(err.Error(), "cannot assign") {
			t.Skipf("address family not available: %v", err)
		}
		t.Fatal(err)
	}
	out := make(chan *source.Batch, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx, out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return u, out
}

// dial returns a UDP socket connected to the source from the given local
// host ("127.0.0.1" or "::1").
func dial(t testing.TB, host string, to netip.AddrPort) *net.UDPConn {
	t.Helper()
	dst := netip.AddrPortFrom(netip.MustParseAddr(host), to.Port())
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
	if err != nil {
		t.Skipf("cannot reach %s: %v", dst, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type got struct {
	data   string
	sender netip.AddrPort
}

// receive reads n packets from out (copying them) or fails after a timeout.
func receive(t *testing.T, out chan *source.Batch, n int) []got {
	t.Helper()
	var res []got
	timeout := time.After(10 * time.Second)
	for len(res) < n {
		select {
		case b := <-out:
			for _, p := range b.Packets {
				if p.Received.IsZero() {
					t.Error("zero Received")
				}
				res = append(res, got{string(p.Data), p.Sender})
			}
			b.Free()
		case <-timeout:
			t.Fatalf("received %d of %d packets", len(res), n)
		}
	}
	return res
}

func TestReceive(t *testing.T) {
	tests := []struct {
		name    string
		addr    string
		hosts   []string
		reuse   bool
		readers int
	}{
		{"ipv4 socket", "127.0.0.1:0", []string{"127.0.0.1"}, false, 2},
		{"ipv6 socket", "[::1]:0", []string{"::1"}, false, 1},
		{"dual stack", ":0", []string{"127.0.0.1", "::1"}, false, 2},
		{"dual stack reuseport", ":0", []string{"127.0.0.1", "::1"}, true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			u, out := start(t, Options{Addr: tt.addr, Readers: tt.readers, ReusePort: tt.reuse}, reg)
			const perSender = 500
			want := map[got]bool{}
			var conns []*net.UDPConn
			for _, h := range tt.hosts {
				c := dial(t, h, u.LocalAddr())
				conns = append(conns, c)
			}
			var bytes int
			for i := range perSender {
				for j, c := range conns {
					msg := fmt.Sprintf("%d-%d-%s", j, i, strings.Repeat("x", i%1400))
					if _, err := c.Write([]byte(msg)); err != nil {
						t.Fatal(err)
					}
					bytes += len(msg)
					want[got{msg, c.LocalAddr().(*net.UDPAddr).AddrPort()}] = true
				}
				if i%100 == 99 {
					time.Sleep(time.Millisecond) // let the readers keep up on a busy machine
				}
			}
			res := receive(t, out, len(want))
			for _, g := range res {
				if g.sender.Addr().Is4In6() {
					t.Fatalf("sender %v not unmapped", g.sender)
				}
				if !want[g] {
					t.Fatalf("unexpected or duplicate packet %.20q from %v", g.data, g.sender)
				}
				delete(want, g)
			}
			if n := testutil.ToFloat64(u.packets); n != float64(len(res)) {
				t.Errorf("packets counter %v, want %d", n, len(res))
			}
			if n := testutil.ToFloat64(u.bytes); n != float64(bytes) {
				t.Errorf("bytes counter %v, want %d", n, bytes)
			}
			if drops, err := u.KernelDrops(); err != nil || drops != 0 {
				t.Logf("kernel drops %d (%v)", drops, err)
			}
		})
	}
}

func TestFilterAndMap(t *testing.T) {
	reg := prometheus.NewRegistry()
	u, out := start(t, Options{Addr: ":0", Filter: source.FilterConfig{
		Allow: []string{"127.0.0.0/8"},
		Map:   map[string]string{"127.0.0.1": "192.0.2.55"},
	}}, reg)
	v4 := dial(t, "127.0.0.1", u.LocalAddr())
	v6 := dial(t, "::1", u.LocalAddr())
	for range 10 {
		if _, err := v6.Write([]byte("denied")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v4.Write([]byte("allowed")); err != nil {
		t.Fatal(err)
	}
	res := receive(t, out, 1)
	wantSender := netip.AddrPortFrom(netip.MustParseAddr("192.0.2.55"), v4.LocalAddr().(*net.UDPAddr).AddrPort().Port())
	if res[0].data != "allowed" || res[0].sender != wantSender {
		t.Fatalf("got %+v, want allowed from %v", res[0], wantSender)
	}
	// The denied packets may arrive after the allowed one: wait for the counter.
	deadline := time.Now().Add(5 * time.Second)
	for deniedValue(t, reg) != 10 {
		if time.Now().After(deadline) {
			t.Fatalf("denied counter = %v, want 10", deniedValue(t, reg))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func deniedValue(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "xrdmon_packets_denied_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == "udp" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

const procNetUDP = `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops            
  123: 00000000:26C2 00000000:0000 07 00000000:00000300 00:00000000 00000000     0        0 4242 2 0000000000000000 17         
  124: 0100007F:26C2 00000000:0000 07 00000000:00001000 00:00000000 00000000     0        0 4243 2 0000000000000000 5          
  125: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 99         
  126: 00000000:26C2 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 9999 2 0000000000000000 1000       
`

const procNetUDP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
   10: 00000000000000000000000000000000:26C2 00000000000000000000000000000000:0000 07 00000000:00005A00 00:00000000 00000000     0        0 5555 2 0000000000000000 3
`

func TestParseProcNetUDP(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		port   uint16
		inodes []uint64
		want   uint64
		queued uint64
	}{
		{"one socket", procNetUDP, 9922, []uint64{4242}, 17, 0x300},
		{"two sockets", procNetUDP, 9922, []uint64{4242, 4243}, 22, 0x1300},
		{"port must match too", procNetUDP, 53, []uint64{4243}, 0, 0},
		{"other inode", procNetUDP, 9922, []uint64{1}, 0, 0},
		{"udp6", procNetUDP6, 9922, []uint64{5555}, 3, 0x5A00},
		{"header only", "  sl local_address\n", 9922, []uint64{4242}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inodes := map[uint64]bool{}
			for _, i := range tt.inodes {
				inodes[i] = true
			}
			got, err := parseProcNetUDP(strings.NewReader(tt.text), tt.port, inodes)
			if err != nil || got.drops != tt.want || got.queued != tt.queued {
				t.Errorf("got %+v, %v; want %d drops, %d bytes queued", got, err, tt.want, tt.queued)
			}
		})
	}
}

// TestKernelDropsLive fills a tiny receive buffer that nobody reads and
// checks that the kernel's drop count for the socket is seen.
func TestKernelDropsLive(t *testing.T) {
	reg := prometheus.NewRegistry()
	u, err := New(Options{Addr: "127.0.0.1:0", ReceiveBuffer: 4096}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	c := dial(t, "127.0.0.1", u.LocalAddr())
	msg := make([]byte, 1000)
	for range 200 {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	drops, err := u.KernelDrops()
	if err != nil {
		t.Fatal(err)
	}
	if drops == 0 {
		t.Fatal("no kernel drops seen after overfilling a 4 KiB receive buffer")
	}
	if n, err := testutil.GatherAndCount(reg, "xrdmon_udp_kernel_drops_total"); err != nil || n != 1 {
		t.Fatalf("kernel drops metric: %d %v", n, err)
	}
	t.Logf("kernel drops: %d of 200", drops)
}

// TestSecondCollectorRefused: with SO_REUSEPORT the kernel would let a
// second collector bind the same port and split every server's packets
// between the two; the second one must fail at start instead, naming the
// cause.
func TestSecondCollectorRefused(t *testing.T) {
	first, _ := start(t, Options{Addr: "127.0.0.1:0", Readers: 2, ReusePort: true}, prometheus.NewRegistry())
	addr := first.LocalAddr().String()
	_, err := New(Options{Addr: addr, Readers: 2, ReusePort: true}, nil, prometheus.NewRegistry())
	if err == nil || !strings.Contains(err.Error(), "another collector") {
		t.Fatalf("second source on %s: err = %v, want a refusal naming another collector", addr, err)
	}
}

// TestKernelDropsEveryListener: with two listeners on one registry (the
// detailed and the summary port) the drops of the second one count too
// (issue 25: 932 drops on the summary port, the metric at 0).
func TestKernelDropsEveryListener(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, _ := start(t, Options{Addr: "127.0.0.1:0"}, reg)
	second, err := New(Options{Addr: "127.0.0.1:0", ReceiveBuffer: 4096}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	c := dial(t, "127.0.0.1", second.LocalAddr())
	msg := make([]byte, 1000)
	for range 200 {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	drops, err := second.KernelDrops()
	if err != nil || drops == 0 {
		t.Fatalf("no drops on the second listener: %v", err)
	}
	if n, _ := first.KernelDrops(); n != 0 {
		t.Fatalf("drops on the first listener: %d", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "xrdmon_udp_kernel_drops_total" {
			got = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if got < float64(drops) {
		t.Errorf("xrdmon_udp_kernel_drops_total = %v, the second listener dropped %d", got, drops)
	}
}

// TestBusyLive: datagrams left waiting in the kernel's queue make the
// source busy; once its readers have taken them, it is not.
func TestBusyLive(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel's receive queue is read from /proc/net/udp (Linux)")
	}
	u, err := New(Options{Addr: "127.0.0.1:0", ReceiveBuffer: 256 << 10}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if u.Busy() {
		t.Fatal("busy with an empty queue")
	}
	c := dial(t, "127.0.0.1", u.LocalAddr())
	msg := make([]byte, 1000)
	for range 100 {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(busyEvery + 20*time.Millisecond)
	if !u.Busy() {
		t.Fatal("not busy with 100 datagrams waiting in a 256 KiB buffer")
	}
	out := make(chan *source.Batch, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = u.Run(ctx, out) }()
	deadline := time.Now().Add(10 * time.Second)
	for u.Busy() {
		if time.Now().After(deadline) {
			t.Fatal("still busy after its reader took the queue")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(out) == 0 {
		t.Fatal("no batch read")
	}
}
