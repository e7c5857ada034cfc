package source

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"unsafe"
)

// The errors of AppendShoveler. Sources count parse failures by these
// (ShovelerReasons).
var (
	ErrShovelerSyntax    = errors.New("shoveler message: bad json")
	ErrShovelerData      = errors.New("shoveler message: missing or bad base64 data")
	ErrShovelerRemote    = errors.New("shoveler message: missing or bad remote")
	ErrShovelerOversized = errors.New("shoveler message: larger than a UDP datagram can be")
)

// MaxDatagram is the largest datagram any input passes on: the largest UDP
// payload (65,535 bytes). XRootD never sends more; a message from the bus
// claiming more is rejected, not buffered.
const MaxDatagram = 65535

// MaxShovelerMessage is the largest shoveler message accepted: the base64
// of a MaxDatagram datagram plus room for the envelope's other members.
var MaxShovelerMessage = base64.StdEncoding.EncodedLen(MaxDatagram) + 4096

// ShovelerReasons are the label values of the sources' invalid-message
// counters, one per AppendShoveler error, in that order.
var ShovelerReasons = []string{"bad_json", "bad_data", "bad_remote", "oversized"}

// ShovelerReason returns the label value of an AppendShoveler error.
func ShovelerReason(err error) string {
	for i, e := range []error{ErrShovelerSyntax, ErrShovelerData, ErrShovelerRemote, ErrShovelerOversized} {
		if errors.Is(err, e) {
			return ShovelerReasons[i]
		}
	}
	return "bad_json"
}

// Shoveled is one decoded shoveler envelope:
//
//	{"remote":"192.0.2.7:51729","version":"v1.4.0","data":"<std base64 of the datagram>"}
//
// Remote may be "ip:port", "[ipv6]:port", an unbracketed IPv6 "ipv6:port"
// (older shovelers; split on the last ':'), or "host:port" when the shoveler's
// map named a host. Host names are never resolved here (the hot path does not
// wait on DNS): Sender is then the zero AddrPort and Host/Port keep the text,
// for Filter.AcceptHost to map.
type Shoveled struct {
	Data    []byte         // the decoded datagram (see AppendShoveler for its lifetime)
	Sender  netip.AddrPort // the remote when it is an IP, unmapped to IPv4; else zero
	Host    []byte         // the remote's host part when it is not an IP; a view into the line
	Port    uint16         // the remote's port
	Remote  []byte         // the remote as written (a view into the line)
	Version []byte         // the shoveler version (a view into the line; may be nil)
}

// AcceptShoveled passes a relayed packet through f: Accept for an IP remote,
// AcceptHost for a host name.
func (f *Filter) AcceptShoveled(s *Shoveled) (netip.AddrPort, bool) {
	if s.Sender.Addr().IsValid() {
		return f.Accept(s.Sender)
	}
	return f.AcceptHost(s.Host, s.Port)
}

// ParseShoveler parses one shoveler JSON message into a newly allocated
// datagram buffer. Use AppendShoveler on hot paths.
func ParseShoveler(line []byte) (Shoveled, error) {
	_, s, err := AppendShoveler(nil, line)
	return s, err
}

// AppendShoveler parses one shoveler JSON message and appends the decoded
// datagram to dst, returning the extended buffer; s.Data is the appended part
// (it aliases the returned buffer, so it stays valid while that buffer is not
// overwritten). Unknown fields are ignored. It does not allocate unless dst
// must grow or a string uses JSON escapes.
func AppendShoveler(dst, line []byte) (out []byte, s Shoveled, err error) {
	s, data, err := ParseShovelerEnvelope(line)
	if err != nil {
		return dst, s, err
	}
	enc := base64.StdEncoding
	if len(data)%4 != 0 {
		enc = base64.RawStdEncoding // tolerate missing padding
	}
	start := len(dst)
	if enc.DecodedLen(len(data)) > MaxDatagram+2 { // +2: padding rounds up
		return dst, s, ErrShovelerOversized
	}
	dst = slices.Grow(dst, enc.DecodedLen(len(data)))
	n, derr := enc.Decode(dst[start:start+enc.DecodedLen(len(data))], data)
	if derr != nil {
		return dst[:start], s, ErrShovelerData
	}
	if n > MaxDatagram {
		return dst[:start], s, ErrShovelerOversized
	}
	dst = dst[:start+n]
	s.Data = dst[start:]
	return dst, s, nil
}

