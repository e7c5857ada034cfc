package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// The typed g-stream payloads (protocol reference §6). ParseEvent decodes a
// producer line into one of these and re-encodes it, so Event.Data always
// has the documented shape (docs/records.md, "Events"). The field order
// defines the order of the JSON members; the append* encoders below write
// them in that order, as encoding/json would.

// CacheFileClose is the payload of a provider C (XCache/pfc) file_close
// event: one cache file detached after an access. Field names are the
// producer's.
type CacheFileClose struct {
	Event     string   `json:"event"`       // "file_close"
	LFN       string   `json:"lfn"`         // cache-local path
	Size      int64    `json:"size"`        // file size, bytes
	BlkSize   int64    `json:"blk_size"`    // cache block size, bytes
	NBlks     int64    `json:"n_blks"`      // blocks in the file
	NBlksDone int64    `json:"n_blks_done"` // blocks present in the cache
	AccessCnt int64    `json:"access_cnt"`  // recorded accesses
	AttachT   int64    `json:"attach_t"`    // Unix s this access opened the file
	DetachT   int64    `json:"detach_t"`    // Unix s it closed
	Remotes   []string `json:"remotes"`     // origin endpoints used ("host:port")
	BHit      int64    `json:"b_hit"`       // bytes served from the cache
	BMiss     int64    `json:"b_miss"`      // bytes fetched from the remote and cached
	BBypass   int64    `json:"b_bypass"`    // bytes read from the remote without caching
	BToDisk   int64    `json:"b_todisk"`    // bytes written to cache storage (v5.4+)
	BPrefetch int64    `json:"b_prefetch"`  // bytes prefetched (v5.4+)
	NCksErrs  int64    `json:"n_cks_errs"`  // checksum errors
}

// TPCTransfer is the payload of a provider P third-party-copy event, with
// the producer's names (TPC, Client, Xeq.*, Src, Dst, Size) made readable
// and its begin and end times parsed (the fraction of a second on the wire
// is microseconds printed with at least 3 digits).
type TPCTransfer struct {
	Protocol  string    `json:"protocol"`   // TPC: "xroot" or "http"
	Client    string    `json:"client"`     // Client: trace id user.pid:fd@host
	Begin     time.Time `json:"begin"`      // Xeq.Beg, UTC
	End       time.Time `json:"end"`        // Xeq.End, UTC
	RC        int64     `json:"rc"`         // Xeq.RC: 0 success, else an error code
	Streams   uint64    `json:"streams"`    // Xeq.Strm
	Type      string    `json:"type"`       // Xeq.Type: "push" or "pull"
	IPVersion int64     `json:"ip_version"` // Xeq.IPv: 4 or 6
	Src       string    `json:"src"`        // source URL
	Dst       string    `json:"dst"`        // destination URL
	Size      uint64    `json:"size"`       // bytes
}

// ThrottleUpdate is the payload of a provider R throttle_update event.
// All counters are cumulative since the server started.
type ThrottleUpdate struct {
	Event    string  `json:"event"`     // "throttle_update"
	IOWait   float64 `json:"io_wait"`   // cumulative I/O wait, s
	IOActive int64   `json:"io_active"` // I/O operations in flight
	IOTotal  uint64  `json:"io_total"`  // cumulative I/O operations
}

