package main

import (
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/api"
)

// TestMonitoredExport: what a server reports reaches /metrics as the
// monitored counters (by server, site and VO), and /api/v1/servers says
// when each of its streams was last heard.
func TestMonitoredExport(t *testing.T) {
	d := startDaemon(t, nil)
	s := &session{stod: 1700000000, sid: 77}
	pkts := s.files(20, int32(time.Now().Unix()))
	before := time.Now().Add(-time.Second)
	sendUDP(t, d.udp, pkts)
	series := `xrdmon_monitored_transfers_total{server="srv.example.org",site="TEST",vo="cms"}`
	d.waitMetric(t, series, 20)
	// 1000*(i+1) bytes per file, and 1 readv-free read each.
	if got, want := d.metric(t, `xrdmon_monitored_read_bytes_total{server="srv.example.org",site="TEST",vo="cms"}`), float64(1000*20*21/2); got != want {
		t.Errorf("read bytes %v, want %v", got, want)
	}
	if v := d.metric(t, `xrdmon_monitored_last_heard_timestamp_seconds{server="srv.example.org",stream="fstream"}`); v < float64(before.Unix()) {
		t.Errorf("f-stream last heard at %v, sent after %v", v, before.Unix())
	}
	var ans api.ServersAnswer
	d.getJSON(t, "/api/v1/servers", &ans)
	if len(ans.Servers) != 1 || ans.Silent != 0 {
		t.Fatalf("servers: %+v", ans)
	}
	sv := ans.Servers[0]
	if sv.ServerIP != "127.0.0.1" || sv.Host != "srv.example.org" || sv.Site != "TEST" || sv.Silent {
		t.Errorf("server: %+v", sv)
	}
	for _, stream := range []string{"map", "fstream"} {
		if h, ok := sv.Heard[stream]; !ok || h.Before(before.Truncate(time.Second)) {
			t.Errorf("%s heard %v (present %v), sent after %v", stream, h, ok, before)
		}
	}
	if _, ok := sv.Heard["gstream"]; ok {
		t.Error("a stream never sent is heard")
	}
}
