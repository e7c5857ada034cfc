//go:build crash

package crash

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
)

// TestHostileInputRoundTwoStalledReaders is finding #4 of issue 25 against
// the real binary: two clients ask a rollups answer of many megabytes and
// never read it. Before api WriteStall they held both query slots for the
// server's write timeout (a minute), and /status answered 503; now each is
// cut after 5 s of a write that does not progress, and /status answers 200
// again within seconds.
func TestHostileInputRoundTwoStalledReaders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	udpAddr := freeUDPAddr(t)
	c := startCollector(t, dir, filepath.Join(t.TempDir(), "collector.log"), "--listen.udp="+udpAddr, "--listen.rcvbuf=64MiB")

	// Many users over the last hour: a by=user rollup of one
	// minute steps has tens of thousands of points.
	cfg := udpLoadConfig(44)
	cfg.Rate = 6000
	cfg.Users = 5000
	cfg.Epoch = time.Now().Add(-57 * time.Minute)
	cfg.Duration = 50 * time.Minute
	truth := udpLoad(t, udpAddr, cfg)()
	waitStored(t, c, time.Minute)

	const query = "/api/v1/rollups?from=1h&by=user&step=1m"
	cl := &http.Client{Timeout: 30 * time.Second}
	resp, err := cl.Get("http://" + c.http + query)
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(whole) < 8<<20 {
		t.Fatalf("%s: %d, %d bytes (%d records sent): the answer must be large enough to fill the sockets: %.300s",
			query, resp.StatusCode, len(whole), len(truth.Records), whole)
	}

	// Two clients that never read.
	var stalled []net.Conn
	for range 2 {
		conn, err := net.Dial("tcp", c.http)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", query); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, conn)
	}
	stallStart := time.Now()
	time.Sleep(300 * time.Millisecond) // both take a slot

	// A normal client asks /status every 200 ms for 15 s.
	var ok, busy int
	var firstOK, lastBusy time.Duration
	for time.Since(stallStart) < 15*time.Second {
		resp, err := cl.Get("http://" + c.http + "/api/v1/status")
		if err != nil {
			t.Fatalf("/status: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			if ok == 0 {
				firstOK = time.Since(stallStart)
			}
			ok++
		case http.StatusServiceUnavailable:
			busy++
			lastBusy = time.Since(stallStart)
		default:
			t.Fatalf("/status: %d", resp.StatusCode)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if ok == 0 || firstOK > 10*time.Second || lastBusy > 10*time.Second {
		t.Errorf("/status while two clients never read: first 200 after %s, last 503 after %s (%d answered, %d refused); want answers again within 10 s",
			firstOK.Round(time.Millisecond), lastBusy.Round(time.Millisecond), ok, busy)
	}
	// The stalled clients were cut, not served their whole answer.
	var got []int64
	for _, conn := range stalled {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _ := io.Copy(io.Discard, conn)
		got = append(got, n)
		if n >= int64(len(whole)) {
			t.Errorf("a client that never read got %d bytes, the whole answer is %d: its writes were not bounded", n, len(whole))
		}
	}
	if !c.running() {
		t.Fatalf("collector died: %v\n%s", c.err, tail(c.log, 20))
	}
	t.Logf("RESULT hostile round two #4: rollups answer %d bytes; with two clients not reading it, /status answered %d times and refused %d (first 200 after %s, last 503 after %s); the stalled clients got %v bytes before being cut",
		len(whole), ok, busy, firstOK.Round(time.Millisecond), lastBusy.Round(time.Millisecond), got)
	if err := c.stop(10 * time.Second); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
}

// TestHostileInputRoundTwoCSV is finding #6 of issue 25 against the real
// binary: user names and paths that begin with spreadsheet formula
// characters and carry ESC and BEL bytes reach `xrdmon records` and
// `xrdmon report --format csv` neutralised: no cell begins with a formula
// character, no raw ESC or BEL byte is written.
func TestHostileInputRoundTwoCSV(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	udpAddr := freeUDPAddr(t)
	c := startCollector(t, dir, filepath.Join(t.TempDir(), "collector.log"), "--listen.udp="+udpAddr)

	users := []string{"=HYPERLINK(\"http://evil.example/\")\x1b[2J", "+SUM(1)\x07", "@SUM(2)\x1b]0;pwned\x07", "-1+cmd\x1b[31m"}
	paths := []string{"=HYPERLINK(\"http://evil.example/p\")\x1b[2J/a", "+cmd\x07/b", "@evil\x1b]0;pwned\x07/c", "/store/\x1b]0;pwned\x07\x1b[2J/d"}
	a := newAttacker(t, "127.0.0.74", udpAddr)
	for i := range users {
		dict := uint32(i + 1)
		a.send(a.mapRec(packet.CodeUser, dict, a.uid(users[i], 100+i, 66), nil))
		a.send(a.fstream(66, func(fb *packet.FStreamBuilder) {
			fb.Open(packet.FileOpen{FileID: dict, FileSize: 1000, HasLFN: true, User: dict, LFN: []byte(paths[i])})
			fb.Close(packet.FileClose{FileID: dict, Read: 1000})
		}))
	}
	if !waitFor(30*time.Second, 100*time.Millisecond, func() bool {
		m, err := c.metrics()
		return err == nil && m["xrdmon_store_records_appended_total"] >= float64(len(users))
	}) {
		t.Fatalf("the attacker's %d records were not stored in 30 s\n%s", len(users), tail(c.log, 20))
	}
	if err := c.stop(10 * time.Second); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}

	outputs := map[string][]string{
		"records": {"records", "--store.path=" + dir, "--since=24h", "--limit=0", "--format=csv"},
		"report":  {"report", "--store.path=" + dir, "--since=24h", "--by=user,dir", "--format=csv"},
	}
	summary := []string{}
	for name, args := range outputs {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(xrdmonBin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("xrdmon %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		r := result{out: stdout.String()}
		if i := strings.IndexAny(r.out, "\x1b\x07"); i >= 0 {
			t.Errorf("xrdmon %s --format csv writes a raw control byte %q: %q", name, r.out[i], r.out[max(0, i-40):min(len(r.out), i+40)])
		}
		rows, err := csv.NewReader(strings.NewReader(r.out)).ReadAll()
		if err != nil {
			t.Fatalf("xrdmon %s: not CSV: %v\n%s", name, err, r.out)
		}
		cells, attacker := 0, 0
		for _, row := range rows {
			hit := false
			for _, cell := range row {
				cells++
				if cell != "" && strings.ContainsRune("=+-@\t\r", rune(cell[0])) {
					t.Errorf("xrdmon %s --format csv: a cell begins with a formula character: %q", name, cell)
				}
				if strings.Contains(cell, "SUM(") || strings.Contains(cell, "HYPERLINK") || strings.Contains(cell, "pwned") {
					hit = true
				}
			}
			if hit {
				attacker++
			}
		}
		if attacker < len(users) {
			t.Errorf("xrdmon %s --format csv: %d rows of the attacker's, want %d:\n%s", name, attacker, len(users), r.out)
		}
		summary = append(summary, fmt.Sprintf("%s: %d rows of the attacker's, %d cells, %d bytes", name, attacker, cells, len(r.out)))
	}
	t.Logf("RESULT hostile round two #6: CSV with no formula cell and no raw ESC/BEL: %s", strings.Join(summary, "; "))
}

// TestHostileInputRoundTwoSummaryDrops is finding #7 of issue 25 against
// the real binary: datagrams the kernel drops on the summary listener
// (a second UDP socket) are counted in xrdmon_udp_kernel_drops_total and
// the health verdict is no longer "ok". Before, the second listener read
// the first socket's counter and drops there stayed invisible.
func TestHostileInputRoundTwoSummaryDrops(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	udpAddr, sumAddr := freeUDPAddr(t), freeUDPAddr(t)
	c := startCollector(t, dir, filepath.Join(t.TempDir(), "collector.log"),
		"--listen.udp="+udpAddr, "--listen.summary="+sumAddr, "--listen.rcvbuf=64KiB")
	if d := c.metric("xrdmon_udp_kernel_drops_total"); d != 0 {
		t.Fatalf("kernel drops before the flood: %v", d)
	}
	// Stopped, the collector reads nothing: the summary socket's small
	// buffer overflows.
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	flood := newAttacker(t, "127.0.0.75", sumAddr)
	d := summaryXML("flood.example.org", time.Now().Unix(), 4, 1, 3, "1")
	d = append(d, bytes.Repeat([]byte(" "), max(0, 1000-len(d)))...)
	const sent = 2000
	for range sent {
		flood.send(d)
	}
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var drops float64
	if !waitFor(15*time.Second, 200*time.Millisecond, func() bool {
		m, err := c.metrics()
		drops = m["xrdmon_udp_kernel_drops_total"]
		return err == nil && drops > 0
	}) {
		t.Errorf("%d datagrams sent to the stopped collector's summary socket (64 KiB buffer): xrdmon_udp_kernel_drops_total stays 0", sent)
	}
	// The health verdict sees the drops (it samples every 10 s).
	var verdict struct {
		KeepingUp struct {
			Status  string   `json:"status"`
			Reasons []string `json:"reasons"`
		} `json:"keeping_up"`
	}
	if !waitFor(35*time.Second, 500*time.Millisecond, func() bool {
		resp, err := http.Get("http://" + c.http + "/api/v1/health?from=5m")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&verdict) == nil && verdict.KeepingUp.Status != "ok"
	}) {
		t.Errorf("health verdict after %v kernel drops on the summary socket: %q %v, want not ok", drops, verdict.KeepingUp.Status, verdict.KeepingUp.Reasons)
	}
	if !c.running() {
		t.Fatalf("collector died: %v\n%s", c.err, tail(c.log, 20))
	}
	t.Logf("RESULT hostile round two #7: %d datagrams to the stopped summary socket, xrdmon_udp_kernel_drops_total %v, verdict %q (%s)",
		sent, drops, verdict.KeepingUp.Status, strings.Join(verdict.KeepingUp.Reasons, "; "))
	if err := c.stop(10 * time.Second); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
}
