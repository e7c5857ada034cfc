package udp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xrdmon/xrdmon/internal/source"
)

func setReusePort(c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("set SO_REUSEPORT: %w", serr)
	}
	return nil
}

// setRcvbuf sets the receive buffer, with SO_RCVBUFFORCE when permitted,
// and returns the size the kernel reports afterwards.
func setRcvbuf(c syscall.RawConn, size int) (got int, forced bool, err error) {
	var serr error
	cerr := c.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) == nil {
			forced = true
		} else if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, size); serr != nil {
			return
		}
		got, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	})
	if cerr != nil {
		return 0, false, cerr
	}
	return got, forced, serr
}

// reader receives with recvmmsg into fixed buffers, then copies each
// datagram compactly into a pooled batch, so a batch does not pin 64 KiB
// per packet. It allocates nothing per read in steady state.
type reader struct {
	u     *UDP
	rc    syscall.RawConn
	bufs  []byte
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	hdrs  []unix.Mmsghdr

	recvFn func(fd uintptr) bool // r.recv, bound once
	n      int
	errno  syscall.Errno
}

func newReader(u *UDP, conn *net.UDPConn) (*reader, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("raw socket: %w", err)
	}
	m, size := u.cfg.BatchMessages, u.cfg.MaxDatagram
	r := &reader{
		u: u, rc: rc,
		bufs:  make([]byte, m*size),
		iovs:  make([]unix.Iovec, m),
		names: make([]unix.RawSockaddrInet6, m),
		hdrs:  make([]unix.Mmsghdr, m),
	}
	for i := range m {
		r.iovs[i].Base = &r.bufs[i*size]
		r.iovs[i].SetLen(size)
		r.hdrs[i].Hdr.Iov = &r.iovs[i]
		r.hdrs[i].Hdr.SetIovlen(1)
		r.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&r.names[i]))
	}
	r.recvFn = r.recv
	return r, nil
}

// recv is called by the runtime poller with the socket; false means "would
// block, wait for readability".
//
// The call is a raw syscall: MSG_DONTWAIT never blocks, so the scheduler
// need not be told. Through Syscall6, a read of 64 datagrams that outlasted
// a tick of the runtime's monitor thread (sysmon) could have its P retaken
// and handed to another thread, and each retake set sysmon back to
// waking every 20 µs (BENCHMARKS.md, the seventeenth check).
func (r *reader) recv(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(len(r.hdrs)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		r.n, r.errno = int(n), e
		return true
	}
}

func (r *reader) loop(ctx context.Context, out chan<- *source.Batch) error {
	for {
		b, err := r.readBatch(ctx)
		if err != nil || b == nil {
			return err
		}
		if b.Len() == 0 {
			b.Free()
			continue
		}
		if !send(ctx, out, b) {
			return nil
		}
	}
}

// readBatch waits for datagrams and returns those of one recvmmsg call that
// pass the filter. It returns nil, nil when the socket was closed.
func (r *reader) readBatch(ctx context.Context) (*source.PooledBatch, error) {
	size := r.u.cfg.MaxDatagram
	for i := range r.hdrs {
		r.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		r.hdrs[i].Hdr.Flags = 0
	}
	r.n, r.errno = 0, 0
	if err := r.rc.Read(r.recvFn); err != nil {
		if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("read: %w", err)
	}
	if r.errno != 0 {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("recvmmsg: %w", r.errno)
	}
	now := time.Now()
	b := r.u.pool.Get()
	total := 0
	for i := range r.n {
		h := &r.hdrs[i]
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			r.u.truncated.Inc()
			continue
		}
		data := r.bufs[i*size : i*size+int(h.Len)]
		total += len(data)
		from, ok := sockaddr(&r.names[i])
		if !ok {
			continue
		}
		if from, ok = r.u.filter.Accept(from); !ok {
			continue
		}
		b.Append(data, from, now)
	}
	r.u.packets.Add(float64(r.n))
	r.u.bytes.Add(float64(total))
	r.u.batchSize.Observe(float64(r.n))
	return b, nil
}

// sockaddr decodes a sockaddr_in or sockaddr_in6 written by the kernel.
func sockaddr(sa *unix.RawSockaddrInet6) (netip.AddrPort, bool) {
	switch sa.Family {
	case unix.AF_INET6:
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port), true
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port), true
	}
	return netip.AddrPort{}, false
}

// kernelStats sums the drops and rx_queue columns of /proc/net/udp and
// /proc/net/udp6 for the sockets of conns (matched by inode and local port).
func kernelStats(conns []*net.UDPConn, port uint16) (socketStats, error) {
	inodes := make(map[uint64]bool, len(conns))
	for _, c := range conns {
		rc, err := c.SyscallConn()
		if err != nil {
			return socketStats{}, fmt.Errorf("raw socket: %w", err)
		}
		var st unix.Stat_t
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil {
			return socketStats{}, fmt.Errorf("socket inode: %w", err)
		}
		if serr != nil {
			return socketStats{}, fmt.Errorf("socket inode: %w", serr)
		}
		inodes[st.Ino] = true
	}
	var total socketStats
	for _, name := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		f, err := os.Open(name)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return socketStats{}, fmt.Errorf("kernel socket stats: %w", err)
		}
		n, err := parseProcNetUDP(f, port, inodes)
		f.Close()
		if err != nil {
			return socketStats{}, fmt.Errorf("kernel socket stats: %s: %w", name, err)
		}
		total.drops += n.drops
		total.queued += n.queued
	}
	return total, nil
}
