package packet

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Summary is one xrd.report summary (protocol reference §1): the
// server's identity from the statistics header and every value of every
// section, flattened to dotted names. XML and JSON summaries give the same
// shape:
//
//	<statistics tod="1700000060" ver="v5.6.9" src="xrd.example.org:1094" tos="1700000000"
//	  pgm="xrootd" ins="anon" pid="4321" site="T2_X">
//	  <stats id="link"><num>3</num><in>1000</in>...</stats>
//	  <stats id="oss" v="2"><paths>1<stats id="0"><lp>"/data"</lp><free>10</free>...
//
// gives link.num = 3, link.in = 1000, oss.paths = 1, oss.paths.0.free = 10,
// and the text oss.paths.0.lp = /data. In JSON, {"statistics":{"tod":...,
// "cache":{"rd":{"hits":5}}}} gives cache.rd.hits = 5.
type Summary struct {
	Tod  int64  // the server's time of the report, Unix s
	Tos  int64  // the server's start time, Unix s: a new value is a restart
	Pid  int64  // the server process
	Ver  string // the XRootD version
	Src  string // host:port of the server
	Pgm  string // xrootd or cmsd
	Ins  string // the instance name
	Site string // all.sitename
	// Values are the numeric values in document order, Texts the others.
	Values []SummaryValue
	Texts  []SummaryText
}

// SummaryValue is one numeric value of a summary.
type SummaryValue struct {
	Name  string
	Value float64
}

// SummaryText is one non-numeric value of a summary.
type SummaryText struct {
	Name, Text string
}

// Bounds of a summary: a datagram holds at most 64 KiB, which bounds the
// rest; these keep a hostile one from making the decoder deep or wide.
const (
	maxSummaryDepth  = 16
	maxSummaryValues = 4096
	maxSummaryName   = 256
)

// Summary errors, each a rejection reason.
var (
	ErrSummaryXML    = errors.New("summary: malformed XML")
	ErrSummaryJSON   = errors.New("summary: malformed JSON")
	ErrSummaryHeader = errors.New("summary: no statistics header (tod, src)")
	ErrSummaryBounds = errors.New("summary: too deep, too many values or too long a name")
)

// ParseSummary decodes an XML (first byte '<') or JSON ('{') summary. It
// never panics; a malformed one is an error, one of the ErrSummary values
// (wrapped).
func ParseSummary(b []byte) (*Summary, error) {
	b = bytes.TrimSpace(b)
	isJSON := len(b) > 0 && b[0] == '{'
	if !utf8.Valid(b) {
		if isJSON {
			return nil, ErrSummaryJSON
		}
		return nil, ErrSummaryXML
	}
	var s *Summary
	var err error
	if isJSON {
		s, err = parseJSONSummary(b)
	} else {
		s, err = parseXMLSummary(b)
	}
	if err != nil {
		return nil, err
	}
	if s.Tod == 0 || s.Src == "" {
		return nil, ErrSummaryHeader
	}
	return s, nil
}

func parseXMLSummary(b []byte) (*Summary, error) {
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = true
	s := &Summary{}
	type elem struct {
		name string
		text strings.Builder
	}
	var stack []*elem
	path := func() string {
		var sb strings.Builder
		for i, e := range stack[1:] { // the root (statistics) is not named
			if i > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(e.name)
		}
		return sb.String()
	}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, ErrSummaryXML
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if len(stack) >= maxSummaryDepth {
				return nil, ErrSummaryBounds
			}
			name := t.Name.Local
			if len(stack) == 0 {
				if name != "statistics" {
					return nil, ErrSummaryHeader
				}
				for _, a := range t.Attr {
					s.header(a.Name.Local, a.Value)
				}
			} else if name == "stats" {
				for _, a := range t.Attr {
					if a.Name.Local == "id" {
						name = a.Value
					}
				}
			}
			stack = append(stack, &elem{name: name})
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text.Write(t)
			}
		case xml.EndElement:
			if len(stack) == 0 {
				return nil, ErrSummaryXML
			}
			if len(stack) > 1 {
				if err := s.add(path(), stack[len(stack)-1].text.String()); err != nil {
					return nil, err
				}
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 0 || len(b) == 0 {
		return nil, ErrSummaryXML
	}
	return s, nil
}

// summaryHeader names the attributes of the statistics header, the
// numbers first (Summary.header).
var summaryHeader = [...]string{"tod", "tos", "pid", "ver", "src", "pgm", "ins", "site"}

// header sets the field of the statistics header named k (summaryHeader);
// it ignores other names.
func (s *Summary) header(k, v string) {
	nums := [...]*int64{&s.Tod, &s.Tos, &s.Pid}
	texts := [...]*string{&s.Ver, &s.Src, &s.Pgm, &s.Ins, &s.Site}
	switch i := slices.Index(summaryHeader[:], k); {
	case i < 0:
	case i < len(nums):
		*nums[i], _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	default:
		*texts[i-len(nums)] = v
	}
}

// add records the value of name: a number, else a text (quotes around
// it, as oss paths have, removed); an empty one is a section, not a value.
func (s *Summary) add(name, v string) error {
	v = strings.TrimSpace(v)
	if v == "" || name == "" {
		return nil
	}
	if len(name) > maxSummaryName || len(s.Values)+len(s.Texts) >= maxSummaryValues {
		return ErrSummaryBounds
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
		s.Values = append(s.Values, SummaryValue{name, f})
		return nil
	}
	s.Texts = append(s.Texts, SummaryText{name, strings.Trim(v, `"`)})
	return nil
}

func parseJSONSummary(b []byte) (*Summary, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var top map[string]any
	if err := d.Decode(&top); err != nil {
		return nil, ErrSummaryJSON
	}
	if d.More() {
		return nil, ErrSummaryJSON
	}
	st, ok := top["statistics"].(map[string]any)
	if !ok {
		return nil, ErrSummaryHeader
	}
	s := &Summary{}
	for _, k := range summaryHeader {
		switch v := st[k].(type) {
		case json.Number:
			s.header(k, v.String())
		case string:
			s.header(k, v)
		}
		delete(st, k)
	}
	if err := s.walkJSON("", st, 1); err != nil {
		return nil, err
	}
	return s, nil
}

// walkJSON adds the values under v, named from prefix, in key order.
func (s *Summary) walkJSON(prefix string, v any, depth int) error {
	if depth > maxSummaryDepth {
		return ErrSummaryBounds
	}
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := s.walkJSON(join(k), v[k], depth+1); err != nil {
				return err
			}
		}
	case []any:
		for i, x := range v {
			if err := s.walkJSON(join(strconv.Itoa(i)), x, depth+1); err != nil {
				return err
			}
		}
	case json.Number:
		return s.add(prefix, v.String())
	case string:
		if v == "" {
			return nil
		}
		if len(prefix) > maxSummaryName || len(s.Values)+len(s.Texts) >= maxSummaryValues {
			return ErrSummaryBounds
		}
		s.Texts = append(s.Texts, SummaryText{prefix, v})
	case bool:
		b := 0.0
		if v {
			b = 1
		}
		if len(s.Values)+len(s.Texts) >= maxSummaryValues {
			return ErrSummaryBounds
		}
		s.Values = append(s.Values, SummaryValue{prefix, b})
	}
	return nil
}
