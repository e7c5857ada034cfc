package record

import (
	"encoding/json"
	"testing"
	"time"
)

// Lines as the producers format them (XrdPfc.cc, XrdXrootdTpcMon.cc,
// XrdThrottleManager.cc, XrdOssStatsFileSystem.cc, XrdHttpMon.cc).
const (
	pfcLine = `{"event":"file_close","lfn":"/store/mc/f.root","size":2147483648,"blk_size":1048576,` +
		`"n_blks":2048,"n_blks_done":1024,"access_cnt":3,"attach_t":1758000400,"detach_t":1758000460,` +
		`"remotes":["origin.example.org:1094"],"b_hit":536870912,"b_miss":268435456,"b_bypass":0,` +
		`"b_todisk":268435456,"b_prefetch":134217728,"n_cks_errs":0}` + "\x00"
	tpcLine = `{"TPC":"http","Client":"cmsprod.1234:56@wn01.example.edu","Xeq":{"Beg":"2026-03-01T12:00:00.5000Z",` +
		`"End":"2026-03-01T12:01:40.042Z","RC":0,"Strm":4,"Type":"pull","IPv":6},` +
		`"Src":"https://origin.example.org:1094//store/a.root","Dst":"xroot://localhost//data/a.root","Size":1048576}`
)

