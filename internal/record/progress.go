package record

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// EventProgress is the type of a progress event: the bytes a file access
// still open has moved so far, from the server's isXfr updates, as a JSON
// event. This is how logs written before the store had progress entries of
// their own (schema version 9) hold progress snapshots; xrdmon now stores
// a snapshot as a record (its entry kind, store.Entry.Progress) and only
// reads these. Progress events are internal: rollups count the bytes of long
// transfers from them as they flow (docs/records.md, "Progress"); sinks do
// not deliver them.
const EventProgress EventType = "progress"

const progressIDDomain = "xrdmon/progress/v1\x00"

// Internal reports whether events of type t are kept for xrdmon's own use
// (rollups) and not delivered to outputs.
func (t EventType) Internal() bool { return t == EventProgress }

// progressData is the payload of a progress event: the access's identity
// (with the event's server fields) and the dimensions rollups group by, in
// the record's JSON names, and the cumulative bytes so far.
type progressData struct {
	FileID       uint32    `json:"file_id"`
	Start        time.Time `json:"start"`
	Protocol     string    `json:"protocol,omitempty"`
	User         string    `json:"user,omitempty"`
	ClientHost   string    `json:"client_host,omitempty"`
	ClientName   string    `json:"client_name,omitempty"`
	DN           string    `json:"dn,omitempty"`
	VO           string    `json:"vo,omitempty"`
	AppName      string    `json:"app_name,omitempty"`
	TokenSubject string    `json:"token_subject,omitempty"`
	Path         string    `json:"path,omitempty"`
	ReadBytes    int64     `json:"read_bytes"`
	ReadvBytes   int64     `json:"readv_bytes"`
	WriteBytes   int64     `json:"write_bytes"`
}

// ProgressEvent returns the progress event of r, a snapshot of an open
// access taken at r.End (the isXfr packet's time) with its cumulative
// bytes: the form a snapshot had in the logs of earlier builds (see
// EventProgress), which tests make to check that such logs are still read.
// Its id is ProgressID(r).
func ProgressEvent(r *Record) Event {
	d := progressDataOf(r)
	data := appendProgressData(make([]byte, 0, 256), &d)
	return Event{
		EventID:    ProgressID(r),
		Type:       EventProgress,
		Time:       r.End,
		Received:   r.Received,
		ServerIP:   r.ServerIP,
		ServerHost: r.ServerHost,
		ServerID:   r.ServerID,
		ServerStod: r.ServerStod,
		Site:       r.Site,
		Data:       data,
		Valid:      true,
	}
}

// appendProgressData appends d as encoding/json marshals it (the same
// bytes: TestProgressDataJSON), without its reflection and allocations.
func appendProgressData(b []byte, d *progressData) []byte {
	b = append(b, `{"file_id":`...)
	b = strconv.AppendUint(b, uint64(d.FileID), 10)
	b = append(b, `,"start":`...)
	b = appendTime(b, d.Start)
	for _, f := range [...]struct{ name, v string }{
		{`,"protocol":`, d.Protocol}, {`,"user":`, d.User}, {`,"client_host":`, d.ClientHost},
		{`,"client_name":`, d.ClientName}, {`,"dn":`, d.DN}, {`,"vo":`, d.VO}, {`,"app_name":`, d.AppName},
		{`,"token_subject":`, d.TokenSubject}, {`,"path":`, d.Path},
	} {
		if f.v != "" {
			b = append(b, f.name...)
			b = appendString(b, f.v)
		}
	}
	b = append(b, `,"read_bytes":`...)
	b = strconv.AppendInt(b, d.ReadBytes, 10)
	b = append(b, `,"readv_bytes":`...)
	b = strconv.AppendInt(b, d.ReadvBytes, 10)
	b = append(b, `,"write_bytes":`...)
	b = strconv.AppendInt(b, d.WriteBytes, 10)
	return append(b, '}')
}

// progressDataOf returns what a progress event of r carries in Data.
func progressDataOf(r *Record) progressData {
	return progressData{
		FileID: r.FileID, Start: r.Start.UTC(), Protocol: r.Protocol, User: r.User,
		ClientHost: r.ClientHost, ClientName: r.ClientName, DN: r.DN, VO: r.VO, AppName: r.AppName,
		TokenSubject: r.TokenSubject, Path: r.Path,
		ReadBytes: r.ReadBytes, ReadvBytes: r.ReadvBytes, WriteBytes: r.WriteBytes,
	}
}

// ProgressID returns the id of the progress snapshot r, a snapshot of an
// open access taken at r.End: deterministic, the same update gives the same
// id, so that the store drops a snapshot a restart makes again. It is the
// event id progress events had (ProgressEvent), so a snapshot stored as an
// event by an earlier build and made again by this one is a duplicate too.
func ProgressID(r *Record) string {
	var buf [160]byte
	b := append(buf[:0], progressIDDomain...)
	b = appendIdentity(b, r.ServerIP, r.ServerStod, r.ServerID)
	b = binary.BigEndian.AppendUint32(b, r.FileID)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Start.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(r.End.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(r.ReadBytes))
	b = binary.BigEndian.AppendUint64(b, uint64(r.ReadvBytes))
	b = binary.BigEndian.AppendUint64(b, uint64(r.WriteBytes))
	sum := sha256.Sum256(b)
	var id [32]byte
	hex.Encode(id[:], sum[:16])
	return string(id[:])
}

// ParseProgress returns the snapshot a progress event carries, as a record
// whose End is the update's time (and whose RecordID is empty: the access
// is still open). Only logs written by earlier builds hold progress events
// (see EventProgress).
func ParseProgress(e *Event) (Record, error) {
	if e.Type != EventProgress {
		return Record{}, fmt.Errorf("event %s is a %s event, not progress", e.EventID, e.Type)
	}
	var d progressData
	if err := json.Unmarshal(e.Data, &d); err != nil {
		return Record{}, fmt.Errorf("progress event %s: %w", e.EventID, err)
	}
	return Record{
		Start: d.Start, End: e.Time, Received: e.Received,
		ServerIP: e.ServerIP, ServerHost: e.ServerHost, ServerID: e.ServerID, ServerStod: e.ServerStod, Site: e.Site,
		Protocol: d.Protocol, User: d.User, ClientHost: d.ClientHost, ClientName: d.ClientName, DN: d.DN,
		VO: d.VO, AppName: d.AppName, TokenSubject: d.TokenSubject,
		FileID: d.FileID, Path: d.Path,
		ReadBytes: d.ReadBytes, ReadvBytes: d.ReadvBytes, WriteBytes: d.WriteBytes,
	}, nil
}

// AccessKey identifies one file access across its progress events and its
// record: the server incarnation, the file id and the open time.
type AccessKey struct {
	ServerIP   string
	ServerStod int64
	ServerID   uint64
	FileID     uint32
	Start      int64 // Unix nanoseconds
}

// Access returns r's AccessKey.
func (r *Record) Access() AccessKey {
	return AccessKey{r.ServerIP, r.ServerStod, r.ServerID & 0xFFFFFFFFFFFF, r.FileID, r.Start.UnixNano()}
}
