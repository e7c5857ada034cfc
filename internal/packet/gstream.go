package packet

import (
	"bytes"
	"encoding/binary"
)

// GStreamHeaderSize is the size of a binary g-stream header (§5).
const GStreamHeaderSize = 24

// g-stream provider types (§5).
const (
	ProviderCache    byte = 'C' // XCache file_close
	ProviderTPC      byte = 'P' // third-party copy
	ProviderThrottle byte = 'R' // throttle_update
	ProviderOSS      byte = 'O' // oss_stats
	ProviderHTTP     byte = 'H' // HTTP counters
	ProviderTCPMon   byte = 'T' // tcpmon plugin
	ProviderCCM      byte = 'M' // cache context management plugin
)

// GStream is a decoded binary g-stream packet: header fields and its JSON
// lines.
type GStream struct {
	Header
	TBeg, TEnd int32  // Unix s of the first and last record
	Provider   byte   // provider type character
	SID        uint64 // server id (low 48 bits)
	body       []byte
}

// DecodeGStream decodes a binary g-stream packet. It must carry at least
// one non-empty record (ErrEmptyText): producers never send empty buffers.
func DecodeGStream(b []byte) (GStream, error) {
	h, err := parseHeaderCode(b, CodeGStream, GStreamHeaderSize)
	if err != nil {
		return GStream{}, err
	}
	if !hasLine(b[GStreamHeaderSize:]) {
		return GStream{}, ErrEmptyText
	}
	return GStream{
		Header:   h,
		TBeg:     int32(binary.BigEndian.Uint32(b[8:12])),
		TEnd:     int32(binary.BigEndian.Uint32(b[12:16])),
		Provider: b[16],
		SID:      binary.BigEndian.Uint64(b[16:24]) & sidMask,
		body:     b[GStreamHeaderSize:],
	}, nil
}

// Lines returns an iterator over the packet's records.
func (g *GStream) Lines() LineIter { return LineIter{rest: g.body} }

// LineIter iterates over newline-separated records, dropping the NUL that
// ends the last one and skipping empty lines (§5, §9.13).
type LineIter struct {
	rest []byte
	line []byte
}

// Next advances to the next non-empty line.
func (it *LineIter) Next() bool {
	for len(it.rest) > 0 {
		var line []byte
		if i := bytes.IndexByte(it.rest, '\n'); i >= 0 {
			line, it.rest = it.rest[:i], it.rest[i+1:]
		} else {
			line, it.rest = it.rest, nil
		}
		if i := bytes.IndexByte(line, 0); i >= 0 {
			line = line[:i]
		}
		for len(line) > 0 && (line[len(line)-1] == '\r' || line[len(line)-1] == ' ') {
			line = line[:len(line)-1]
		}
		if len(line) > 0 {
			it.line = line
			return true
		}
	}
	return false
}

// Line returns the current line, a view into the datagram.
func (it *LineIter) Line() []byte { return it.line }

// TextGStream is a text datagram of a text-header g-stream (§6.5): a
// g-stream packet with a JSON or CGI header line, an ident record ('=') or a
// dict record ('d', 'i'). Its byte slices are views into the datagram.
type TextGStream struct {
	CGI      bool   // CGI form, else JSON
	Code     byte   // 'g', '=', 'd' or 'i'
	Pseq     uint16 // 0..999
	Stod     uint32
	SID      uint64
	Provider byte   // gs.type, for 'g' and dict records
	TBeg     uint32 // 'g' only
	TEnd     uint32 // 'g' only
	DictID   uint32 // dict records only
	// Data is the dict record's text (unescaped as the producer sent it).
	Data []byte
	// Src is the optional server description (sitehdr ... fullhdr): in
	// JSON the object after "src": including its braces, in CGI the
	// `&site=...&host=...` pairs. Empty when absent.
	Src []byte
	// Header is the header line of a 'g' datagram, or the whole ident or
	// dict record (without its closing NUL).
	Header []byte
	body   []byte
}

