package packet

import (
	"bytes"
	"encoding/binary"
)

// HeaderSize is the size of the common binary header (§1).
const HeaderSize = 8

// Header codes of binary packets (§1.1).
const (
	CodeIdent   byte = '=' // server identification map record
	CodePath    byte = 'd' // user + path -> dictid
	CodeFStream byte = 'f' // file statistics stream
	CodeGStream byte = 'g' // plugin (g-stream) JSON records
	CodeInfo    byte = 'i' // user + application info -> dictid
	CodePurge   byte = 'p' // FRM purge
	CodeRedir   byte = 'r' // redirect stream
	CodeTrace   byte = 't' // trace stream
	CodeToken   byte = 'T' // token attributes of a user
	CodeUser    byte = 'u' // user login
	CodeUEAC    byte = 'U' // experiment/activity codes of a user
	CodeXfer    byte = 'x' // FRM stage/migrate transfer
)

// Kind classifies a datagram before it is decoded.
type Kind uint8

// The datagram kinds.
const (
	KindUnknown     Kind = iota // garbage: none of the below
	KindMap                     // binary map record: = d i p T u U x
	KindFStream                 // binary f-stream
	KindTrace                   // binary t-stream
	KindRedir                   // binary r-stream
	KindGStream                 // binary g-stream
	KindXMLSummary              // '<': summary monitoring in XML
	KindJSONSummary             // '{' that is not a text g-stream: summary in JSON
	KindTextGStream             // '{"code":...': JSON-header g-stream, ident or dict record
	KindCGIGStream              // "code=...": CGI-header g-stream, ident or dict record
)

var kindNames = [...]string{
	KindUnknown:     "unknown",
	KindMap:         "map",
	KindFStream:     "fstream",
	KindTrace:       "trace",
	KindRedir:       "redir",
	KindGStream:     "gstream",
	KindXMLSummary:  "xml_summary",
	KindJSONSummary: "json_summary",
	KindTextGStream: "json_gstream",
	KindCGIGStream:  "cgi_gstream",
}

// String returns the kind's metric label value.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Binary reports whether the kind is one of the binary packet kinds.
func (k Kind) Binary() bool { return k >= KindMap && k <= KindGStream }

// Classify tells what kind of datagram b is, from its first bytes only. It
// does not validate; the matching Decode function does.
func Classify(b []byte) Kind {
	if len(b) == 0 {
		return KindUnknown
	}
	switch b[0] {
	case CodeIdent, CodePath, CodeInfo, CodePurge, CodeToken, CodeUser, CodeUEAC, CodeXfer:
		return KindMap
	case CodeFStream:
		return KindFStream
	case CodeTrace:
		return KindTrace
	case CodeRedir:
		return KindRedir
	case CodeGStream:
		return KindGStream
	case '<':
		return KindXMLSummary
	case '{':
		if bytes.HasPrefix(b, []byte(`{"code":`)) {
			return KindTextGStream
		}
		return KindJSONSummary
	case 'c':
		if bytes.HasPrefix(b, []byte("code=")) {
			return KindCGIGStream
		}
	}
	return KindUnknown
}

// Header is the common 8-byte header of binary packets (§1).
type Header struct {
	Code byte   // packet type character
	Pseq uint8  // sequence number; see §7.4 for which packets share a counter
	Plen uint16 // total length including the header
	Stod uint32 // Unix s when the server's monitoring started; changes on restart
}

// ParseHeader decodes and checks the header of a binary datagram: it must be
// at least HeaderSize long and its plen must equal len(b). It does not check
// the code.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrShort
	}
	h := Header{
		Code: b[0],
		Pseq: b[1],
		Plen: binary.BigEndian.Uint16(b[2:4]),
		Stod: binary.BigEndian.Uint32(b[4:8]),
	}
	if int(h.Plen) != len(b) {
		return h, ErrLength
	}
	return h, nil
}

// parseHeaderCode is ParseHeader for the decoder of one code's packets:
// a header of another code is ErrUnknownCode, a packet shorter than
// minLen bytes ErrShort.
func parseHeaderCode(b []byte, code byte, minLen int) (Header, error) {
	h, err := ParseHeader(b)
	if err == nil && h.Code != code {
		err = ErrUnknownCode
	}
	if err == nil && len(b) < minLen {
		err = ErrShort
	}
	return h, err
}

// putHeader writes h into b[0:8].
func putHeader(b []byte, h Header) {
	b[0] = h.Code
	b[1] = h.Pseq
	binary.BigEndian.PutUint16(b[2:4], h.Plen)
	binary.BigEndian.PutUint32(b[4:8], h.Stod)
}
