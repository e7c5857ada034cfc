package amqp

import (
	"errors"
	"net"
	"sync"
	"time"
)

// coalesceLimit bounds the bytes a coalescingConn holds before Write
// blocks: the backpressure of a slow broker.
const coalesceLimit = 1 << 20

// errConnClosed is returned by Write after Close.
var errConnClosed = errors.New("connection closed")

// coalescingConn is a net.Conn whose writes are gathered and written to
// the socket by one goroutine. amqp091-go flushes its buffer after every
// publish, which at one small message per record means one write(2) per
// record on both ends of the socket; here a Write only appends to a
// buffer, and the writer goroutine sends whatever accumulated while its
// previous write(2) was in progress. Nothing waits for more data: a lone
// write goes out at once, so heartbeats and handshakes are not delayed.
//
// A write error of the socket is returned by every later Write. Reads and
// the other methods go to the socket directly. Write and Close are safe
// for concurrent use.
type coalescingConn struct {
	net.Conn

	mu      sync.Mutex
	cond    *sync.Cond // signals data to write, room in buf, or close
	buf     []byte     // waiting to be written
	err     error      // sticky error of the socket
	closed  bool
	writing bool // the writer goroutine is in write(2)
	done    chan struct{}
}

func newCoalescingConn(c net.Conn) *coalescingConn {
	cc := &coalescingConn{Conn: c, done: make(chan struct{})}
	cc.cond = sync.NewCond(&cc.mu)
	go cc.writer()
	return cc
}

// Write queues p for the socket. It blocks only while coalesceLimit bytes
// are waiting.
func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && !c.closed && len(c.buf) > 0 && len(c.buf)+len(p) > coalesceLimit {
		c.cond.Wait()
	}
	if c.err != nil {
		return 0, c.err
	}
	if c.closed {
		return 0, errConnClosed
	}
	c.buf = append(c.buf, p...)
	c.cond.Broadcast()
	return len(p), nil
}

func (c *coalescingConn) writer() {
	defer close(c.done)
	var out []byte
	c.mu.Lock()
	for {
		for len(c.buf) == 0 && !c.closed && c.err == nil {
			c.cond.Wait()
		}
		if c.err != nil || len(c.buf) == 0 { // closed and drained
			c.mu.Unlock()
			return
		}
		out, c.buf = c.buf, out[:0]
		c.writing = true
		c.mu.Unlock()
		_, err := c.Conn.Write(out)
		c.mu.Lock()
		c.writing = false
		if err != nil && c.err == nil {
			c.err = err
		}
		c.cond.Broadcast()
	}
}

// Close writes what is queued (for at most a second), then closes the
// socket.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.Conn.Close()
	}
	c.closed = true
	pending := len(c.buf) > 0 || c.writing
	c.cond.Broadcast()
	c.mu.Unlock()
	if pending {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	}
	<-c.done
	return c.Conn.Close()
}
