package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/xrdmon/xrdmon/internal/atomicfile"
)

// nullBatch is the most datagrams one recvmmsg returns to the null receiver.
const nullBatch = 256

// DefaultNullRcvbuf is the null receiver's default socket receive buffer,
// the collector's default.
const DefaultNullRcvbuf = 64 << 20

// NullReceiver is the minimal collector of the null target: it reads
// datagrams with recvmmsg and counts them, nothing else. It measures what
// the machine allows any collector.
type NullReceiver struct {
	conn    *net.UDPConn
	pc      *ipv4.PacketConn
	packets atomic.Int64
	bytes   atomic.Int64
	// Rcvbuf is the receive buffer the kernel granted.
	Rcvbuf int
}

// ListenNull opens the null receiver's socket on addr (host:port) with a
// receive buffer of rcvbuf bytes (SO_RCVBUFFORCE when permitted, as the
// collector does).
func ListenNull(addr string, rcvbuf int) (*NullReceiver, error) {
	conn, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("null receiver: listen %s: %w", addr, err)
	}
	uc := conn.(*net.UDPConn)
	r := &NullReceiver{conn: uc, pc: ipv4.NewPacketConn(uc)}
	if rcvbuf > 0 {
		rc, err := uc.SyscallConn()
		if err == nil {
			err = rc.Control(func(fd uintptr) {
				if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) != nil {
					_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
				}
				r.Rcvbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
			})
		}
		if err != nil {
			uc.Close()
			return nil, fmt.Errorf("null receiver: set receive buffer: %w", err)
		}
	}
	return r, nil
}

// Addr returns the local address.
func (r *NullReceiver) Addr() *net.UDPAddr { return r.conn.LocalAddr().(*net.UDPAddr) }

// Counts returns the datagrams and bytes received so far.
func (r *NullReceiver) Counts() (packets, bytes int64) { return r.packets.Load(), r.bytes.Load() }

// Run reads until ctx is done, then closes the socket.
func (r *NullReceiver) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { r.conn.Close() })
	defer stop()
	buf := make([]byte, nullBatch*65536)
	ms := make([]ipv4.Message, nullBatch)
	for i := range ms {
		ms[i].Buffers = [][]byte{buf[i*65536 : (i+1)*65536]}
	}
	for {
		n, err := r.pc.ReadBatch(ms, 0)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			r.conn.Close()
			return fmt.Errorf("null receiver: recvmmsg: %w", err)
		}
		var b int64
		for i := range n {
			b += int64(ms[i].N)
		}
		r.packets.Add(int64(n))
		r.bytes.Add(b)
	}
}

// RunNullReceiver runs the null target: it receives on addr until ctx is
// done and, when countFile is set, writes "packets bytes" to it every
// 100 ms and at the end (replaced atomically), for the bench to read.
func RunNullReceiver(ctx context.Context, addr, countFile string, rcvbuf int) error {
	r, err := ListenNull(addr, rcvbuf)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = r.Run(ctx) })
	write := func() error {
		if countFile == "" {
			return nil
		}
		p, b := r.Counts()
		if err := atomicfile.Write(countFile, fmt.Appendf(nil, "%d %d\n", p, b), 0o644); err != nil {
			return fmt.Errorf("null receiver: write count: %w", err)
		}
		return nil
	}
	tk := time.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tk.C:
			if err := write(); err != nil {
				return err
			}
		}
	}
	wg.Wait()
	return errors.Join(runErr, write())
}

// readNullCount reads a count file written by RunNullReceiver.
func readNullCount(path string) (packets int64, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	p, err := strconv.ParseInt(f[0], 10, 64)
	return p, err == nil
}

// NullTarget returns the null target: `exe bench nullrecv` on a loopback
// port, a receiver that only counts datagrams, to measure the machine's
// ceiling for any collector.
func NullTarget(exe string) Target {
	return Target{
		Command: []string{exe, "bench", "nullrecv", "--udp={udp_addr}", "--count-file=" + filepath.Join("{dir}", nullCountFile)},
		Null:    true,
	}
}

// nullCountFile is where the null target writes its count, in {dir}.
const nullCountFile = "received"

// nullSource is the record source of the null target: there are none.
type nullSource struct{}

func (nullSource) Poll(context.Context) ([]Observed, error) { return nil, nil }
func (nullSource) Close() error                             { return nil }
