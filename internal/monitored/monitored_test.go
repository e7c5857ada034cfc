package monitored

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/record"
)

func rec(host, site, vo string, read, write int64, reason record.Reason) record.Record {
	return record.Record{ServerIP: "192.0.2.1", ServerHost: host, Site: site, VO: vo, ReadBytes: read, ReadvBytes: 1, WriteBytes: write, Reason: reason}
}

// TestCounters: the counters a scrape shows equal the records and events
// observed, by server, site and VO.
func TestCounters(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe([][]record.Record{
		{rec("a.example.org", "S1", "cms", 100, 0, ""), rec("a.example.org", "S1", "cms", 50, 7, record.Timeout)},
		{rec("b.example.org", "S2", "atlas", 10, 0, record.Disconnect)},
	}, []record.Event{
		{Type: record.EventRedirect, ServerIP: "192.0.2.9", ServerHost: "redir.example.org", Site: "S1"},
		{Type: record.EventRedirect, ServerIP: "192.0.2.9", ServerHost: "redir.example.org", Site: "S1"},
		{Type: record.EventCacheFileClose, ServerIP: "192.0.2.8", Site: "S1",
			Data: []byte(`{"lfn":"/x\",\"b_hit\":99","remotes":["a\",\"b_miss\":5"],"b_hit":1000,"b_miss":24,"b_bypass":0}`)},
	}, nil)
	want := `
# HELP xrdmon_monitored_read_bytes_total Bytes read by clients with read() (vector reads are readv_bytes: docs/records.md), from the transfer records, by server, site and VO.
# TYPE xrdmon_monitored_read_bytes_total counter
xrdmon_monitored_read_bytes_total{server="a.example.org",site="S1",vo="cms"} 150
xrdmon_monitored_read_bytes_total{server="b.example.org",site="S2",vo="atlas"} 10
# HELP xrdmon_monitored_readv_bytes_total Bytes read by clients with readv() (vector reads), from the transfer records, by server, site and VO.
# TYPE xrdmon_monitored_readv_bytes_total counter
xrdmon_monitored_readv_bytes_total{server="a.example.org",site="S1",vo="cms"} 2
xrdmon_monitored_readv_bytes_total{server="b.example.org",site="S2",vo="atlas"} 1
# HELP xrdmon_monitored_partial_transfers_total Transfers ended as partial records, by server, site, VO and reason.
# TYPE xrdmon_monitored_partial_transfers_total counter
xrdmon_monitored_partial_transfers_total{reason="disconnect",server="b.example.org",site="S2",vo="atlas"} 1
xrdmon_monitored_partial_transfers_total{reason="timeout",server="a.example.org",site="S1",vo="cms"} 1
# HELP xrdmon_monitored_transfers_total Transfers (file accesses) ended, complete or partial, by server, site and VO.
# TYPE xrdmon_monitored_transfers_total counter
xrdmon_monitored_transfers_total{server="a.example.org",site="S1",vo="cms"} 2
xrdmon_monitored_transfers_total{server="b.example.org",site="S2",vo="atlas"} 1
# HELP xrdmon_monitored_redirects_total Redirects sent by redirectors (r-stream), by redirector and site.
# TYPE xrdmon_monitored_redirects_total counter
xrdmon_monitored_redirects_total{server="redir.example.org",site="S1"} 2
# HELP xrdmon_monitored_cache_hit_bytes_total Bytes served from XCache's disk (file closes of the g-stream), by cache and site.
# TYPE xrdmon_monitored_cache_hit_bytes_total counter
xrdmon_monitored_cache_hit_bytes_total{server="192.0.2.8",site="S1"} 1000
# HELP xrdmon_monitored_cache_miss_bytes_total Bytes XCache fetched from the remote (file closes of the g-stream), by cache and site.
# TYPE xrdmon_monitored_cache_miss_bytes_total counter
xrdmon_monitored_cache_miss_bytes_total{server="192.0.2.8",site="S1"} 24
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "xrdmon_monitored_read_bytes_total", "xrdmon_monitored_readv_bytes_total", "xrdmon_monitored_partial_transfers_total",
		"xrdmon_monitored_transfers_total", "xrdmon_monitored_redirects_total", "xrdmon_monitored_cache_hit_bytes_total", "xrdmon_monitored_cache_miss_bytes_total"); err != nil {
		t.Error(err)
	}
}

// TestCardinalityCap: VO strings are the clients' to choose; past the cap
// they are counted as "other", and nothing is lost.
func TestCardinalityCap(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, _ := New(reg, nil)
	var chunk []record.Record
	for i := range MaxVOs + 30 {
		chunk = append(chunk, rec("a", "S", fmt.Sprintf("vo%d", i), 1, 0, ""))
	}
	m.Observe([][]record.Record{chunk}, nil, nil)
	if n := testutil.CollectAndCount(m, "xrdmon_monitored_transfers_total"); n != MaxVOs+1 {
		t.Errorf("%d series, want %d and other", n, MaxVOs)
	}
	mfs, _ := reg.Gather()
	var total, other float64
	for _, mf := range mfs {
		if mf.GetName() != "xrdmon_monitored_transfers_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			total += s.GetCounter().GetValue()
			for _, l := range s.GetLabel() {
				if l.GetName() == "vo" && l.GetValue() == Other {
					other = s.GetCounter().GetValue()
				}
			}
		}
	}
	if total != float64(len(chunk)) || other != 30 {
		t.Errorf("total %v (want %d), other %v (want 30)", total, len(chunk), other)
	}
}

// TestSilentServer: a server heard every 10 s is silent once it has been
// quiet four of its intervals and at least MinSilence; one heard every
// 10 min is not silent after 5 min; the last-heard gauge is exported.
func TestSilentServer(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	now := base
	m, _ := New(nil, func() time.Time { return now })
	act := func(ip string, stream correlate.Stream, at time.Time) []correlate.ServerActivity {
		a := correlate.ServerActivity{ServerIP: ip, Site: "S"}
		a.Heard[stream] = at.Unix()
		return []correlate.ServerActivity{a}
	}
	for i := range 10 {
		m.Observe(nil, nil, act("192.0.2.1", correlate.StreamF, base.Add(time.Duration(i)*10*time.Second)))
	}
	for i := range 5 {
		at := base.Add(time.Duration(i) * 10 * time.Minute)
		m.Observe(nil, []record.Event{{Type: record.EventSummary, ServerIP: "192.0.2.2", ServerHost: "slow.example.org", Received: at}}, nil)
	}
	last := base.Add(40 * time.Minute) // the slow one's last summary
	now = last.Add(time.Minute)
	if s := m.Silent(); len(s) != 1 || s[0] != "192.0.2.1" {
		t.Errorf("silent: %v, want the fast server only", s)
	}
	now = last.Add(5 * time.Minute)
	if s := m.Silent(); len(s) != 1 {
		t.Errorf("silent after 5 min: %v", s)
	}
	now = last.Add(45 * time.Minute)
	if s := m.Silent(); len(s) != 2 {
		t.Errorf("silent after 45 min: %v, want both", s)
	}
	servers := m.Servers()
	if len(servers) != 2 || servers[1].Heard["summary"].Unix() != last.Unix() || servers[1].UsualIntervalSeconds != 600 {
		t.Errorf("servers: %+v", servers)
	}
	if n := testutil.CollectAndCount(m, "xrdmon_monitored_last_heard_timestamp_seconds"); n != 2 {
		t.Errorf("%d last-heard series, want 2", n)
	}
	if v := testutil.ToFloat64(gauge(t, m, "xrdmon_monitored_servers_silent")); v != 2 {
		t.Errorf("xrdmon_monitored_servers_silent %v", v)
	}
	// A day later they are no longer flagged.
	now = last.Add(25 * time.Hour)
	if s := m.Silent(); len(s) != 0 {
		t.Errorf("silent after a day: %v", s)
	}
}

// gauge returns the collector of m's family name alone, for ToFloat64.
func gauge(t *testing.T, m *Monitor, name string) prometheus.Collector {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	return prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		c := make(chan prometheus.Metric, 1024)
		go func() { m.Collect(c); close(c) }()
		for x := range c {
			if strings.Contains(x.Desc().String(), `"`+name+`"`) {
				ch <- x
			}
		}
	})
}

// TestFilesOpen: open files are the last commit's, summed over a server's
// incarnations.
func TestFilesOpen(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, _ := New(reg, nil)
	m.Observe(nil, nil, []correlate.ServerActivity{{ServerIP: "192.0.2.1", Site: "S", OpenFiles: 3}, {ServerIP: "192.0.2.1", Site: "S", OpenFiles: 2}})
	m.Observe(nil, nil, []correlate.ServerActivity{{ServerIP: "192.0.2.1", Site: "S", OpenFiles: 4, Lost: 2}, {ServerIP: "192.0.2.3", Site: "S", OpenFiles: 1}, {ServerIP: "192.0.2.1", Site: "S", Lost: 5}})
	for _, s := range m.Servers() {
		if s.ServerIP == "192.0.2.1" && s.LostPackets != 7 {
			t.Errorf("lost packets of 192.0.2.1: %d, want 7 (two incarnations)", s.LostPackets)
		}
	}
	want := `
# HELP xrdmon_monitored_files_open Files open now, by server and site (the correlator's open files).
# TYPE xrdmon_monitored_files_open gauge
xrdmon_monitored_files_open{server="192.0.2.1",site="S"} 4
xrdmon_monitored_files_open{server="192.0.2.3",site="S"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "xrdmon_monitored_files_open"); err != nil {
		t.Error(err)
	}
}

