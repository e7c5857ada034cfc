//go:build crash

package crash

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// summaryXML is an xrd.report summary of server src at tod whose stats
// ids are idLen bytes long, each followed by perID one-digit values, and a
// link.out counter of value out.
func summaryXML(src string, tod int64, idLen, ids, perID int, out string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `<statistics tod="%d" ver="v5.8.0" src="%s:1094" tos="%d" pgm="xrootd" ins="anon" pid="7">`, tod, src, time.Now().Unix()-3600)
	fmt.Fprintf(&b, `<stats id="link"><num>1</num><out>%s</out></stats>`, out)
	for i := range ids {
		fmt.Fprintf(&b, `<stats id="%s%d">`, strings.Repeat("s", idLen), i)
		for j := range perID {
			fmt.Fprintf(&b, "<v%d>1</v%d>", j, j)
		}
		b.WriteString("</stats>")
	}
	b.WriteString("</statistics>")
	return []byte(b.String())
}

// TestHostileInputRoundTwo runs the attacks of issue 25 that reach the
// real binary from the network: summaries that would blow up into events
// twenty times their size, summaries from 2261 and past what int64
// nanoseconds hold, counters of ±1.7e308 that made /summary answer an empty
// 200, a Host name rebound to the collector, and a Range header of
// thousands of ranges on the dashboard's script.
func TestHostileInputRoundTwo(t *testing.T) {
	dir := t.TempDir()
	udpAddr := freeUDPAddr(t)
	c := startCollector(t, dir, filepath.Join(t.TempDir(), "collector.log"), "--listen.udp="+udpAddr, "--listen.rcvbuf=64MiB")
	now := time.Now().Unix()

	// 300 summaries of ~34 KB naming 2,700 values through 240-byte ids:
	// rejected (they would be 678 KB events), counted.
	const bombs = 300
	bomb := newAttacker(t, "127.0.0.71", udpAddr)
	for i := range bombs {
		d := summaryXML("bomb.example.org", now-int64(i), 240, 12, 225, "1")
		if i == 0 {
			t.Logf("a summary bomb: %d bytes", len(d))
		}
		bomb.send(d)
	}
	// Summaries from the future and past every int64 nanosecond: stored,
	// indexed within the window around their receive time, counted.
	future := newAttacker(t, "127.0.0.72", udpAddr)
	for i := range 50 {
		future.send(summaryXML("future.example.org", 9_183_000_000+int64(i), 4, 1, 3, "1")) // 2261
	}
	future.send(summaryXML("future.example.org", 9223372036854775807, 4, 1, 3, "1"))
	// Counters of ±1.7e308: their increase overflows.
	inf := newAttacker(t, "127.0.0.73", udpAddr)
	inf.send(summaryXML("inf.example.org", now-120, 4, 1, 3, "-1.7e308"))
	inf.send(summaryXML("inf.example.org", now-60, 4, 1, 3, "1.7e308"))

	if !waitFor(time.Minute, 100*time.Millisecond, func() bool {
		m, err := c.metrics()
		return err == nil && m[`xrdmon_packets_rejected_total{reason="summary_too_large"}`] >= bombs && m["xrdmon_store_times_clamped_total"] >= 51
	}) {
		m, _ := c.metrics()
		t.Errorf("summary bombs rejected: %v of %d; times clamped: %v of 51 (kernel drops %v)",
			m[`xrdmon_packets_rejected_total{reason="summary_too_large"}`], bombs, m["xrdmon_store_times_clamped_total"], m["xrdmon_udp_kernel_drops_total"])
	}

	get := func(path string, hdr ...string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+c.http+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
			}
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	// /summary answers, every server in it, the overflowed increase left out.
	code, body := get("/api/v1/summary?from=1h&name=link.out,link.num")
	var sum struct {
		Servers []struct {
			Src string `json:"src"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(body, &sum); code != 200 || err != nil || len(sum.Servers) == 0 {
		t.Errorf("/summary after ±1.7e308 counters: %d, %v: %.300s", code, err, body)
	}
	// Events keep the times they claimed, in JSON every output can write.
	code, body = get("/api/v1/events?type=summary&limit=1000")
	if code != 200 || !strings.Contains(string(body), `"time":"2260-`) || !strings.Contains(string(body), `"time":"9999-12-31T23:59:59Z"`) {
		t.Errorf("/events: %d: the future summaries are not listed with their times: %.600s", code, body)
	}
	// DNS rebinding: without a token only local names are served.
	if code, _ := get("/api/v1/records?limit=1", "Host", "attacker.example:9939"); code != http.StatusMisdirectedRequest {
		t.Errorf("/records with Host attacker.example: %d, want 421", code)
	}
	if code, _ := get("/api/v1/records?limit=1", "Host", "localhost:9939"); code != 200 {
		t.Errorf("/records with Host localhost: %d", code)
	}
	// A Range header of 20,000 ranges (GO-2026-6609: 7.7 MB from a 51 KB
	// file, 1.1-1.6 CPU-s, before go1.26.9).
	var rng strings.Builder
	rng.WriteString("bytes=0-0")
	for i := 1; i < 20_000; i++ {
		fmt.Fprintf(&rng, ",%d-%d", i%50_000, i%50_000)
	}
	_, whole := get("/ui/vendor/uPlot.iife.min.js")
	code, body = get("/ui/vendor/uPlot.iife.min.js", "Range", rng.String())
	if len(body) > 2*len(whole) {
		t.Errorf("a Range of 20,000 ranges: %d, %d bytes from a %d-byte file (is the toolchain older than go1.26.9? build through make)", code, len(body), len(whole))
	}

	if !c.running() {
		t.Fatalf("collector died: %v\n%s", c.err, tail(c.log, 20))
	}
	peak := hwm(t, c)
	if peak > hostileRSSBound {
		t.Errorf("peak RSS %d MB, bound %d MB", peak>>20, hostileRSSBound>>20)
	}
	m, _ := c.metrics()
	t.Logf("RESULT hostile round two: %v summary bombs rejected, %v times clamped, peak RSS %d MB, Range answer %d bytes (file %d)",
		m[`xrdmon_packets_rejected_total{reason="summary_too_large"}`], m["xrdmon_store_times_clamped_total"], peak>>20, len(body), len(whole))
	if err := c.stop(10 * time.Second); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
}
