package amqp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
)

// TestCoalescingConn: bytes arrive whole and in order, Close sends what
// is queued, and a socket error is returned by later writes.
func TestCoalescingConn(t *testing.T) {
	a, b := net.Pipe()
	c := newCoalescingConn(a)
	got := make(chan []byte, 1)
	go func() { all, _ := io.ReadAll(b); got <- all }()
	var want bytes.Buffer
	for i := range 2000 {
		p := fmt.Appendf(nil, "frame %d;", i)
		want.Write(p)
		if n, err := c.Write(p); n != len(p) || err != nil {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if all := <-got; !bytes.Equal(all, want.Bytes()) {
		t.Fatalf("read %d bytes, want %d in order", len(all), want.Len())
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, errConnClosed) {
		t.Fatalf("write after close: %v, want errConnClosed", err)
	}

	a, b = net.Pipe()
	c = newCoalescingConn(a)
	b.Close()
	var err error
	sinktest.WaitFor(t, "a write error", 5*time.Second, func() bool {
		_, err = c.Write([]byte("x"))
		return err != nil
	})
	if !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("write error %v, want the socket's (io.ErrClosedPipe)", err)
	}
	c.Close()
}
