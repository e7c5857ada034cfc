package correlate

// Stream is a monitoring stream of a server, for the time each was last
// heard (ServerActivity). Summaries (xrd.report) are events, not kept here:
// the writer sees them.
type Stream uint8

// The streams a shard tells apart.
const (
	StreamMap   Stream = iota // map records (=, u, d, i, T, p, x ...)
	StreamF                   // f-stream (fstat)
	StreamG                   // g-stream, binary, text and CGI
	StreamTrace               // t-stream (I/O traces)
	StreamRedir               // r-stream (redirects)
	NumStreams
)

var streamNames = [NumStreams]string{"map", "fstream", "gstream", "trace", "redir"}

// String returns the stream's name, as in metrics and the API.
func (s Stream) String() string {
	if s < NumStreams {
		return streamNames[s]
	}
	return "unknown"
}

// ServerActivity is what a shard knows of one server (an incarnation: an
// address and start time) at a barrier: when each stream was last heard
// and how many files are open now. Strings are the shard's own (interned),
// not packet buffers.
type ServerActivity struct {
	ServerIP string
	Host     string // from the server's '=' record, if it sent one
	Site     string
	// Heard is, per Stream, the collector's time (Unix s) of the last
	// datagram accepted from the server on it; 0 if none.
	Heard     [NumStreams]int64
	OpenFiles int
	// Lost is the datagrams missing from the server's sequence counters
	// (all domains), as xrdmon_packets_lost_total counts them.
	Lost uint64
}

// appendActivity appends the activity of every server the shard holds now
// to dst and returns it (Output.Activity). It costs a pass over the
// servers (no allocation when dst has room): the pipeline drains it once
// per commit, and the packet path only stores a time per datagram.
func (s *Shard) appendActivity(dst []ServerActivity) []ServerActivity {
	for _, inc := range s.incList {
		var lost uint64
		for _, n := range inc.lost {
			lost += n
		}
		dst = append(dst, ServerActivity{ServerIP: inc.ip, Host: inc.host, Site: inc.site, Heard: inc.heard, OpenFiles: int(inc.files.n), Lost: lost})
	}
	return dst
}
