// Package record defines xrdmon's transfer record, the unit of accounting
// that the correlator emits for every file access, and its encodings.
//
// docs/records.md documents every field: name, type, unit and meaning.
package record

import "time"

// Reason says why a record is partial. The empty reason means the record is
// complete: both the open and the close of the file were seen.
type Reason string

// The reasons a record can be partial. The set is closed: metrics count
// records by these values.
const (
	Complete      Reason = ""               // open and close seen
	Timeout       Reason = "timeout"        // open never closed within the open-file TTL
	Disconnect    Reason = "disconnect"     // the session ended with the file still open
	ServerRestart Reason = "server_restart" // the server restarted (new stod) with the file open
	Evicted       Reason = "evicted"        // dropped from memory by the state bound
	NoOpen        Reason = "no_open"        // a close arrived for an open that was never seen
	EndOfInput    Reason = "end_of_input"   // replay/shutdown flushed a still-open file
)

// Reasons lists every partial reason, for metrics initialisation.
var Reasons = []Reason{Timeout, Disconnect, ServerRestart, Evicted, NoOpen, EndOfInput}

// Record is one file access on one XRootD server: from the open of a file to
// its close (complete), or to the moment xrdmon had to stop waiting (partial).
//
// Times come from the server's own clock (f-stream isTime windows), never from
// the collector's, except Received. Byte counts are cumulative for the access.
// Strings are copies (interned) and safe to keep.
type Record struct {
	// RecordID is deterministic: the same input always gives the same id,
	// so consumers can drop duplicates. 32 lowercase hex characters.
	RecordID string `json:"record_id"`
	// Reason is empty for a complete record.
	Reason Reason `json:"reason,omitempty"`

	// Start is when the file was opened, End when it was closed (or when
	// the last information about it was seen, for partial records).
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// StartUnknown says the open was never seen (a close or an isXfr
	// without its open): when the file was opened is not known, Start is
	// set to End and the duration is 0, not a measured one.
	StartUnknown bool `json:"start_unknown,omitempty"`
	// Received is the collector's clock when the record was emitted.
	Received time.Time `json:"received"`
	// ClockAhead says End was ahead of Received by more than the
	// collector's tolerance (correlate.clock_ahead_tolerance): the
	// server's clock is wrong, and the record's times are in the future.
	ClockAhead bool `json:"clock_ahead,omitempty"`

	// Server identity.
	ServerIP   string `json:"server_ip"`             // sender address (after NAT map)
	ServerHost string `json:"server_host,omitempty"` // reverse DNS of ServerIP, or the '=' record host
	ServerID   uint64 `json:"server_id"`             // 48-bit sID
	ServerStod int64  `json:"server_stod"`           // Unix s the server process started
	Site       string `json:"site,omitempty"`
	Instance   string `json:"instance,omitempty"`
	Program    string `json:"program,omitempty"`
	Version    string `json:"version,omitempty"`

	// Session (from the u login record and its companions).
	Protocol      string `json:"protocol,omitempty"`       // xroot, http, https...
	User          string `json:"user,omitempty"`           // client user name from the link id
	UserDictID    uint32 `json:"user_dictid,omitempty"`    //
	ClientHost    string `json:"client_host,omitempty"`    // host as the server wrote it in the userid
	ClientName    string `json:"client_name,omitempty"`    // reverse DNS of ClientHost when it is an address
	IPv6          bool   `json:"ipv6,omitempty"`           // &I=6
	AuthProtocol  string `json:"auth_protocol,omitempty"`  // &p=
	DN            string `json:"dn,omitempty"`             // &n=
	MonInfo       string `json:"mon_info,omitempty"`       // &m=: for gsi and https logins the client certificate DN (VOMS logins: "DN::attributes")
	VO            string `json:"vo,omitempty"`             // &o=, or the token's organisation
	Role          string `json:"role,omitempty"`           // &r=
	Groups        string `json:"groups,omitempty"`         // &g=
	ClientRelease string `json:"client_release,omitempty"` // &R=
	AppName       string `json:"app_name,omitempty"`       // &x=
	AppInfo       string `json:"app_info,omitempty"`       // i record text or &y=
	TokenSubject  string `json:"token_subject,omitempty"`  // T &s=
	TokenUser     string `json:"token_user,omitempty"`     // T &n=
	TokenOrg      string `json:"token_org,omitempty"`      // T &o=
	TokenRole     string `json:"token_role,omitempty"`     // T &r=
	TokenGroups   string `json:"token_groups,omitempty"`   // T &g=
	Experiment    int32  `json:"experiment,omitempty"`     // U &Ec= (SciTags)
	Activity      int32  `json:"activity,omitempty"`       // U &Ac= (SciTags)

	// File.
	FileID    uint32 `json:"file_id"`
	Path      string `json:"path,omitempty"`
	FileSize  int64  `json:"file_size"` // bytes at open
	ReadWrite bool   `json:"read_write,omitempty"`
	Forced    bool   `json:"forced,omitempty"` // closed because the client disconnected

	// Bytes (cumulative over the access).
	ReadBytes  int64 `json:"read_bytes"`
	ReadvBytes int64 `json:"readv_bytes"`
	WriteBytes int64 `json:"write_bytes"`

	// Operation statistics, present when HasOps (the close carried OPS).
	HasOps       bool  `json:"has_ops,omitempty"`
	ReadOps      int32 `json:"read_ops,omitempty"`
	ReadvOps     int32 `json:"readv_ops,omitempty"`
	WriteOps     int32 `json:"write_ops,omitempty"`
	ReadvSegs    int64 `json:"readv_segs,omitempty"`
	ReadvSegsMin int16 `json:"readv_segs_min,omitempty"`
	ReadvSegsMax int16 `json:"readv_segs_max,omitempty"`
	ReadMin      int32 `json:"read_min,omitempty"`
	ReadMax      int32 `json:"read_max,omitempty"`
	ReadvMin     int32 `json:"readv_min,omitempty"`
	ReadvMax     int32 `json:"readv_max,omitempty"`
	WriteMin     int32 `json:"write_min,omitempty"`
	WriteMax     int32 `json:"write_max,omitempty"`
	// Sums of squares, present when HasSSQ.
	HasSSQ        bool    `json:"has_ssq,omitempty"`
	ReadSqSum     float64 `json:"read_sq_sum,omitempty"`
	ReadvSqSum    float64 `json:"readv_sq_sum,omitempty"`
	ReadvSegSqSum float64 `json:"readv_seg_sq_sum,omitempty"`
	WriteSqSum    float64 `json:"write_sq_sum,omitempty"`

	// Redirection (r-stream): how many redirects of this client to this
	// path, by redirectors that report to this collector, led to the open,
	// and the time from the first of them to the open: at least
	// RedirectDelayMS, at most RedirectDelayMaxMS. The open's time is only
	// known to lie in its f-stream packet's span, and both ends are server
	// clocks in whole seconds (docs/records.md §5.11). Zero when no
	// redirect was linked.
	RedirectHops       int32 `json:"redirect_hops,omitempty"`
	RedirectDelayMS    int64 `json:"redirect_delay_ms,omitempty"`
	RedirectDelayMaxMS int64 `json:"redirect_delay_max_ms,omitempty"`

	// I/O profile from the t-stream, present when HasIO (the server traces
	// I/O with `io` or `iov`). IO is nil when the profile is empty (nothing
	// traced of the file): behind a pointer, the 584 bytes of histograms
	// are not carried by the records of servers that do not trace.
	HasIO bool       `json:"has_io,omitempty"`
	IO    *IOProfile `json:"io,omitempty"`
}

// Partial reports whether the record is partial.
func (r *Record) Partial() bool { return r.Reason != Complete }