// TestRestoreServers: the servers heard survive a restart of the
// collector: a server silent before it is still flagged after it.
func TestRestoreServers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "servers.json")
	base := time.Unix(1_800_000_000, 0)
	now := base
	m, _ := New(nil, func() time.Time { return now })
	if err := m.Restore(path, nil); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	for i := range 10 {
		a := correlate.ServerActivity{ServerIP: "192.0.2.1", Host: "xrd1", Site: "S"}
		a.Heard[correlate.StreamF] = base.Add(time.Duration(i) * 10 * time.Second).Unix()
		m.Observe(nil, nil, []correlate.ServerActivity{a})
	}
	if err := m.file.Save(m.saved); err != nil {
		t.Fatal(err)
	}
	now = base.Add(time.Hour)
	m2, _ := New(nil, func() time.Time { return now })
	if err := m2.Restore(path, nil); err != nil {
		t.Fatal(err)
	}
	got := m2.Servers()
	if len(got) != 1 || !got[0].Silent || got[0].Host != "xrd1" || got[0].UsualIntervalSeconds != 10 ||
		got[0].Heard["fstream"].Unix() != base.Add(90*time.Second).Unix() {
		t.Errorf("restored: %+v", got)
	}
}

// TestHostileLabels: strings from packets that are not UTF-8 or are
// markup become label values a scrape accepts (never a panic).
func TestHostileLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, _ := New(reg, nil)
	m.Observe([][]record.Record{{rec("evil\xff\xfe.example.org", "S\xc3", "<script>\x00", 1, 0, record.Evicted)}}, nil,
		[]correlate.ServerActivity{{ServerIP: "192.0.2.66", Host: "h\xff", Site: "\xfe", OpenFiles: 1, Heard: [correlate.NumStreams]int64{1}}})
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m, "xrdmon_monitored_transfers_total"); n != 1 {
		t.Errorf("%d series", n)
	}
}
