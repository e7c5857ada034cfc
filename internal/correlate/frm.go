package correlate

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// FRM purge (p) and transfer (x) records (protocol §2.9) become events:
// what a File Residency Manager purged, staged or migrated, with sizes and
// times, for the disk-cache and tape studies of a site. They are rare (one
// per file the FRM handles), so they are encoded here as JSON directly.

// frmPurge is the data of an frm_purge event (docs/records.md §5.9).
type frmPurge struct {
	Name     string `json:"name"`
	Physical bool   `json:"physical"`
	Size     int64  `json:"size"`
	Atime    int64  `json:"atime"`
	Ctime    int64  `json:"ctime"`
	Mtime    int64  `json:"mtime"`
}

// frmTransfer is the data of an frm_transfer event.
type frmTransfer struct {
	LFN       string `json:"lfn"`
	Op        string `json:"op"`
	Size      int64  `json:"size"`
	QueueTime int64  `json:"queue_time_s"`
	XferTime  int64  `json:"xfer_time_s"`
	RC        int64  `json:"rc"`
	Detail    string `json:"detail,omitempty"`
}

var frmOps = [...]string{
	packet.XferUnknown:      "unknown",
	packet.XferCopyIn:       "copy_in",
	packet.XferMigrate:      "migrate",
	packet.XferMigratePurge: "migrate_purge",
	packet.XferCopyOut:      "copy_out",
	packet.XferCopyOutPurge: "copy_out_purge",
	packet.XferStage:        "stage",
}

func frmPurgeData(p *packet.Purge) any {
	return frmPurge{Name: text(p.Name), Physical: p.Physical, Size: p.Size, Atime: p.Atime, Ctime: p.Ctime, Mtime: p.Mtime}
}

func frmXferData(x *packet.FRMXfer) any {
	op := "unknown"
	if int(x.Op) < len(frmOps) {
		op = frmOps[x.Op]
	}
	return frmTransfer{LFN: text(x.LFN), Op: op, Size: x.Size, QueueTime: x.QueueTime, XferTime: x.XferTime, RC: x.RC, Detail: text(x.Detail)}
}

// text is b as valid UTF-8 (invalid bytes become U+FFFD).
func text(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }

// emitFRM appends the event of an FRM record of m with the given data;
// tod is the record's own time (the map record's arrival when 0).
func (s *Shard) emitFRM(inc *incarnation, m packet.Map, tod int64, typ record.EventType, payload []byte, data any) {
	at := s.now.UTC()
	if tod > 0 {
		at = time.Unix(tod, 0).UTC()
	}
	b, err := json.Marshal(data)
	if err != nil { // strings are valid UTF-8 and numbers integers: cannot happen
		return
	}
	e := s.appendEvent(inc, s.eventID(inc, m.Code, m.Pseq, tod, int(m.DictID), payload),
		typ, providerNames[m.Code], at)
	e.Data, e.Valid = b, true
}
