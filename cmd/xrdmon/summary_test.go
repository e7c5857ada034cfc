package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/api"
	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/loadgen"
)

// summaryXML is an xrd.report summary of a server started at tos, with
// the given cumulative link.in and link.out, and n connections.
func summaryXML(src string, tod, tos, pid int64, in, out uint64, n int) []byte {
	return fmt.Appendf(nil, `<statistics tod="%d" ver="v5.7.1" src="%s" tos="%d" pgm="xrootd" ins="anon" pid="%d" site="T2_TEST">`+
		`<stats id="link"><num>%d</num><maxn>40</maxn><tot>%d</tot><in>%d</in><out>%d</out><ctime>1</ctime><tmo>0</tmo><stall>0</stall><sfps>0</sfps></stats>`+
		`<stats id="sgen"><as>1</as><et>0</et><toe>%d</toe></stats></statistics>`, tod, src, tos, pid, n, tod-tos, in, out, tod)
}

// Summaries sent over real UDP to the summary port and to the detailed
// port become, through the store, per-server series of increases and
// rates: across a server restart (the new counter is the increase since)
// and a 32-bit counter's wrap, every byte counted once.
func TestSummarySeries(t *testing.T) {
	sumAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t, "udp"))
	d := startDaemon(t, func(c *config.Config) { c.Listen.Summary = sumAddr })
	t0 := int64(1767225600) // 2026-01-01T00:00:00Z
	type sample struct {
		tod, tos, pid int64
		in, out       uint64
		n             int
	}
	// One a minute for 10 minutes; a restart at minute 5 (counters from
	// zero); link.in wraps at 2^32 at minute 8.
	var samples []sample
	in, out := uint64(0), uint64(0)
	wantIn, wantOut := 0.0, 0.0
	tos, pid := t0-3600, int64(100)
	for m := int64(0); m < 10; m++ {
		din, dout := uint64(1000*(m+1)), uint64(5000*(m+1))
		switch m {
		case 5:
			tos, pid, in, out = t0+m*60-10, 101, 0, 0
		case 8:
			in = math.MaxUint32 - 500 // the next add wraps
		}
		in, out = (in+din)%(1<<32), out+dout
		if m > 0 { // the first sample has no increase
			wantIn += float64(din)
			wantOut += float64(dout)
			if m == 5 {
				wantIn, wantOut = wantIn-float64(din)+float64(in), wantOut-float64(dout)+float64(out)
			}
			if m == 8 {
				wantIn += float64(math.MaxUint32-500) - float64(samples[m-1].in) // the jump set by hand counts too
			}
		}
		samples = append(samples, sample{t0 + m*60, tos, pid, in, out, int(m)})
	}
	for i, s := range samples {
		addr := sumAddr
		if i%2 == 1 {
			addr = d.udp // summaries to the detailed port are recognised too
		}
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(summaryXML("xrd9.example.org:1094", s.tod, s.tos, s.pid, s.in, s.out, s.n)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	url := fmt.Sprintf("http://%s/api/v1/summary?from=%d&to=%d&step=1h&name=link.in,link.out,link.num", d.http, t0-3600, t0+3600)
	var ans api.SummaryAnswer
	deadline := time.Now().Add(20 * time.Second)
	for {
		ans = api.SummaryAnswer{}
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", resp.Status, b)
		}
		if err := json.Unmarshal(b, &ans); err != nil {
			t.Fatal(err)
		}
		if len(ans.Servers) == 1 && ans.Servers[0].Samples == len(samples) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("summaries not stored: %s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := ans.Servers[0]
	if s.Src != "xrd9.example.org:1094" || s.ServerIP != "127.0.0.1" || s.Site != "T2_TEST" || s.Restarts != 1 || len(s.Series) != 3 {
		t.Fatalf("server %+v", s)
	}
	sum := func(sr api.SummarySeries) (delta, secs float64) {
		for _, p := range sr.Points {
			delta += *p.Delta
			secs += *p.Delta / *p.Rate
		}
		return delta, secs
	}
	if got, secs := sum(s.Series[0]); got != wantIn || secs != 540 {
		t.Errorf("link.in: %v over %v s, want %v over 540", got, secs, wantIn)
	}
	if got, _ := sum(s.Series[1]); got != wantOut {
		t.Errorf("link.out: %v, want %v", got, wantOut)
	}
	if g := s.Series[2]; g.Kind != "gauge" || len(g.Points) != 1 || *g.Points[0].Last != 9 || *g.Points[0].Max != 9 {
		t.Errorf("link.num: %+v", g)
	}
}

// loadgen's summaries, captured and imported, give per-server increases
// equal to its truth, across its servers' restarts.
func TestLoadgenSummaries(t *testing.T) {
	dir := t.TempDir()
	pcap, truthFile := dir+"/cap.pcap", dir+"/truth.json"
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"loadgen", "--pcap", pcap, "--truth", truthFile, "--servers", "4",
		"--duration", "30m", "--seed", "9", "--summary", "1m", "--restarts", "2"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("loadgen exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(truthFile)
	if err != nil {
		t.Fatal(err)
	}
	var truth loadgen.Truth
	if err := json.Unmarshal(b, &truth); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.FileInput.Paths, cfg.FileInput.Flush = []string{pcap}, true
	cfg.Listen.UDP, cfg.HTTP.Address, cfg.DNS.Enabled = "", "", false
	cfg.Store.Path, cfg.Store.Retention = dir+"/store", 0
	if err := collect(context.Background(), cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("collect: %v", err)
	}
	d := startDaemon(t, func(c *config.Config) { c.Store.Path, c.Store.Retention = cfg.Store.Path, 0 })
	from, to := truth.Start.Add(-time.Hour), truth.Start.Add(2*time.Hour)
	url := fmt.Sprintf("http://%s/api/v1/summary?from=%d&to=%d&step=1h&name=link.in,link.out,xrootd.ops.open", d.http, from.Unix(), to.Unix())
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ans api.SummaryAnswer
	if err := json.Unmarshal(body, &ans); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: %v %s", resp.Status, err, body)
	}
	got := map[string]api.ServerSummary{}
	for _, s := range ans.Servers {
		got[s.ServerIP] = s
	}
	n, restarts := 0, 0
	for _, st := range truth.Servers {
		if st.Summary == nil {
			continue
		}
		n++
		s, ok := got[st.IP]
		if !ok || s.Samples != st.Summary.Reports {
			t.Errorf("server %s: %d samples, truth %d reports", st.IP, s.Samples, st.Summary.Reports)
			continue
		}
		restarts += s.Restarts
		for _, sr := range s.Series {
			var sum float64
			for _, p := range sr.Points {
				sum += *p.Delta
			}
			if want := st.Summary.Increase[sr.Name]; sum != float64(want) {
				t.Errorf("server %s %s: increase %v, truth %d", st.IP, sr.Name, sum, want)
			}
		}
	}
	if n != 4 || len(ans.Servers) != 4 || restarts == 0 {
		t.Errorf("%d servers with summaries in the truth, %d answered, %d restarts seen", n, len(ans.Servers), restarts)
	}
}