// ParseShovelerEnvelope parses a shoveler message's envelope: s has the
// remote (Remote, Sender or Host and Port) and the version, data the
// base64 text of the datagram, undecoded (what a router that only needs
// the remote reads). Views into line; no allocation unless a string uses
// JSON escapes.
func ParseShovelerEnvelope(line []byte) (s Shoveled, data []byte, err error) {
	if len(line) > MaxShovelerMessage {
		return s, nil, ErrShovelerOversized
	}
	var haveData bool
	i := skipWS(line, 0)
	if i >= len(line) || line[i] != '{' {
		return s, nil, ErrShovelerSyntax
	}
	i = skipWS(line, i+1)
	if i < len(line) && line[i] == '}' {
		return s, nil, ErrShovelerData
	}
	for {
		if i >= len(line) || line[i] != '"' {
			return s, nil, ErrShovelerSyntax
		}
		key, next, _, ok := scanString(line, i)
		if !ok {
			return s, nil, ErrShovelerSyntax
		}
		i = skipWS(line, next)
		if i >= len(line) || line[i] != ':' {
			return s, nil, ErrShovelerSyntax
		}
		i = skipWS(line, i+1)
		var field *[]byte
		switch string(key) {
		case "data":
			field, haveData = &data, true
		case "remote":
			field = &s.Remote
		case "version":
			field = &s.Version
		}
		if field != nil && i < len(line) && line[i] == '"' {
			val, next, escaped, ok := scanString(line, i)
			if !ok {
				return s, nil, ErrShovelerSyntax
			}
			if escaped {
				var str string
				if json.Unmarshal(line[i:next], &str) != nil {
					return s, nil, ErrShovelerSyntax
				}
				val = []byte(str)
			}
			*field = val
			i = next
		} else {
			if field != nil {
				*field = nil // null or a non-string value
			}
			if i, ok = skipValue(line, i); !ok {
				return s, nil, ErrShovelerSyntax
			}
		}
		i = skipWS(line, i)
		if i >= len(line) {
			return s, nil, ErrShovelerSyntax
		}
		if line[i] == '}' {
			break
		}
		if line[i] != ',' {
			return s, nil, ErrShovelerSyntax
		}
		i = skipWS(line, i+1)
	}
	if !haveData || data == nil {
		return s, nil, ErrShovelerData
	}
	if err := parseRemote(&s); err != nil {
		return s, nil, err
	}
	return s, data, nil
}

// parseRemote fills Sender, or Host, and Port from Remote.
func parseRemote(s *Shoveled) error {
	r := s.Remote
	if len(r) == 0 {
		return ErrShovelerRemote
	}
	var host, port []byte
	if r[0] == '[' {
		end := -1
		for j := 1; j < len(r); j++ {
			if r[j] == ']' {
				end = j
				break
			}
		}
		if end < 0 {
			return ErrShovelerRemote
		}
		host = r[1:end]
		switch rest := r[end+1:]; {
		case len(rest) == 0:
		case rest[0] == ':':
			port = rest[1:]
		default:
			return ErrShovelerRemote
		}
	} else {
		colon := -1
		for j := len(r) - 1; j >= 0; j-- {
			if r[j] == ':' {
				colon = j
				break
			}
		}
		if colon < 0 {
			host = r
		} else {
			host, port = r[:colon], r[colon+1:]
		}
	}
	if port != nil {
		p, ok := parsePort(port)
		if !ok {
			return ErrShovelerRemote
		}
		s.Port = p
	}
	if len(host) == 0 {
		return ErrShovelerRemote
	}
	// The string aliases host only for the duration of the call: on success
	// netip keeps no reference to it (a zone is copied by unique.Make), and
	// its error, which would, is dropped here.
	addr, err := netip.ParseAddr(unsafe.String(&host[0], len(host)))
	if err == nil {
		s.Sender = netip.AddrPortFrom(addr.Unmap(), s.Port)
		return nil
	}
	for _, c := range host {
		if !(c == '-' || c == '.' || c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return ErrShovelerRemote
		}
	}
	s.Host = host
	return nil
}

func parsePort(b []byte) (uint16, bool) {
	if len(b) == 0 || len(b) > 5 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n > 65535 {
		return 0, false
	}
	return uint16(n), true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString scans the JSON string starting at b[i] == '"'. It returns its
// raw contents, the index after the closing quote, and whether it has escapes.
func scanString(b []byte, i int) (val []byte, next int, escaped, ok bool) {
	// Fast path (the base64 data of a message is kilobytes long): the next
	// quote, found with IndexByte, ends the string unless a backslash
	// comes before it.
	if q := bytes.IndexByte(b[i+1:], '"'); q >= 0 && bytes.IndexByte(b[i+1:i+1+q], '\\') < 0 {
		return b[i+1 : i+1+q], i + 2 + q, false, true
	}
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return b[i+1 : j], j + 1, escaped, true
		}
	}
	return nil, len(b), false, false
}

// skipValue skips any JSON value starting at b[i] and returns the index after it.
func skipValue(b []byte, i int) (int, bool) {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			_, next, _, ok := scanString(b, i)
			if !ok {
				return i, false
			}
			i = next
			if depth == 0 {
				return i, true
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i, true
			}
			depth--
			if depth == 0 {
				return i + 1, true
			}
		case ',':
			if depth == 0 {
				return i, true
			}
		}
		i++
	}
	return i, depth == 0
}