// OSSStats is the payload of a provider O oss_stats event: cumulative
// operation counts, and cumulative seconds spent in them, since the server
// started; the slow_ variants count only operations slower than the
// configured threshold (fsstats.slowop, default 1 s).
type OSSStats struct {
	Event string `json:"event"` // "oss_stats" or "oss_stats_<runmode>"

	Reads       uint64 `json:"reads"`
	Writes      uint64 `json:"writes"`
	Stats       uint64 `json:"stats"`
	PgReads     uint64 `json:"pgreads"`
	PgWrites    uint64 `json:"pgwrites"`
	Readvs      uint64 `json:"readvs"`
	ReadvSegs   uint64 `json:"readv_segs"`
	Dirlists    uint64 `json:"dirlists"`
	DirlistEnts uint64 `json:"dirlist_ents"`
	Truncates   uint64 `json:"truncates"`
	Unlinks     uint64 `json:"unlinks"`
	Chmods      uint64 `json:"chmods"`
	Opens       uint64 `json:"opens"`
	Renames     uint64 `json:"renames"`

	SlowReads       uint64 `json:"slow_reads"`
	SlowWrites      uint64 `json:"slow_writes"`
	SlowStats       uint64 `json:"slow_stats"`
	SlowPgReads     uint64 `json:"slow_pgreads"`
	SlowPgWrites    uint64 `json:"slow_pgwrites"`
	SlowReadvs      uint64 `json:"slow_readvs"`
	SlowReadvSegs   uint64 `json:"slow_readv_segs"`
	SlowDirlists    uint64 `json:"slow_dirlists"`
	SlowDirlistEnts uint64 `json:"slow_dirlist_ents"`
	SlowTruncates   uint64 `json:"slow_truncates"`
	SlowUnlinks     uint64 `json:"slow_unlinks"`
	SlowChmods      uint64 `json:"slow_chmods"`
	SlowOpens       uint64 `json:"slow_opens"`
	SlowRenames     uint64 `json:"slow_renames"`

	OpenT     float64 `json:"open_t"`
	ReadT     float64 `json:"read_t"`
	ReadvT    float64 `json:"readv_t"`
	PgReadT   float64 `json:"pgread_t"`
	WriteT    float64 `json:"write_t"`
	PgWriteT  float64 `json:"pgwrite_t"`
	DirlistT  float64 `json:"dirlist_t"`
	StatT     float64 `json:"stat_t"`
	TruncateT float64 `json:"truncate_t"`
	UnlinkT   float64 `json:"unlink_t"`
	RenameT   float64 `json:"rename_t"`
	ChmodT    float64 `json:"chmod_t"`

	SlowOpenT     float64 `json:"slow_open_t"`
	SlowReadT     float64 `json:"slow_read_t"`
	SlowReadvT    float64 `json:"slow_readv_t"`
	SlowPgReadT   float64 `json:"slow_pgread_t"`
	SlowWriteT    float64 `json:"slow_write_t"`
	SlowPgWriteT  float64 `json:"slow_pgwrite_t"`
	SlowDirlistT  float64 `json:"slow_dirlist_t"`
	SlowStatT     float64 `json:"slow_stat_t"`
	SlowTruncateT float64 `json:"slow_truncate_t"`
	SlowUnlinkT   float64 `json:"slow_unlink_t"`
	SlowRenameT   float64 `json:"slow_rename_t"`
	SlowChmodT    float64 `json:"slow_chmod_t"`
}

// HTTPCounter is one HTTP_<VERB>_<STATUS> entry of a provider H event.
// All values are cumulative since the server started.
type HTTPCounter struct {
	Count           uint64  `json:"count"`
	ErrorsNetwork   uint64  `json:"errors_network"`
	ErrorsXrootd    uint64  `json:"errors_xrootd"`
	Success         uint64  `json:"success"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// HTTPCounters is the payload of a provider H event, keyed by
// "HTTP_<VERB>_<STATUS>" (only keys with a non-zero count appear).
type HTTPCounters map[string]HTTPCounter

// tpcWire is the TPC line as the producer writes it.
type tpcWire struct {
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

// rawField names a string field the producer writes without JSON escaping,
// with the text that follows its value in the producer's format.
type rawField struct{ open, close string }

var (
	cacheRawFields = []rawField{{`"lfn":"`, `","size":`}}
	tpcRawFields   = []rawField{
		{`"Client":"`, `","Xeq":{`},
		{`"Src":"`, `","Dst":"`},
		{`"Dst":"`, `","Size":`},
	}
)

