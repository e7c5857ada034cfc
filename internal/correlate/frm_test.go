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
