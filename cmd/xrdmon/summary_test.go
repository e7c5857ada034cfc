package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/api"
	"github.com/xrdmon/xrdmon/internal/config"
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
