//go:build !linux

package udp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/xrdmon/xrdmon/internal/source"
)

func setReusePort(syscall.RawConn) error {
	return errors.New("SO_REUSEPORT is only supported on Linux")
}

func setRcvbuf(c syscall.RawConn, size int) (int, bool, error) { return 0, false, nil }

// reader reads one datagram at a time (no recvmmsg outside Linux).
type reader struct {
	u    *UDP
	conn *net.UDPConn
	buf  []byte
}

func newReader(u *UDP, conn *net.UDPConn) (*reader, error) {
	_ = conn.SetReadBuffer(u.cfg.ReceiveBuffer)
	return &reader{u: u, conn: conn, buf: make([]byte, u.cfg.MaxDatagram)}, nil
}

func (r *reader) loop(ctx context.Context, out chan<- *source.Batch) error {
	for {
		n, from, err := r.conn.ReadFromUDPAddrPort(r.buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read: %w", err)
		}
		r.u.packets.Inc()
		r.u.bytes.Add(float64(n))
		r.u.batchSize.Observe(1)
		from, ok := r.u.filter.Accept(from)
		if !ok {
			continue
		}
		b := r.u.pool.Get()
		b.Append(r.buf[:n], from, time.Now())
		if !send(ctx, out, b) {
			return nil
		}
	}
}

func kernelStats([]*net.UDPConn, uint16) (socketStats, error) { return socketStats{}, nil }
