package record

// This file keeps the encoding/json implementation of ParseEvent as it was
// before the single-pass decoder, as the reference for the differential
// tests and the benchmark baseline.

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"
)

// oldRawField names a string field the producer writes without JSON escaping,
// with the text that follows its value in the producer's format.
type oldRawField struct{ open, close string }

var (
	oldCacheRawFields = []oldRawField{{`"lfn":"`, `","size":`}}
	oldTPCRawFields   = []oldRawField{
		{`"Client":"`, `","Xeq":{`},
		{`"Src":"`, `","Dst":"`},
		{`"Dst":"`, `","Size":`},
	}
)

// oldTPCWire is the TPC line as the producer writes it.
type oldTPCWire struct {
	TPC    string `json:"TPC"`
	Client string `json:"Client"`
	Xeq    struct {
		Beg  string `json:"Beg"`
		End  string `json:"End"`
		RC   int64  `json:"RC"`
		Strm uint64 `json:"Strm"`
		Type string `json:"Type"`
		IPv  int64  `json:"IPv"`
	} `json:"Xeq"`
	Src  string `json:"Src"`
	Dst  string `json:"Dst"`
	Size uint64 `json:"Size"`
}

// ParseEvent decodes one g-stream record (one line of a g packet) from the
// given provider. It trims trailing NULs and white space. It returns the
// event type, the payload re-encoded as compact JSON in the typed shape of
// docs/records.md, and whether the line could be decoded.
//
// The producer inserts paths without JSON escaping, so for the fields known
// to hold them (C lfn; P Client, Src, Dst) the raw text between the
// producer's fixed delimiters is taken literally and escaped properly;
// such repaired lines count as valid. Lines from T, M and unknown providers
// are kept as generic JSON. A line that still cannot be decoded is returned
// as a JSON string holding the raw text (invalid UTF-8 replaced by U+FFFD),
// with valid false. ParseEvent allocates; g-stream events are rare.
func oldParseEvent(provider byte, line []byte) (EventType, json.RawMessage, bool) {
	line = bytes.TrimLeft(bytes.TrimRight(line, "\x00 \t\r\n"), " \t\r\n")
	typ := ProviderType(provider)
	var (
		v   any
		err error
	)
	switch provider {
	case 'C':
		var c CacheFileClose
		if err = oldDecodeRaw(line, oldCacheRawFields, &c); err == nil && c.Event != "file_close" {
			return oldDecodeGeneric(EventUnknown, line)
		}
		if c.Remotes == nil {
			c.Remotes = []string{}
		}
		v = &c
	case 'P':
		var w oldTPCWire
		if err = oldDecodeRaw(line, oldTPCRawFields, &w); err == nil {
			v, err = w.oldTyped()
		}
	case 'R':
		var t ThrottleUpdate
		err = json.Unmarshal(line, &t)
		v = &t
	case 'O':
		var o OSSStats
		err = json.Unmarshal(line, &o)
		v = &o
	case 'H':
		var h HTTPCounters
		err = json.Unmarshal(line, &h)
		if err == nil && h == nil {
			err = errors.New("http counters: null")
		}
		v = h
	default:
		return oldDecodeGeneric(typ, line)
	}
	if err != nil {
		return typ, rawString(line), false
	}
	out, err := json.Marshal(v)
	if err != nil {
		return typ, rawString(line), false
	}
	return typ, out, true
}

// decodeGeneric re-encodes any valid JSON line (object keys sorted,
// numbers kept exactly, out-of-range ones as strings: the one rule of
// normalizeNumbers, shared with the new code).
func oldDecodeGeneric(typ EventType, line []byte) (EventType, json.RawMessage, bool) {
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return typ, rawString(line), false
	}
	v = normalizeNumbers(v)
	out, err := json.Marshal(v)
	if err != nil {
		return typ, rawString(line), false
	}
	return typ, out, true
}

// decodeRaw decodes line into v. When the line has a backslash (which the
// producer never escapes) or does not parse, the known raw fields are
// re-escaped first.
func oldDecodeRaw(line []byte, fields []oldRawField, v any) error {
	if bytes.IndexByte(line, '\\') < 0 {
		if err := json.Unmarshal(line, v); err == nil {
			return nil
		}
	}
	fixed, ok := oldRepairRaw(line, fields)
	if !ok {
		return errors.New("invalid json")
	}
	return json.Unmarshal(fixed, v)
}

// repairRaw rewrites the values of the given fields with proper JSON
// escaping. Each value is the text between the field's opening text and the
// first following occurrence of its closing text.
func oldRepairRaw(line []byte, fields []oldRawField) ([]byte, bool) {
	out := make([]byte, 0, len(line)+16)
	pos := 0
	for _, f := range fields {
		i := bytes.Index(line[pos:], []byte(f.open))
		if i < 0 {
			return nil, false
		}
		start := pos + i + len(f.open)
		j := bytes.Index(line[start:], []byte(f.close))
		if j < 0 {
			return nil, false
		}
		end := start + j
		out = append(out, line[pos:start]...)
		out = appendEscaped(out, string(line[start:end]))
		pos = end
	}
	return append(out, line[pos:]...), true
}

func (w *oldTPCWire) oldTyped() (*TPCTransfer, error) {
	beg, err := oldParseTPCTime(w.Xeq.Beg)
	if err != nil {
		return nil, err
	}
	end, err := oldParseTPCTime(w.Xeq.End)
	if err != nil {
		return nil, err
	}
	return &TPCTransfer{
		Protocol: w.TPC, Client: w.Client, Begin: beg, End: end,
		RC: w.Xeq.RC, Streams: w.Xeq.Strm, Type: w.Xeq.Type, IPVersion: w.Xeq.IPv,
		Src: w.Src, Dst: w.Dst, Size: w.Size,
	}, nil
}

// parseTPCTime parses the TPC time "YYYY-MM-DDTHH:MM:SS.<frac>Z", where
// <frac> is the number of microseconds printed with at least three digits
// (so ".5000Z" is 5000 µs and ".042Z" is 42 µs, not 42 ms).
func oldParseTPCTime(s string) (time.Time, error) {
	const base = "2006-01-02T15:04:05"
	if len(s) < len(base)+1 || s[len(s)-1] != 'Z' {
		return time.Time{}, errors.New("tpc time: bad format")
	}
	t, err := time.ParseInLocation(base, s[:len(base)], time.UTC)
	if err != nil {
		return time.Time{}, errors.New("tpc time: bad format")
	}
	frac := s[len(base) : len(s)-1]
	if frac == "" {
		return t, nil
	}
	if frac[0] != '.' || len(frac) < 2 || len(frac) > 7 {
		return time.Time{}, errors.New("tpc time: bad fraction")
	}
	us, err := strconv.ParseUint(frac[1:], 10, 32)
	if err != nil || us > 999999 {
		return time.Time{}, errors.New("tpc time: bad fraction")
	}
	return t.Add(time.Duration(us) * time.Microsecond), nil
}

// rawString returns line as a JSON string.
func rawString(line []byte) json.RawMessage { return appendRawString(nil, line) }