func TestParseEvent(t *testing.T) {
	cases := []struct {
		name     string
		provider byte
		line     string
		typ      EventType
		valid    bool
		data     string
	}{
		{
			name: "pfc file_close", provider: 'C', line: pfcLine, typ: EventCacheFileClose, valid: true,
			data: `{"event":"file_close","lfn":"/store/mc/f.root","size":2147483648,"blk_size":1048576,` +
				`"n_blks":2048,"n_blks_done":1024,"access_cnt":3,"attach_t":1758000400,"detach_t":1758000460,` +
				`"remotes":["origin.example.org:1094"],"b_hit":536870912,"b_miss":268435456,"b_bypass":0,` +
				`"b_todisk":268435456,"b_prefetch":134217728,"n_cks_errs":0}`,
		},
		{
			name: "pfc unescaped quote and backslash in lfn", provider: 'C', typ: EventCacheFileClose, valid: true,
			line: `{"event":"file_close","lfn":"/data/we"ird\path\n.root","size":1,"blk_size":2,"n_blks":1,` +
				`"n_blks_done":1,"access_cnt":1,"attach_t":5,"detach_t":6,"remotes":[],"b_hit":1,"b_miss":0,` +
				`"b_bypass":0,"n_cks_errs":0}` + "\x00",
			data: `{"event":"file_close","lfn":"/data/we\"ird\\path\\n.root","size":1,"blk_size":2,"n_blks":1,` +
				`"n_blks_done":1,"access_cnt":1,"attach_t":5,"detach_t":6,"remotes":[],"b_hit":1,"b_miss":0,` +
				`"b_bypass":0,"b_todisk":0,"b_prefetch":0,"n_cks_errs":0}`,
		},
		{
			name: "pfc non-UTF-8 lfn", provider: 'C', typ: EventCacheFileClose, valid: true,
			line: "{\"event\":\"file_close\",\"lfn\":\"/d/\xff\xfe.root\",\"size\":1,\"remotes\":[]}",
			data: `{"event":"file_close","lfn":"/d/` + "\ufffd\ufffd" + `.root","size":1,"blk_size":0,"n_blks":0,` +
				`"n_blks_done":0,"access_cnt":0,"attach_t":0,"detach_t":0,"remotes":[],"b_hit":0,"b_miss":0,` +
				`"b_bypass":0,"b_todisk":0,"b_prefetch":0,"n_cks_errs":0}`,
		},
		{
			name: "pfc truncated line", provider: 'C', typ: EventCacheFileClose, valid: false,
			line: "{\"event\":\"file_close\",\"lfn\":\"/a\xff<b>\" broken\x00",
			data: `"{\"event\":\"file_close\",\"lfn\":\"/a\ufffd\u003cb\u003e\" broken"`,
		},
		{
			name: "tpc fraction quirk", provider: 'P', line: tpcLine, typ: EventTPC, valid: true,
			data: `{"protocol":"http","client":"cmsprod.1234:56@wn01.example.edu",` +
				`"begin":"2026-03-01T12:00:00.005Z","end":"2026-03-01T12:01:40.000042Z","rc":0,"streams":4,` +
				`"type":"pull","ip_version":6,"src":"https://origin.example.org:1094//store/a.root",` +
				`"dst":"xroot://localhost//data/a.root","size":1048576}`,
		},
		{
			name: "tpc unescaped paths", provider: 'P', typ: EventTPC, valid: true,
			line: `{"TPC":"xroot","Client":"u.1:2@h","Xeq":{"Beg":"2026-03-01T12:00:00.123456Z","End":"2026-03-01T12:00:01.000Z",` +
				`"RC":3010,"Strm":1,"Type":"push","IPv":4},"Src":"xroot://h:1094//a\b"c","Dst":"root://d//x\y","Size":0}` + "\x00",
			data: `{"protocol":"xroot","client":"u.1:2@h","begin":"2026-03-01T12:00:00.123456Z","end":"2026-03-01T12:00:01Z",` +
				`"rc":3010,"streams":1,"type":"push","ip_version":4,"src":"xroot://h:1094//a\\b\"c","dst":"root://d//x\\y","size":0}`,
		},
		{
			name: "tpc bad time", provider: 'P', typ: EventTPC, valid: false,
			line: `{"TPC":"xroot","Client":"c","Xeq":{"Beg":"yesterday","End":"2026-03-01T12:00:01.000Z","RC":0,"Strm":1,"Type":"push","IPv":4},"Src":"a","Dst":"b","Size":0}`,
			data: `"{\"TPC\":\"xroot\",\"Client\":\"c\",\"Xeq\":{\"Beg\":\"yesterday\",\"End\":\"2026-03-01T12:00:01.000Z\",\"RC\":0,\"Strm\":1,\"Type\":\"push\",\"IPv\":4},\"Src\":\"a\",\"Dst\":\"b\",\"Size\":0}"`,
		},
		{
			name: "throttle", provider: 'R', typ: EventThrottle, valid: true,
			line: `{"event":"throttle_update","io_wait":12.5,"io_active":3,"io_total":98765}` + "\n",
			data: `{"event":"throttle_update","io_wait":12.5,"io_active":3,"io_total":98765}`,
		},
		{
			name: "oss", provider: 'O', typ: EventOSS, valid: true,
			line: `{"event":"oss_stats","reads":10,"writes":2,"slow_reads":1,"open_t":0.0123,"slow_chmod_t":1.5000}`,
			data: `{"event":"oss_stats","reads":10,"writes":2,"stats":0,"pgreads":0,"pgwrites":0,"readvs":0,` +
				`"readv_segs":0,"dirlists":0,"dirlist_ents":0,"truncates":0,"unlinks":0,"chmods":0,"opens":0,` +
				`"renames":0,"slow_reads":1,"slow_writes":0,"slow_stats":0,"slow_pgreads":0,"slow_pgwrites":0,` +
				`"slow_readvs":0,"slow_readv_segs":0,"slow_dirlists":0,"slow_dirlist_ents":0,"slow_truncates":0,` +
				`"slow_unlinks":0,"slow_chmods":0,"slow_opens":0,"slow_renames":0,"open_t":0.0123,"read_t":0,` +
				`"readv_t":0,"pgread_t":0,"write_t":0,"pgwrite_t":0,"dirlist_t":0,"stat_t":0,"truncate_t":0,` +
				`"unlink_t":0,"rename_t":0,"chmod_t":0,"slow_open_t":0,"slow_read_t":0,"slow_readv_t":0,` +
				`"slow_pgread_t":0,"slow_write_t":0,"slow_pgwrite_t":0,"slow_dirlist_t":0,"slow_stat_t":0,` +
				`"slow_truncate_t":0,"slow_unlink_t":0,"slow_rename_t":0,"slow_chmod_t":1.5}`,
		},
		{
			name: "http", provider: 'H', typ: EventHTTP, valid: true,
			line: `{"HTTP_PUT_201":{"count":2,"errors_network":0,"errors_xrootd":0,"success":2,"duration_seconds":0.25},` +
				`"HTTP_GET_200":{"count":5,"errors_network":1,"errors_xrootd":0,"success":4,"duration_seconds":1.5}}`,
			data: `{"HTTP_GET_200":{"count":5,"errors_network":1,"errors_xrootd":0,"success":4,"duration_seconds":1.5},` +
				`"HTTP_PUT_201":{"count":2,"errors_network":0,"errors_xrootd":0,"success":2,"duration_seconds":0.25}}`,
		},
		{
			name: "tcpmon generic", provider: 'T', typ: EventTCPMon, valid: true,
			line: ` {"z":1, "a":{"rtt":12345678901234567890,"s":"<x>"}}` + "\x00\x00",
			data: `{"a":{"rtt":12345678901234567890,"s":"\u003cx\u003e"},"z":1}`,
		},
		{
			name: "unknown provider invalid", provider: 'Z', typ: EventUnknown, valid: false,
			line: "not json\x01",
			data: `"not json\u0001"`,
		},
		{
			name: "pfc other event is generic", provider: 'C', typ: EventUnknown, valid: true,
			line: `{"event":"purge","n":1}`,
			data: `{"event":"purge","n":1}`,
		},
		{
			name: "http null", provider: 'H', typ: EventHTTP, valid: false,
			line: `null`,
			data: `"null"`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			typ, data, valid := ParseEvent(c.provider, []byte(c.line))
			if typ != c.typ || valid != c.valid {
				t.Errorf("got type %q valid %v, want %q %v", typ, valid, c.typ, c.valid)
			}
			if string(data) != c.data {
				t.Errorf("data\n got: %s\nwant: %s", data, c.data)
			}
			if !json.Valid(data) {
				t.Errorf("data is not valid JSON: %s", data)
			}
		})
	}
}

