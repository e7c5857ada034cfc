package udp

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// parseProcNetUDP sums the drops of the sockets in /proc/net/udp{,6} format
// whose local port is port and whose inode is in inodes.
func parseProcNetUDP(f io.Reader, port uint16, inodes map[uint64]bool) (uint64, error) {
	sc := bufio.NewScanner(f)
	var total uint64
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
			return 0, fmt.Errorf("drops column %q: %w", fields[12], err)
		}
		total += drops
	}
	return total, sc.Err()
}
