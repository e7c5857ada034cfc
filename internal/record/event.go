package record

import (
	"encoding/json"
	"time"
	"unsafe"
)

// EventType names the kind of a g-stream event record.
type EventType string

// The g-stream event types. Each has its own typed payload and schema
// (docs/records.md).
const (
	EventCacheFileClose EventType = "cache_file_close" // provider C, pfc file_close
	EventTPC            EventType = "tpc"              // provider P, third-party copy
	EventThrottle       EventType = "throttle"         // provider R, throttle_update
	EventOSS            EventType = "oss"              // provider O, oss_stats
	EventHTTP           EventType = "http"             // provider H, HTTP verb/status counters
	EventTCPMon         EventType = "tcpmon"           // provider T, plugin-defined
	EventCCM            EventType = "ccm"              // provider M, plugin-defined
	EventUnknown        EventType = "unknown"          // any other provider, kept raw
	EventFRMPurge       EventType = "frm_purge"        // FRM 'p' record: a file purged from disk
	EventFRMTransfer    EventType = "frm_transfer"     // FRM 'x' record: a file staged, migrated or copied
	EventRedirect       EventType = "redirect"         // an r-stream redirect
	EventSummary        EventType = "summary"          // an xrd.report summary: the server's counters
)

// Event is one g-stream record (one JSON line of a g packet), with the
// identity of the server that sent it.
type Event struct {
	// EventID is deterministic, like Record.RecordID.
	EventID  string    `json:"event_id"`
	Type     EventType `json:"type"`
	Provider string    `json:"provider"` // the provider character, e.g. "C"
	// Time is the server's time for the event (the packet's tEnd, or the
	// event's own time when it carries one).
	Time     time.Time `json:"time"`
	Received time.Time `json:"received"`

	ServerIP   string `json:"server_ip"`
	ServerHost string `json:"server_host,omitempty"`
	ServerID   uint64 `json:"server_id"`
	ServerStod int64  `json:"server_stod"`
	Site       string `json:"site,omitempty"`

	// Data is the typed payload for Type, as JSON (see docs/records.md);
	// for unparseable lines it is a JSON string holding the raw text.
	Data json.RawMessage `json:"data"`
	// Valid is false when the producer's line was not valid JSON.
	Valid bool `json:"valid"`

	// Raw, when set, is the producer's line not yet typed: Type is only the
	// provider's type, and Data and Valid are not set. TypeEvent fills them
	// and clears Raw. The correlator leaves events raw so that parsing JSON
	// happens beside the packet path, not on it.
	Raw []byte `json:"-"`

	// Redirect, on a redirect event made in this process, is what the
	// redirect linker reads of Data, so that it does not decode it. It is
	// never stored nor sent.
	Redirect *RedirectLink `json:"-"`
}

// RedirectLink is what links a redirect to the open it led to: the
// operation, the client (host and user name, as the redirector knows it),
// the path, and the timing window the redirect fell in (seconds).
type RedirectLink struct {
	Op, Path, User, ClientHost string
	WindowS                    int64
}

// TypeEvent types a raw event (see Event.Raw) with ParseEvent and reports
// whether its line was valid. An event that is not raw is left as it is.
func TypeEvent(e *Event) (valid bool) {
	_, valid = TypeEventIn(e, nil)
	return valid
}

// TypeEventIn is TypeEvent with e.Data written into room, free capacity of
// the caller's arena (its length is ignored). It returns how many bytes of
// room e.Data took: 0 when it did not fit and was given an allocation of
// its own. e.Data's capacity ends where it does, so that nothing appended
// to it reaches the arena's next bytes.
func TypeEventIn(e *Event, room []byte) (used int, valid bool) {
	if e.Raw == nil {
		return 0, e.Valid
	}
	var prov byte
	if e.Provider != "" {
		prov = e.Provider[0]
	}
	if room != nil {
		room = room[:0]
	}
	typ, out, valid := AppendEvent(room, prov, e.Raw)
	e.Type, e.Data, e.Valid, e.Raw = typ, out[:len(out):len(out)], valid, nil
	if cap(room) > 0 && len(out) > 0 && unsafe.SliceData(out) == unsafe.SliceData(room) {
		used = len(out)
	}
	return used, valid
}