// ProviderType returns the event type of a g-stream provider character.
func ProviderType(provider byte) EventType {
	switch provider {
	case 'C':
		return EventCacheFileClose
	case 'P':
		return EventTPC
	case 'R':
		return EventThrottle
	case 'O':
		return EventOSS
	case 'H':
		return EventHTTP
	case 'T':
		return EventTCPMon
	case 'M':
		return EventCCM
	}
	return EventUnknown
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
// with valid false.
//
// The common C and P lines, as the producer writes them, take a
// single-pass fast path (fastCacheFileClose, fastTPCTransfer). Other lines
// are decoded with github.com/go-json-experiment/json under v1Options and
// encoded by hand. Both give the bytes encoding/json's Unmarshal and
// Marshal gave, at a fraction of the cost (see BenchmarkTypeEvent and the
// differential tests against the encoding/json implementation).
func ParseEvent(provider byte, line []byte) (EventType, json.RawMessage, bool) {
	typ, out, ok := AppendEvent(nil, provider, line)
	return typ, out, ok
}

// AppendEvent is ParseEvent with the payload appended to dst: it returns
// dst grown by the payload. The common lines are written straight into
// dst's free capacity (an arena's: see the pipeline's typing of events).
func AppendEvent(dst []byte, provider byte, line []byte) (EventType, []byte, bool) {
	line = bytes.TrimLeft(bytes.TrimRight(line, "\x00 \t\r\n"), " \t\r\n")
	if dst == nil {
		dst = make([]byte, 0, len(line)+64)
	}
	typ := ProviderType(provider)
	switch provider {
	case 'C':
		if out, ok := fastCacheFileClose(dst, line); ok {
			return typ, out, true
		}
		var c CacheFileClose
		if err := decodeRaw(line, cacheRawFields, &c); err != nil {
			return typ, appendRawString(dst, line), false
		}
		if c.Event != "file_close" {
			return decodeGeneric(dst, EventUnknown, line)
		}
		return typ, appendCacheFileClose(dst, &c), true
	case 'P':
		if out, ok := fastTPCTransfer(dst, line); ok {
			return typ, out, true
		}
		var w tpcWire
		if err := decodeRaw(line, tpcRawFields, &w); err != nil {
			return typ, appendRawString(dst, line), false
		}
		t, err := w.typed()
		if err != nil {
			return typ, appendRawString(dst, line), false
		}
		return typ, appendTPCTransfer(dst, &t), true
	case 'R':
		var t ThrottleUpdate
		if err := jsonv2.Unmarshal(line, &t, v1Options); err != nil {
			return typ, appendRawString(dst, line), false
		}
		return typ, appendThrottleUpdate(dst, &t), true
	case 'O':
		var o OSSStats
		if err := jsonv2.Unmarshal(line, &o, v1Options); err != nil {
			return typ, appendRawString(dst, line), false
		}
		return typ, appendOSSStats(dst, &o), true
	case 'H':
		var h HTTPCounters
		if err := jsonv2.Unmarshal(line, &h, v1Options); err != nil || h == nil {
			return typ, appendRawString(dst, line), false
		}
		return typ, appendHTTPCounters(dst, h), true
	}
	return decodeGeneric(dst, typ, line)
}

// v1Options make go-json-experiment/json decode the typed payloads as
// encoding/json (v1) does: member names matched case-insensitively but with
// '_' and '-' significant, duplicate names allowed (the last one wins, and
// null leaves a field as it is), and invalid UTF-8 in strings replaced by
// U+FFFD.
var v1Options = jsonv2.JoinOptions(
	jsonv2.MatchCaseInsensitiveNames(true),
	jsonv1.MatchCaseSensitiveDelimiter(true),
	jsonv1.MergeWithLegacySemantics(true),
	jsontext.AllowDuplicateNames(true),
	jsontext.AllowInvalidUTF8(true),
)

// decodeGeneric re-encodes any valid JSON line (object keys sorted,
// numbers kept exactly unless a float64 cannot hold them: see
// normalizeNumbers).
func decodeGeneric(dst []byte, typ EventType, line []byte) (EventType, []byte, bool) {
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return typ, appendRawString(dst, line), false
	}
	v = normalizeNumbers(v)
	out, err := json.Marshal(v)
	if err != nil {
		return typ, appendRawString(dst, line), false
	}
	return typ, append(dst, out...), true
}

// normalizeNumbers replaces, in a decoded JSON value, every number that a
// float64 cannot hold (it overflows to ±Inf, like 1e200000, or underflows to
// zero, like 1e-400) by its text as a JSON string. Every stored event is
// then one that any consumer can load: PostgreSQL's numeric refuses such
// numbers ("value overflows numeric format"), and so do most JSON decoders.
// Numbers a float64 holds are kept exactly as written, large integers too.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		mantissa, _, _ := strings.Cut(strings.ToLower(string(x)), "e")
		if err != nil || (f == 0 && strings.ContainsAny(mantissa, "123456789")) {
			return string(x)
		}
		return x
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
	}
	return v
}

// decodeRaw decodes line into v. When the line has a backslash (which the
// producer never escapes) or does not parse, the known raw fields are
// re-escaped first.
func decodeRaw(line []byte, fields []rawField, v any) error {
	if bytes.IndexByte(line, '\\') < 0 {
		if err := jsonv2.Unmarshal(line, v, v1Options); err == nil {
			return nil
		}
	}
	fixed, ok := repairRaw(line, fields)
	if !ok {
		return errors.New("invalid json")
	}
	return jsonv2.Unmarshal(fixed, v, v1Options)
}

