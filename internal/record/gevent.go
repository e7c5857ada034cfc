package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"
)

// The typed g-stream payloads (protocol reference §6). ParseEvent decodes a
// producer line into one of these and re-encodes it, so Event.Data always
// has the documented shape (docs/records.md, "Events").

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
// with valid false. ParseEvent allocates; g-stream events are rare.
func ParseEvent(provider byte, line []byte) (EventType, json.RawMessage, bool) {
	line = bytes.TrimLeft(bytes.TrimRight(line, "\x00 \t\r\n"), " \t\r\n")
	typ := ProviderType(provider)
	var (
		v   any
		err error
	)
	switch provider {
	case 'C':
		var c CacheFileClose
		if err = decodeRaw(line, cacheRawFields, &c); err == nil && c.Event != "file_close" {
			return decodeGeneric(EventUnknown, line)
		}
		if c.Remotes == nil {
			c.Remotes = []string{}
		}
		v = &c
	case 'P':
		var w tpcWire
		if err = decodeRaw(line, tpcRawFields, &w); err == nil {
			v, err = w.typed()
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
		return decodeGeneric(typ, line)
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
// numbers kept exactly).
func decodeGeneric(typ EventType, line []byte) (EventType, json.RawMessage, bool) {
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return typ, rawString(line), false
	}
	out, err := json.Marshal(v)
	if err != nil {
		return typ, rawString(line), false
	}
	return typ, out, true
}

// decodeRaw decodes line into v. When the line has a backslash (which the
// producer never escapes) or does not parse, the known raw fields are
// re-escaped first.
func decodeRaw(line []byte, fields []rawField, v any) error {
	if bytes.IndexByte(line, '\\') < 0 {
		if err := json.Unmarshal(line, v); err == nil {
			return nil
		}
	}
	fixed, ok := repairRaw(line, fields)
	if !ok {
		return errors.New("invalid json")
	}
	return json.Unmarshal(fixed, v)
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

func (w *tpcWire) typed() (*TPCTransfer, error) {
	beg, err := parseTPCTime(w.Xeq.Beg)
	if err != nil {
		return nil, err
	}
	end, err := parseTPCTime(w.Xeq.End)
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

// rawString returns line as a JSON string.
func rawString(line []byte) json.RawMessage {
	return appendString(make([]byte, 0, len(line)+2), string(line))
}
