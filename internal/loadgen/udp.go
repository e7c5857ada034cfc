package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// udpBatch is the most datagrams handed to one sendmmsg.
const udpBatch = 256

type batchWriter interface {
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

// UDP is an Output sending each simulated server's packets from its own
// socket. Towards a loopback collector on Linux each server binds its own
// loopback address (127.0.0.2, 127.0.0.3, ...: all of 127.0.0.0/8 is
// loopback), so the collector sees one sender IP per server as in
// production; elsewhere, or when binding fails, the servers share the
// host's address and differ by source port. Datagrams are sent in batches
// with sendmmsg where the platform has it.
type UDP struct {
	dst   netip.AddrPort
	conns []*net.UDPConn
	bw    []batchWriter
	msgs  [][]ipv4.Message
	dirty []int
	stats []udpStats
	// Workers is the most goroutines sending at once (default GOMAXPROCS).
	Workers int
	// Sent counts datagrams sent; Failed those the kernel refused (for
	// example ECONNREFUSED while nothing listens on the destination).
	// Both are updated at the end of each Write.
	Sent, Failed int64
	// sentSoFar is Sent, readable while Write runs (SentSoFar).
	sentSoFar atomic.Int64
}

// SentSoFar returns the datagrams sent by the Writes that have ended; safe
// to call while another goroutine writes (a progress display).
func (u *UDP) SentSoFar() int64 { return u.sentSoFar.Load() }

// NewUDP returns an output sending to dst (host:port; the host must be an
// IP address).
func NewUDP(dst string) (*UDP, error) {
	ap, err := netip.ParseAddrPort(dst)
	if err != nil {
		return nil, fmt.Errorf("udp destination %q: %w", dst, err)
	}
	w := runtime.GOMAXPROCS(0)
	return &UDP{dst: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), Workers: w, stats: make([]udpStats, max(w, 1))}, nil
}

// Bind opens one connected socket per server and returns their local
// addresses.
func (u *UDP) Bind(senders []netip.AddrPort) ([]netip.AddrPort, error) {
	raddr := net.UDPAddrFromAddrPort(u.dst)
	ownAddr := u.dst.Addr().IsLoopback() && u.dst.Addr().Is4() && runtime.GOOS == "linux"
	out := make([]netip.AddrPort, len(senders))
	u.msgs = make([][]ipv4.Message, len(senders))
	for i, s := range senders {
		var conn *net.UDPConn
		var err error
		if ownAddr && s.Addr().Is4() && s.Addr().IsLoopback() {
			conn, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(s.Addr(), 0)), raddr)
		}
		if conn == nil {
			conn, err = net.DialUDP("udp", nil, raddr)
		}
		if err != nil {
			u.Close()
			return nil, fmt.Errorf("udp socket for server %d: %w", i, err)
		}
		_ = conn.SetWriteBuffer(4 << 20)
		u.conns = append(u.conns, conn)
		if u.dst.Addr().Is4() {
			u.bw = append(u.bw, ipv4.NewPacketConn(conn))
		} else {
			u.bw = append(u.bw, ipv6.NewPacketConn(conn))
		}
		la := conn.LocalAddr().(*net.UDPAddr).AddrPort()
		out[i] = netip.AddrPortFrom(la.Addr().Unmap(), la.Port())
	}
	return out, nil
}

// Write implements Output. The batch is grouped by server; the servers'
// groups are then sent by up to Workers goroutines at once (one server's
// datagrams always by one goroutine, in order), since on loopback the
// kernel's work per datagram is most of the cost.
func (u *UDP) Write(_ context.Context, b []Packet) error {
	for i := range b {
		if u.queue(b[i].Server, b[i].Data) {
			u.dirty = append(u.dirty, b[i].Server)
		}
	}
	workers := min(u.Workers, len(u.dirty))
	u.growStats(workers)
	if workers <= 1 {
		for _, s := range u.dirty {
			if err := u.send(s, &u.stats[0]); err != nil {
				return err
			}
		}
	} else {
		var wg sync.WaitGroup
		errs := make([]error, workers)
		for w := range workers {
			wg.Go(func() {
				for k := w; k < len(u.dirty); k += workers {
					if err := u.send(u.dirty[k], &u.stats[w]); err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	u.dirty = u.dirty[:0]
	u.tally()
	return nil
}

// queue appends a datagram to server s's next sendmmsg and reports whether
// it is the first one queued for s.
func (u *UDP) queue(s int, data []byte) bool {
	ms := u.msgs[s]
	n := len(ms)
	if n < cap(ms) {
		ms = ms[:n+1]
	} else {
		ms = append(ms, ipv4.Message{})
	}
	if ms[n].Buffers == nil {
		ms[n].Buffers = make([][]byte, 1)
	}
	ms[n].Buffers[0] = data
	u.msgs[s] = ms
	return n == 0
}

// growStats makes room for the counts of n workers.
func (u *UDP) growStats(n int) {
	if n > len(u.stats) {
		u.stats = append(u.stats, make([]udpStats, n-len(u.stats))...)
	}
}

// tally sums the workers' counts into Sent and Failed.
func (u *UDP) tally() {
	u.Sent, u.Failed = 0, 0
	for i := range u.stats {
		u.Sent += u.stats[i].sent
		u.Failed += u.stats[i].failed
	}
	u.sentSoFar.Store(u.Sent)
}

type udpStats struct {
	sent, failed int64
	_            [48]byte // own cache line
}

func (u *UDP) send(s int, st *udpStats) error {
	ms := u.msgs[s]
	for len(ms) > 0 {
		n, err := u.bw[s].WriteBatch(ms[:min(len(ms), udpBatch)], 0)
		if err != nil {
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("udp send: %w", err)
			}
			st.failed++ // the refused datagram is dropped, as UDP would
			if n <= 0 {
				n = 1
			}
		} else {
			st.sent += int64(n)
		}
		ms = ms[n:]
	}
	for i := range u.msgs[s] {
		u.msgs[s][i].Buffers[0] = nil
	}
	u.msgs[s] = u.msgs[s][:0]
	return nil
}

// Close implements Output.
func (u *UDP) Close() error {
	var errs []error
	for _, c := range u.conns {
		errs = append(errs, c.Close())
	}
	u.conns, u.bw = nil, nil
	return errors.Join(errs...)
}