// repairRaw rewrites the values of the given fields with proper JSON
// escaping. Each value is the text between the field's opening text and the
// first following occurrence of its closing text.
func repairRaw(line []byte, fields []rawField) ([]byte, bool) {
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

func (w *tpcWire) typed() (TPCTransfer, error) {
	beg, err := parseTPCTime(w.Xeq.Beg)
	if err != nil {
		return TPCTransfer{}, err
	}
	end, err := parseTPCTime(w.Xeq.End)
	if err != nil {
		return TPCTransfer{}, err
	}
	return TPCTransfer{
		Protocol: w.TPC, Client: w.Client, Begin: beg, End: end,
		RC: w.Xeq.RC, Streams: w.Xeq.Strm, Type: w.Xeq.Type, IPVersion: w.Xeq.IPv,
		Src: w.Src, Dst: w.Dst, Size: w.Size,
	}, nil
}

// parseTPCTime parses the TPC time "YYYY-MM-DDTHH:MM:SS.<frac>Z", where
// <frac> is the number of microseconds printed with at least three digits
// (so ".5000Z" is 5000 µs and ".042Z" is 42 µs, not 42 ms).
func parseTPCTime(s string) (time.Time, error) {
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

// appendRawString appends line as a JSON string.
func appendRawString(dst, line []byte) []byte {
	return appendString(dst, string(line))
}

// The append* encoders write a payload as encoding/json's Marshal does:
// members in struct field order, strings HTML-safe escaped, floats in its
// format, and a nil Remotes as [].

func appendCacheFileClose(b []byte, c *CacheFileClose) []byte {
	b = appendKeyString(b, `{"event":`, c.Event)
	b = appendKeyString(b, `,"lfn":`, c.LFN)
	b = appendKeyInt(b, `,"size":`, c.Size)
	b = appendKeyInt(b, `,"blk_size":`, c.BlkSize)
	b = appendKeyInt(b, `,"n_blks":`, c.NBlks)
	b = appendKeyInt(b, `,"n_blks_done":`, c.NBlksDone)
	b = appendKeyInt(b, `,"access_cnt":`, c.AccessCnt)
	b = appendKeyInt(b, `,"attach_t":`, c.AttachT)
	b = appendKeyInt(b, `,"detach_t":`, c.DetachT)
	b = append(b, `,"remotes":[`...)
	for i, r := range c.Remotes {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, r)
	}
	b = append(b, ']')
	b = appendKeyInt(b, `,"b_hit":`, c.BHit)
	b = appendKeyInt(b, `,"b_miss":`, c.BMiss)
	b = appendKeyInt(b, `,"b_bypass":`, c.BBypass)
	b = appendKeyInt(b, `,"b_todisk":`, c.BToDisk)
	b = appendKeyInt(b, `,"b_prefetch":`, c.BPrefetch)
	b = appendKeyInt(b, `,"n_cks_errs":`, c.NCksErrs)
	return append(b, '}')
}

func appendTPCTransfer(b []byte, t *TPCTransfer) []byte {
	b = appendKeyString(b, `{"protocol":`, t.Protocol)
	b = appendKeyString(b, `,"client":`, t.Client)
	b = appendKeyTime(b, `,"begin":`, t.Begin)
	b = appendKeyTime(b, `,"end":`, t.End)
	b = appendKeyInt(b, `,"rc":`, t.RC)
	b = appendKeyUint(b, `,"streams":`, t.Streams)
	b = appendKeyString(b, `,"type":`, t.Type)
	b = appendKeyInt(b, `,"ip_version":`, t.IPVersion)
	b = appendKeyString(b, `,"src":`, t.Src)
	b = appendKeyString(b, `,"dst":`, t.Dst)
	b = appendKeyUint(b, `,"size":`, t.Size)
	return append(b, '}')
}

func appendThrottleUpdate(b []byte, t *ThrottleUpdate) []byte {
	b = appendKeyString(b, `{"event":`, t.Event)
	b = appendKeyFloat(b, `,"io_wait":`, t.IOWait)
	b = appendKeyInt(b, `,"io_active":`, t.IOActive)
	b = appendKeyUint(b, `,"io_total":`, t.IOTotal)
	return append(b, '}')
}

// ossCountNames and ossTimeNames are the OSSStats members after "event", in
// field order, with the text before each value.
var (
	ossCountNames = [...]string{
		`,"reads":`, `,"writes":`, `,"stats":`, `,"pgreads":`, `,"pgwrites":`, `,"readvs":`,
		`,"readv_segs":`, `,"dirlists":`, `,"dirlist_ents":`, `,"truncates":`, `,"unlinks":`,
		`,"chmods":`, `,"opens":`, `,"renames":`,
		`,"slow_reads":`, `,"slow_writes":`, `,"slow_stats":`, `,"slow_pgreads":`, `,"slow_pgwrites":`,
		`,"slow_readvs":`, `,"slow_readv_segs":`, `,"slow_dirlists":`, `,"slow_dirlist_ents":`,
		`,"slow_truncates":`, `,"slow_unlinks":`, `,"slow_chmods":`, `,"slow_opens":`, `,"slow_renames":`,
	}
	ossTimeNames = [...]string{
		`,"open_t":`, `,"read_t":`, `,"readv_t":`, `,"pgread_t":`, `,"write_t":`, `,"pgwrite_t":`,
		`,"dirlist_t":`, `,"stat_t":`, `,"truncate_t":`, `,"unlink_t":`, `,"rename_t":`, `,"chmod_t":`,
		`,"slow_open_t":`, `,"slow_read_t":`, `,"slow_readv_t":`, `,"slow_pgread_t":`, `,"slow_write_t":`,
		`,"slow_pgwrite_t":`, `,"slow_dirlist_t":`, `,"slow_stat_t":`, `,"slow_truncate_t":`,
		`,"slow_unlink_t":`, `,"slow_rename_t":`, `,"slow_chmod_t":`,
	}
)

func appendOSSStats(b []byte, o *OSSStats) []byte {
	counts := [len(ossCountNames)]uint64{
		o.Reads, o.Writes, o.Stats, o.PgReads, o.PgWrites, o.Readvs, o.ReadvSegs, o.Dirlists,
		o.DirlistEnts, o.Truncates, o.Unlinks, o.Chmods, o.Opens, o.Renames,
		o.SlowReads, o.SlowWrites, o.SlowStats, o.SlowPgReads, o.SlowPgWrites, o.SlowReadvs,
		o.SlowReadvSegs, o.SlowDirlists, o.SlowDirlistEnts, o.SlowTruncates, o.SlowUnlinks,
		o.SlowChmods, o.SlowOpens, o.SlowRenames,
	}
	times := [len(ossTimeNames)]float64{
		o.OpenT, o.ReadT, o.ReadvT, o.PgReadT, o.WriteT, o.PgWriteT, o.DirlistT, o.StatT,
		o.TruncateT, o.UnlinkT, o.RenameT, o.ChmodT,
		o.SlowOpenT, o.SlowReadT, o.SlowReadvT, o.SlowPgReadT, o.SlowWriteT, o.SlowPgWriteT,
		o.SlowDirlistT, o.SlowStatT, o.SlowTruncateT, o.SlowUnlinkT, o.SlowRenameT, o.SlowChmodT,
	}
	b = appendKeyString(b, `{"event":`, o.Event)
	for i, v := range counts {
		b = appendKeyUint(b, ossCountNames[i], v)
	}
	for i, v := range times {
		b = append(b, ossTimeNames[i]...)
		b = appendFloat(b, v)
	}
	return append(b, '}')
}

// appendHTTPCounters writes h with its keys sorted, as encoding/json
// writes a map.
func appendHTTPCounters(b []byte, h HTTPCounters) []byte {
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(h)) {
		if i > 0 {
			b = append(b, ',')
		}
		c := h[k]
		b = appendString(b, k)
		b = appendKeyUint(b, `:{"count":`, c.Count)
		b = appendKeyUint(b, `,"errors_network":`, c.ErrorsNetwork)
		b = appendKeyUint(b, `,"errors_xrootd":`, c.ErrorsXrootd)
		b = appendKeyUint(b, `,"success":`, c.Success)
		b = appendKeyFloat(b, `,"duration_seconds":`, c.DurationSeconds)
		b = append(b, '}')
	}
	return append(b, '}')
}

