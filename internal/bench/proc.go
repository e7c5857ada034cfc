package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat; it is
// 100 on every Linux platform Go supports.
const clockTicks = 100

// procSample is the resources of a process tree at one moment.
type procSample struct {
	CPU     time.Duration // user + system time of the process and its live descendants
	PeakRSS int64         // sum of VmHWM (bytes) over the same processes
}

// sampleTree reads /proc for pid and its descendants.
func sampleTree(pid int) (procSample, error) {
	var s procSample
	pids := append([]int{pid}, descendants(pid)...)
	for i, p := range pids {
		cpu, err := procCPU(p)
		if err != nil {
			if i == 0 {
				return s, err
			}
			continue // a child that has exited
		}
		s.CPU += cpu
		if hwm, err := procHWM(p); err == nil {
			s.PeakRSS += hwm
		}
	}
	return s, nil
}

// procCPU returns utime+stime of pid from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read process stat: %w", err)
	}
	return parseStatCPU(b)
}

// parseStatCPU extracts utime and stime (fields 14 and 15) from a
// /proc/PID/stat line; the command name (field 2) may contain spaces, so
// fields are counted after its closing parenthesis.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse process stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("parse process stat: %d fields", len(f)+2)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse process stat: bad utime %q or stime %q", f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// statPPID returns field 4 (ppid) of a /proc/PID/stat line.
func statPPID(b []byte) int {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return -1
	}
	p, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return p
}

// descendants lists the live descendants of pid.
func descendants(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	children := make(map[int][]int)
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		p, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		pp := statPPID(b)
		children[pp] = append(children[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// procHWM returns the peak resident set (VmHWM) of pid in bytes.
func procHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read process status: %w", err)
	}
	return parseHWM(b)
}

func parseHWM(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmHWM %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("parse process status: no VmHWM")
}

// udpSocket is what /proc/net/udp says about the sockets bound to a port.
type udpSocket struct {
	Bound bool  // some socket is bound to the port
	Drops int64 // datagrams dropped on their receive queues
}

// udpPortStats sums the drops of every UDP socket (IPv4 and IPv6) bound to
// local port.
func udpPortStats(port int) udpSocket {
	var s udpSocket
	for _, f := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		t := parseProcNetUDP(b, port)
		s.Bound = s.Bound || t.Bound
		s.Drops += t.Drops
	}
	return s
}

// parseProcNetUDP reads one /proc/net/udp{,6} table: local_address is
// field 2 (hex ip:port), drops the last field.
func parseProcNetUDP(b []byte, port int) udpSocket {
	var s udpSocket
	want := fmt.Sprintf(":%04X", port)
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 13 {
			continue
		}
		if !strings.HasSuffix(f[1], want) {
			continue
		}
		s.Bound = true
		if d, err := strconv.ParseInt(f[len(f)-1], 10, 64); err == nil {
			s.Drops += d
		}
	}
	return s
}

// selfCPU returns this process's CPU time (user + system) so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
