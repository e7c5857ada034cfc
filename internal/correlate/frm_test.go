package correlate

import (
	"encoding/json"
	"testing"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// TestFRMEvents: an FRM daemon's purge and transfer records become events
// with their names, sizes, times and operation, in the native JSON.
func TestFRMEvents(t *testing.T) {
	s := newSrv("192.0.2.80:1094", t0, 5)
	uid := packet.AppendUserID(nil, packet.UserID{User: []byte("frm_purged"), PID: []byte("77"), SID: []byte("5"), Host: []byte("dtn.example.org")})
	var f feed
	f.send(s, 1, packet.AppendMap(nil, s.hdr('p', &s.mainSeq), 0, join(uid, packet.AppendPurge(nil, packet.Purge{
		Name: []byte("/store/old.root"), Tod: int64(t0) + 1, Size: 1 << 30, Atime: 100, Ctime: 90, Mtime: 95}))))
	f.send(s, 2, packet.AppendMap(nil, s.hdr('x', &s.mainSeq), 0, join(uid, packet.AppendFRMXfer(nil, packet.FRMXfer{
		LFN: []byte("/store/tape/\"a\".root"), Tod: int64(t0) + 2, Size: 5 << 30, QueueTime: 30, XferTime: 600, Op: packet.XferStage}))))
	_, evs, st := f.runTwice(t, DefaultConfig())
	if len(evs) != 2 || st.FRMRecords != 2 || st.TotalRejected() != 0 {
		t.Fatalf("events %+v, stats %+v", evs, st)
	}
	if evs[0].Type != record.EventFRMPurge || evs[0].Provider != "p" || !evs[0].Time.Equal(tu(1)) || !evs[0].Valid {
		t.Errorf("purge event %+v", evs[0])
	}
	var p struct {
		Name  string
		Size  int64
		Atime int64
	}
	if err := json.Unmarshal(evs[0].Data, &p); err != nil || p.Name != "/store/old.root" || p.Size != 1<<30 || p.Atime != 100 {
		t.Errorf("purge data %s (%v)", evs[0].Data, err)
	}
	var x struct {
		LFN       string `json:"lfn"`
		Op        string `json:"op"`
		Size      int64  `json:"size"`
		XferTime  int64  `json:"xfer_time_s"`
		QueueTime int64  `json:"queue_time_s"`
	}
	if err := json.Unmarshal(evs[1].Data, &x); err != nil || x.Op != "stage" || x.Size != 5<<30 || x.XferTime != 600 ||
		x.QueueTime != 30 || x.LFN != "/store/tape/\"a\".root" {
		t.Errorf("transfer data %s (%v)", evs[1].Data, err)
	}
	if evs[0].EventID == evs[1].EventID || evs[1].Type != record.EventFRMTransfer {
		t.Errorf("event ids %s %s, type %s", evs[0].EventID, evs[1].EventID, evs[1].Type)
	}
}

// TestRedirectEvents: every redirect of an r-stream packet is an event at
// its timing mark, naming the operation, who decided it, the target, the
// path and the client's session when known; timing marks are not events.
func TestRedirectEvents(t *testing.T) {
	s := newSrv("192.0.2.81:1094", t0, 6)
	uid := s.uid("xroot", "alice", 3, "wn.example.org")
	var rb packet.RedirBuilder
	rb.Reset(nil, s.hdr('r', &s.mainSeq), s.sid)
	rb.Mark(5, t0+10)
	rb.Redirect(packet.RedirEntry{Xrootd: true, Op: 5, Port: 1095, User: 9, Host: []byte("data1.example.org"), Path: []byte("/store/a.root")})
	rb.Redirect(packet.RedirEntry{Op: 2, Port: 1094, User: 0, Host: []byte("[2001:db8::1]"), Path: []byte("/store/b.root")})
	rb.Mark(5, t0+15)
	var f feed
	f.send(s, 1, s.login(9, uid, gsiLogin))
	f.send(s, 12, rb.Finish())
	_, evs, _ := f.runTwice(t, DefaultConfig())
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2 redirects: %+v", len(evs), evs)
	}
	var d [2]struct {
		Op, DecidedBy, TargetHost, Path, User, VO string
		Port                                      uint16
		PortIsTarget                              bool
	}
	for i := range evs {
		if evs[i].Type != record.EventRedirect || !evs[i].Time.Equal(tu(10)) || evs[i].ServerIP != "192.0.2.81" {
			t.Errorf("event %d: %+v", i, evs[i])
		}
		var raw map[string]any
		if err := json.Unmarshal(evs[i].Data, &raw); err != nil {
			t.Fatal(err)
		}
		d[i].Op, _ = raw["op"].(string)
		d[i].DecidedBy, _ = raw["decided_by"].(string)
		d[i].TargetHost, _ = raw["target_host"].(string)
		d[i].Path, _ = raw["path"].(string)
		d[i].User, _ = raw["user"].(string)
		d[i].VO, _ = raw["vo"].(string)
		d[i].PortIsTarget, _ = raw["port_is_target"].(bool)
	}
	if d[0].Op != "openr" || d[0].DecidedBy != "xrootd" || d[0].TargetHost != "data1.example.org" || d[0].Path != "/store/a.root" ||
		d[0].User != "alice" || !d[0].PortIsTarget {
		t.Errorf("first redirect %+v", d[0])
	}
	if d[1].Op != "locate" || d[1].DecidedBy != "filesystem" || d[1].TargetHost != "[2001:db8::1]" || d[1].User != "" || d[1].PortIsTarget {
		t.Errorf("second redirect %+v", d[1])
	}
}