// The fast paths below type the producer's own compact lines in one pass,
// without reflection, and write the output straight from the input bytes.
// They accept only a strict subset of JSON whose encoding/json decoding is
// plain: no white space, member names matched exactly and at most once, no
// unknown members, strings without escapes or control characters and in
// valid UTF-8, integers without fraction or exponent and short enough not
// to overflow. Anything else returns false, and the caller takes the
// general path, which handles every case (repairs, v1 name matching, null,
// invalid UTF-8, errors).

// scanner reads a line for the fast paths. Its methods return false when
// the text is not in the fast subset.
type scanner struct {
	b []byte
	i int
}

// skip consumes c if it is next.
func (s *scanner) skip(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string and returns its content (which is its value).
func (s *scanner) str() ([]byte, bool) {
	if !s.skip('"') {
		return nil, false
	}
	start, ascii := s.i, true
	for s.i < len(s.b) {
		c := s.b[s.i]
		if plainASCII[c] {
			s.i++
			continue
		}
		switch {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, ascii || utf8.Valid(v)
		case c < utf8.RuneSelf: // '\\' or a control character
			return nil, false
		}
		ascii = false
		s.i++
	}
	return nil, false
}

// plainASCII[c] is true for the ASCII bytes that stand for themselves in a
// JSON string.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// key reads a member name and its colon.
func (s *scanner) key() ([]byte, bool) {
	k, ok := s.str()
	return k, ok && s.skip(':')
}

// digits reads up to max decimal digits without a leading zero.
func (s *scanner) digits(max int) (uint64, bool) {
	start := s.i
	var v uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		v = v*10 + uint64(s.b[s.i]-'0')
		s.i++
	}
	n := s.i - start
	return v, n > 0 && n <= max && (n == 1 || s.b[start] != '0')
}