// DecodeTextGStream decodes a text-header g-stream datagram of either form.
// The header's numbers are found by key; unknown keys (the src block) are
// skipped. A 'g' datagram must carry at least one record (ErrEmptyText).
//
// The CGI header of a 'g' datagram ends at the first newline after
// "gs.tend=" (§6.5: the default header has a stray newline before
// "&gs.type", and the bytes between the gs.tend value and the newline are
// undefined), so only the leading digits of gs.tend are read.
func DecodeTextGStream(b []byte) (TextGStream, error) {
	var t TextGStream
	var code byte
	switch Classify(b) {
	case KindTextGStream:
		// {"code":"X"
		if len(b) < 11 || b[10] != '"' {
			return t, ErrSyntax
		}
		code = b[9]
	case KindCGIGStream:
		t.CGI = true
		if len(b) < 6 {
			return t, ErrSyntax
		}
		code = b[5]
	default:
		return t, ErrUnknownCode
	}
	hdr, body := b, []byte(nil)
	if code == 'g' {
		from := 0
		if t.CGI {
			from = bytes.Index(b, []byte("gs.tend="))
			if from < 0 {
				return t, ErrSyntax
			}
		}
		i := bytes.IndexByte(b[from:], '\n')
		if i < 0 {
			return t, ErrEmptyText
		}
		hdr, body = b[:from+i], b[from+i+1:]
	}
	if i := bytes.IndexByte(hdr, 0); i >= 0 {
		hdr = hdr[:i]
	}
	t.Header = hdr
	t.Code = code
	pseq, ok := parseUint(trimPad(textValue(hdr, "pseq", t.CGI)))
	if !ok || pseq > 999 {
		return t, ErrSyntax
	}
	t.Pseq = uint16(pseq)
	stod, ok := parseUint(trimPad(textValue(hdr, "stod", t.CGI)))
	if !ok || stod > 0xFFFFFFFF {
		return t, ErrSyntax
	}
	t.Stod = uint32(stod)
	sid := textValue(hdr, "sid", t.CGI)
	if t.SID, ok = parseUint(trimPad(sid)); !ok {
		return t, ErrSyntax
	}
	t.Src = textSrc(hdr, sid, t.CGI)
	typeKey, tbegKey, tendKey := "type", "tbeg", "tend"
	if t.CGI {
		typeKey, tbegKey, tendKey = "gs.type", "gs.tbeg", "gs.tend"
	}
	switch t.Code {
	case 'g':
		typ := textValue(hdr, typeKey, t.CGI)
		if len(typ) != 1 {
			return t, ErrSyntax
		}
		t.Provider = typ[0]
		v, ok1 := parseUint(trimPad(textValue(hdr, tbegKey, t.CGI)))
		w, ok2 := parseUint(leadingDigits(trimPad(textValue(hdr, tendKey, t.CGI))))
		if !ok1 || !ok2 || v > 0xFFFFFFFF || w > 0xFFFFFFFF {
			return t, ErrSyntax
		}
		t.TBeg, t.TEnd = uint32(v), uint32(w)
		if !hasLine(body) {
			return t, ErrEmptyText
		}
		t.body = body
	case '=':
	case 'd', 'i':
		if typ := textValue(hdr, typeKey, t.CGI); len(typ) == 1 {
			t.Provider = typ[0]
		}
		did, ok := parseUint(textValue(hdr, "did", t.CGI))
		if !ok || did > 0xFFFFFFFF {
			return t, ErrSyntax
		}
		t.DictID = uint32(did)
		t.Data = textValue(hdr, "data", t.CGI)
	default:
		return t, ErrUnknownCode
	}
	return t, nil
}

// hasLine reports whether body holds at least one non-empty record.
func hasLine(body []byte) bool {
	it := LineIter{rest: body}
	return it.Next()
}

// leadingDigits returns the decimal digits at the start of b.
func leadingDigits(b []byte) []byte {
	for i, c := range b {
		if c < '0' || c > '9' {
			return b[:i]
		}
	}
	return b
}

// textSrc returns the src block of a text header whose sid value is the
// view sid into hdr (see TextGStream.Src).
func textSrc(hdr, sid []byte, cgi bool) []byte {
	if !cgi {
		i := bytes.Index(hdr, []byte(`"src":{`))
		if i < 0 {
			return nil
		}
		v := hdr[i+6:]
		if j := bytes.IndexByte(v, '}'); j >= 0 {
			return v[:j+1]
		}
		return nil
	}
	// sid is a subslice of hdr: its end offset follows from the capacities.
	end := cap(hdr) - cap(sid) + len(sid)
	if end < 0 || end > len(hdr) {
		return nil
	}
	v := hdr[end:]
	if i := bytes.Index(v, []byte("&gs.")); i >= 0 {
		v = v[:i]
	}
	if len(v) > 0 && v[0] == '\n' { // the default header's stray newline
		v = v[1:]
	}
	if len(v) == 0 || v[0] != '&' {
		return nil
	}
	return v
}

// Lines returns an iterator over the records of a 'g' datagram.
func (t *TextGStream) Lines() LineIter { return LineIter{rest: t.body} }

// trimPad drops the space (JSON) or '+' (CGI) padding of numbers.
func trimPad(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '+') {
		b = b[1:]
	}
	return b
}

// textValue finds key in a JSON or CGI header and returns its raw value. In
// JSON, a string value is returned without quotes ("data" runs to the last
// quote before the closing brace, since the producer does not escape it);
// other values run to the next ',' or '}'. In CGI, values run to the next
// '&' or newline (except "data", which runs to the end).
func textValue(hdr []byte, key string, cgi bool) []byte {
	for off := 0; off < len(hdr); {
		i := bytes.Index(hdr[off:], []byte(key))
		if i < 0 {
			return nil
		}
		i += off
		j := i + len(key)
		if cgi && (i == 0 || hdr[i-1] == '&' || hdr[i-1] == '\n') && j < len(hdr) && hdr[j] == '=' {
			return cgiValue(hdr[j+1:], key)
		}
		if !cgi && i > 0 && hdr[i-1] == '"' && j+1 < len(hdr) && hdr[j] == '"' && hdr[j+1] == ':' {
			return jsonValue(hdr[j+2:], key)
		}
		off = j
	}
	return nil
}

// cgiValue returns the CGI value v of key up to the next '&' or newline
// (all of it for "data").
func cgiValue(v []byte, key string) []byte {
	if key == "data" {
		return v
	}
	for k, c := range v {
		if c == '&' || c == '\n' {
			return v[:k]
		}
	}
	return v
}

// jsonValue returns the JSON value v of key: a string without its quotes
// ("data" up to its last quote), anything else up to the next ',' or '}'.
func jsonValue(v []byte, key string) []byte {
	if len(v) > 0 && v[0] == '"' {
		v = v[1:]
		if key == "data" {
			if k := bytes.LastIndexByte(v, '"'); k >= 0 {
				return v[:k]
			}
			return v
		}
		if k := bytes.IndexByte(v, '"'); k >= 0 {
			return v[:k]
		}
		return v
	}
	if k := bytes.IndexAny(v, ",}"); k >= 0 {
		v = v[:k]
	}
	return v
}
