package record

import (
	"encoding/json"
	"time"
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
}
