// Package packet decodes and encodes the XRootD detailed-monitoring wire
// format: every datagram an XRootD server (or its FRM daemons) sends to a
// monitoring collector.
//
// A datagram is one of:
//
//   - a binary packet with the 8-byte header (code, pseq, plen, stod) and a
//     body chosen by code: map records ('=', 'd', 'i', 'p', 'T', 'u', 'U',
//     'x'), the f-stream ('f') of file records, the t-stream trace buffer
//     ('t'), the r-stream redirect buffer ('r'), or a g-stream of plugin JSON
//     lines ('g');
//   - a text datagram: XML summary ('<'), JSON summary or JSON-header
//     g-stream ('{'), CGI-header g-stream ("code=").
//
// Classify tells which. The Decode* functions validate a datagram completely
// before returning, so iterating a decoded packet cannot fail; any defect is
// reported as an *Error whose Reason belongs to a small closed set that
// metrics count (see Reasons). Validate decodes any datagram by its kind,
// down to every record field and typed map payload, and returns the first
// defect: use it to count rejections by reason.
//
// # Encoding
//
// The same package builds every packet kind, as a server lays it out, for
// the load generator and for tests: AppendMap with the Append* payload
// functions (AppendUserID, AppendLogin, AppendToken, ...), FStreamBuilder,
// TraceBuilder, RedirBuilder, AppendGStream and AppendTextGStream. They
// append into the caller's buffer and do not allocate when it has room.
//
// # Views, not copies
//
// Decoding never copies and never allocates: every []byte in a decoded value
// is a view into the datagram and is valid only as long as the caller keeps
// the datagram unchanged. Whoever keeps text beyond that must copy it
// (the correlator interns it). Decoded values are plain structs and may be
// used from any goroutine that may read the datagram.
//
// The wire format is documented in shared/docs/xrootd-monitoring-protocol.md;
// section numbers in comments here refer to it.
package packet
