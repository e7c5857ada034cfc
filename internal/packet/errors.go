package packet

import "errors"

// Reason is why a datagram was rejected. The set is small and closed so that
// a metric can count rejections by reason with bounded cardinality.
type Reason uint8

// The rejection reasons.
const (
	ReasonShort       Reason = iota + 1 // shorter than the header or the type's fixed part
	ReasonLength                        // plen disagrees with the datagram length
	ReasonUnknownCode                   // header code (or text datagram kind) not known
	ReasonRecordSize                    // a record's size is 0, too small for its type, or past the end
	ReasonRecordCount                   // nRecs disagrees with the records present
	ReasonRecordType                    // unknown or misplaced record / entry type
	ReasonEmptyText                     // a text field that must not be empty is
	ReasonNotUTF8                       // text that must be UTF-8 is not
	ReasonSyntax                        // text that does not follow its grammar
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonShort:       "short",
	ReasonLength:      "length_mismatch",
	ReasonUnknownCode: "unknown_code",
	ReasonRecordSize:  "bad_record_size",
	ReasonRecordCount: "bad_record_count",
	ReasonRecordType:  "unknown_record_type",
	ReasonEmptyText:   "empty_text",
	ReasonNotUTF8:     "not_utf8",
	ReasonSyntax:      "bad_syntax",
}

// String returns the reason's metric label value, e.g. "length_mismatch".
func (r Reason) String() string {
	if r == 0 || r >= numReasons {
		return "invalid"
	}
	return reasonNames[r]
}

// Reasons lists every reason, for initialising counters at start-up.
func Reasons() []Reason {
	rs := make([]Reason, 0, numReasons-1)
	for r := ReasonShort; r < numReasons; r++ {
		rs = append(rs, r)
	}
	return rs
}

// Error is a decoding failure. Errors are preallocated, one per reason, so
// rejecting a datagram does not allocate; compare with errors.Is against the
// Err* values, or read Reason with errors.As.
type Error struct {
	Reason Reason
}

func (e *Error) Error() string { return "decode packet: " + e.Reason.String() }

// The errors returned by the decoder, one per Reason.
var (
	ErrShort       = &Error{ReasonShort}
	ErrLength      = &Error{ReasonLength}
	ErrUnknownCode = &Error{ReasonUnknownCode}
	ErrRecordSize  = &Error{ReasonRecordSize}
	ErrRecordCount = &Error{ReasonRecordCount}
	ErrRecordType  = &Error{ReasonRecordType}
	ErrEmptyText   = &Error{ReasonEmptyText}
	ErrNotUTF8     = &Error{ReasonNotUTF8}
	ErrSyntax      = &Error{ReasonSyntax}
)

// ReasonOf returns the reason carried by err, or 0 when err is not a decoder
// error.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return 0
}