// int reads an integer of up to 18 digits (which cannot overflow int64).
func (s *scanner) int() (int64, bool) {
	neg := s.skip('-')
	v, ok := s.digits(18)
	if neg {
		return -int64(v), ok
	}
	return int64(v), ok
}

// uint reads an unsigned integer of up to 19 digits.
func (s *scanner) uint() (uint64, bool) { return s.digits(19) }

// strings reads an array of strings and returns the text between its
// brackets, which is its own encoding.
func (s *scanner) strings() ([]byte, bool) {
	if !s.skip('[') {
		return nil, false
	}
	start := s.i
	if s.skip(']') {
		return s.b[start:start], true
	}
	for {
		if v, ok := s.str(); !ok || needsEscape(v) {
			return nil, false
		}
		if s.skip(']') {
			return s.b[start : s.i-1], true
		}
		if !s.skip(',') {
			return nil, false
		}
	}
}

// next consumes the ',' or '}' after a member and reports whether the
// object goes on.
func (s *scanner) next() (more, ok bool) {
	if s.skip(',') {
		return true, true
	}
	return false, s.skip('}')
}

// members reads an object, '{' to '}', calling member for each name with
// the scanner on its value. member reads the value and returns the
// member's bit in *seen (0: a name not in the fast subset); a member seen
// before, or a value member could not read, fails the object.
func (s *scanner) members(seen *uint32, member func(name []byte) (bit uint32, ok bool)) bool {
	if !s.skip('{') {
		return false
	}
	for more := true; more; {
		k, ok := s.key()
		if !ok {
			return false
		}
		bit, ok := member(k)
		if bit == 0 || *seen&bit != 0 || !ok {
			return false
		}
		*seen |= bit
		if more, ok = s.next(); !ok {
			return false
		}
	}
	return true
}

// needsEscape reports whether encoding/json would escape any byte of v, a
// string content that str accepted: the HTML characters, and U+2028 and
// U+2029 (conservatively, any rune starting with their first byte).
func needsEscape(v []byte) bool {
	for _, c := range v {
		if c == '<' || c == '>' || c == '&' || c == 0xe2 {
			return true
		}
	}
	return false
}

// appendStr appends v, a string content that str accepted, as a JSON string.
func appendStr(b, v []byte) []byte {
	if needsEscape(v) {
		return appendString(b, string(v))
	}
	b = append(b, '"')
	b = append(b, v...)
	return append(b, '"')
}

// appendKeyStr appends key and v as appendStr does.
func appendKeyStr(b []byte, key string, v []byte) []byte {
	return appendStr(append(b, key...), v)
}

