package udp

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// socketStats is what the kernel reports of our sockets in /proc/net/udp.
type socketStats struct {
	drops  uint64 // datagrams dropped because a receive queue was full
	queued uint64 // bytes waiting in the receive queues (rx_queue: the kernel's accounting, overhead included)
}

// parseProcNetUDP sums the drops and queued bytes of the sockets in
// /proc/net/udp{,6} format whose local port is port and whose inode is in
// inodes.
func parseProcNetUDP(f io.Reader, port uint16, inodes map[uint64]bool) (socketStats, error) {
	sc := bufio.NewScanner(f)
	var total socketStats
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		fields := strings.Fields(sc.Text())
		if len(fields) < 13 {
			continue
		}
		local := fields[1]
		colon := strings.LastIndexByte(local, ':')
		if colon < 0 {
			continue
		}
		p, err := strconv.ParseUint(local[colon+1:], 16, 16)
		if err != nil || uint16(p) != port {
			continue
		}
		ino, err := strconv.ParseUint(fields[9], 10, 64)
		if err != nil || !inodes[ino] {
			continue
		}
		drops, err := strconv.ParseUint(fields[12], 10, 64)
		if err != nil {
			return socketStats{}, fmt.Errorf("drops column %q: %w", fields[12], err)
		}
		_, rx, _ := strings.Cut(fields[4], ":") // tx_queue:rx_queue, hexadecimal
		queued, err := strconv.ParseUint(rx, 16, 64)
		if err != nil {
			return socketStats{}, fmt.Errorf("rx_queue column %q: %w", fields[4], err)
		}
		total.drops += drops
		total.queued += queued
	}
	return total, sc.Err()
}