func TestParseTPCTime(t *testing.T) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"2026-03-01T12:00:00.000Z", base, true},
		{"2026-03-01T12:00:00.999Z", base.Add(999 * time.Microsecond), true},
		{"2026-03-01T12:00:00.5000Z", base.Add(5 * time.Millisecond), true},
		{"2026-03-01T12:00:00.999999Z", base.Add(999999 * time.Microsecond), true},
		{"2026-03-01T12:00:00Z", base, true},
		{"2026-03-01T12:00:00.1234567Z", time.Time{}, false},
		{"2026-03-01T12:00:00.12x Z", time.Time{}, false},
		{"2026-03-01 12:00:00.000Z", time.Time{}, false},
		{"", time.Time{}, false},
	}
	for _, c := range cases {
		got, err := parseTPCTime(c.in)
		if (err == nil) != c.ok || !got.Equal(c.want) {
			t.Errorf("parseTPCTime(%q) = %v, %v; want %v ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

// TestParseEventOutOfRangeNumbers: numbers a float64 cannot hold are stored
// as their text in a JSON string, so no consumer (PostgreSQL's numeric,
// JSON decoders) refuses the event; numbers it holds stay exact.
func TestParseEventOutOfRangeNumbers(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`{"a":1e200000}`, `{"a":"1e200000"}`},
		{`{"a":-1e400}`, `{"a":"-1e400"}`},
		{`{"a":1E-400,"b":[0.0,0e5,-0]}`, `{"a":"1E-400","b":[0.0,0e5,-0]}`},
		{`{"a":{"b":[1,2e999]}}`, `{"a":{"b":[1,"2e999"]}}`},
		{`{"a":123456789012345678901234567890,"b":1.5e300}`, `{"a":123456789012345678901234567890,"b":1.5e300}`},
	} {
		for _, provider := range []byte{'T', 'M', 'Z'} {
			_, data, ok := ParseEvent(provider, []byte(tc.line))
			if !ok || string(data) != tc.want {
				t.Errorf("%c %s: %s (valid %v), want %s", provider, tc.line, data, ok, tc.want)
			}
			var v any
			if err := json.Unmarshal(data, &v); err != nil {
				t.Errorf("%c %s: stored payload does not decode: %v", provider, tc.line, err)
			}
		}
	}
}