// cacheMembers are the CacheFileClose member names in field order.
var cacheMembers = [...]string{"event", "lfn", "size", "blk_size", "n_blks", "n_blks_done", "access_cnt",
	"attach_t", "detach_t", "remotes", "b_hit", "b_miss", "b_bypass", "b_todisk", "b_prefetch", "n_cks_errs"}

const (
	cacheEvent   = 0 // the index of "event" in cacheMembers
	cacheLFN     = 1
	cacheRemotes = 9
)

// fastCacheFileClose types a C file_close line on the fast path.
func fastCacheFileClose(dst, line []byte) ([]byte, bool) {
	s := scanner{b: line}
	var (
		ints         [len(cacheMembers)]int64
		lfn, remotes []byte
		seen         uint32
		prev         = -1
	)
	ok := s.members(&seen, func(k []byte) (uint32, bool) {
		m := prev + 1 // the producer's order is the field order
		if m >= len(cacheMembers) || cacheMembers[m] != string(k) {
			if m = slices.Index(cacheMembers[:], string(k)); m < 0 {
				return 0, false
			}
		}
		prev = m
		var ok bool
		switch m {
		case cacheEvent:
			var ev []byte
			ev, ok = s.str()
			ok = ok && string(ev) == "file_close"
		case cacheLFN:
			lfn, ok = s.str()
		case cacheRemotes:
			remotes, ok = s.strings()
		default:
			ints[m], ok = s.int()
		}
		return 1 << m, ok
	})
	if !ok || s.i != len(line) || seen&(1<<cacheEvent) == 0 {
		return nil, false
	}
	b := append(dst, '{')
	for m, name := range cacheMembers {
		if m > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		switch m {
		case cacheEvent:
			b = append(b, `"file_close"`...)
		case cacheLFN:
			b = appendStr(b, lfn)
		case cacheRemotes:
			b = append(b, '[')
			b = append(b, remotes...)
			b = append(b, ']')
		default:
			b = strconv.AppendInt(b, ints[m], 10)
		}
	}
	return append(b, '}'), true
}

// fastTPCTransfer types a P line on the fast path.
func fastTPCTransfer(out, line []byte) ([]byte, bool) {
	var (
		proto, client, src, dst, beg, end, typ []byte
		rc, ipv                                int64
		streams, size                          uint64
		seen                                   uint32
	)
	s := scanner{b: line}
	xeq := func(k []byte) (_ uint32, ok bool) {
		switch string(k) {
		case "Beg":
			beg, ok = s.str()
			return 1 << 6, ok
		case "End":
			end, ok = s.str()
			return 1 << 7, ok
		case "RC":
			rc, ok = s.int()
			return 1 << 8, ok
		case "Strm":
			streams, ok = s.uint()
			return 1 << 9, ok
		case "Type":
			typ, ok = s.str()
			return 1 << 10, ok
		case "IPv":
			ipv, ok = s.int()
			return 1 << 11, ok
		}
		return 0, false
	}
	ok := s.members(&seen, func(k []byte) (_ uint32, ok bool) {
		switch string(k) {
		case "TPC":
			proto, ok = s.str()
			return 1 << 0, ok
		case "Client":
			client, ok = s.str()
			return 1 << 1, ok
		case "Src":
			src, ok = s.str()
			return 1 << 2, ok
		case "Dst":
			dst, ok = s.str()
			return 1 << 3, ok
		case "Size":
			size, ok = s.uint()
			return 1 << 4, ok
		case "Xeq":
			return 1 << 5, s.members(&seen, xeq)
		}
		return 0, false
	})
	if !ok || s.i != len(line) {
		return nil, false
	}
	begT, err := parseTPCTime(string(beg))
	if err != nil {
		return nil, false
	}
	endT, err := parseTPCTime(string(end))
	if err != nil {
		return nil, false
	}
	b := appendKeyStr(out, `{"protocol":`, proto)
	b = appendKeyStr(b, `,"client":`, client)
	b = appendKeyTime(b, `,"begin":`, begT)
	b = appendKeyTime(b, `,"end":`, endT)
	b = appendKeyInt(b, `,"rc":`, rc)
	b = appendKeyUint(b, `,"streams":`, streams)
	b = appendKeyStr(b, `,"type":`, typ)
	b = appendKeyInt(b, `,"ip_version":`, ipv)
	b = appendKeyStr(b, `,"src":`, src)
	b = appendKeyStr(b, `,"dst":`, dst)
	b = appendKeyUint(b, `,"size":`, size)
	return append(b, '}'), true
}
