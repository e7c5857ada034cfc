package sinktest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy to a target address, for outage tests. It
// listens only between Start and Cut; Cut also closes every proxied
// connection, as a network outage or a restarted server would. Pause holds
// back the bytes the target sends (they are delivered at Resume, not
// dropped), so a client sees a server that has gone silent.
//
// Its methods may be called from any goroutine; Start and Cut alternate.
type Proxy struct {
	tb     testing.TB
	addr   string
	target string

	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	gate   chan struct{} // closed when not paused
	accept sync.WaitGroup
}

// NewProxy returns a proxy to target on a free loopback address. It is
// not listening yet (clients are refused until Start) and is cut at
// cleanup.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p := &Proxy{tb: tb, addr: freeAddr(tb), target: target, gate: make(chan struct{})}
	close(p.gate)
	tb.Cleanup(p.Cut)
	return p
}

// Addr is the host:port clients connect to.
func (p *Proxy) Addr() string { return p.addr }

// freeAddr returns a loopback address where nothing listens (now).
func freeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	a := ln.Addr().String()
	_ = ln.Close()
	return a
}

// Start listens on Addr and proxies every connection it accepts to a new
// connection to the target (a client whose target connection fails is
// closed). It retries the listen for up to a second, since the address may
// still be held just after Cut, then fails the test.
func (p *Proxy) Start() {
	p.tb.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		p.tb.Fatalf("proxy listen %s: %v", p.addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.accept.Add(1)
	go func() {
		defer p.accept.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close(); _ = c.Close() }()
			go func() { p.copyGated(c, s); _ = s.Close(); _ = c.Close() }()
		}
	}()
}

// copyGated copies target -> client, holding bytes while paused.
func (p *Proxy) copyGated(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			g := p.gate
			p.mu.Unlock()
			<-g
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Pause holds back what the target sends until Resume; what clients send
// still reaches the target. Pausing a paused proxy does nothing.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
}

// Resume delivers what Pause held back and lets later bytes through.
// Resuming a proxy that is not paused does nothing.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// Cut resumes the proxy, closes the listener and every proxied connection,
// and waits for the accept loop to end. Cutting a cut proxy does nothing;
// Start listens again.
func (p *Proxy) Cut() {
	p.Resume()
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.accept.Wait()
}
