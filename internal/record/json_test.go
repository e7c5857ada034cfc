package record

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fullRecord has every field set, with hostile text in several strings.
func fullRecord() *Record {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return &Record{
		RecordID:           "0123456789abcdef0123456789abcdef",
		Start:              start,
		End:                start.Add(95*time.Second + 500*time.Millisecond),
		Received:           start.Add(97*time.Second + 123456789),
		ServerIP:           "192.0.2.10",
		ServerHost:         "xrootd.example.org",
		ServerID:           258305997245184,
		ServerStod:         1758000000,
		Site:               "T2_US_Example",
		Instance:           "anon",
		Program:            "xrootd",
		Version:            "v5.8.4",
		Protocol:           "xroot",
		User:               "cmsuser",
		UserDictID:         4242,
		ClientHost:         "[::ffff:198.51.100.7]",
		ClientName:         "worker17.cluster.example.edu",
		IPv6:               true,
		AuthProtocol:       "gsi",
		DN:                 "cmsprod",
		MonInfo:            "/DC=ch/DC=cern/OU=Users/CN=jdoe/CN=123456/CN=Jane \"Q\" Doe::/cms/Role=NULL",
		VO:                 "cms cms",
		Role:               "NULL",
		Groups:             "/cms /cms/uscms",
		ClientRelease:      "v5.6.3",
		AppName:            "cmsRun",
		AppInfo:            "162_https://glidein.cern.ch/162/190501:101553:heewon:crab:RPCEfficiency:SingleMuon:Run2018D-PromptReco-v2_0",
		TokenSubject:       "sub<&>ject",
		TokenUser:          "tokuser",
		TokenOrg:           "https://cms-auth.web.cern.ch/",
		TokenRole:          "prod",
		TokenGroups:        "/cms\u2028/x\u2029",
		Experiment:         2,
		Activity:           -3,
		FileID:             77,
		Path:               "/store/data/Run2026A/\xff\xfebad\x01ctl\ttab\n/file.root",
		FileSize:           2198266271,
		ReadWrite:          true,
		Forced:             true,
		ReadBytes:          2899080,
		ReadvBytes:         355578585,
		WriteBytes:         1024,
		HasOps:             true,
		ReadOps:            18,
		ReadvOps:           28,
		WriteOps:           1,
		ReadvSegs:          599,
		ReadvSegsMin:       1,
		ReadvSegsMax:       300,
		ReadMin:            4096,
		ReadMax:            1048576,
		ReadvMin:           65536,
		ReadvMax:           40000000,
		WriteMin:           1024,
		WriteMax:           1024,
		HasSSQ:             true,
		ReadSqSum:          7.5e12,
		ReadvSqSum:         9.1e15,
		ReadvSegSqSum:      140000,
		WriteSqSum:         1048576,
		RedirectHops:       2,
		RedirectDelayMS:    3000,
		RedirectDelayMaxMS: 9000,
		HasIO:              true,
		IO: &IOProfile{
			Complete: true, Reads: 18, Readvs: 28, Writes: 1, ReadBytes: 2899080, ReadvBytes: 355578585, WriteBytes: 1024,
			SequentialReads: 17, ReadvSegments: 599,
			ReadSizes:   Log2Hist{13: 1, 21: 17},
			WriteSizes:  Log2Hist{11: 1},
			ReadvSizes:  Log2Hist{17: 20, 26: 8},
			ReadvCounts: Log2Hist{1: 1, 5: 26, 9: 1},
		},
	}
}

// minimalRecord is a partial record with almost nothing known.
func minimalRecord() *Record {
	return &Record{
		RecordID:   "ffffffffffffffffffffffffffffffff",
		Reason:     NoOpen,
		Start:      time.Unix(1758000100, 0).UTC(),
		End:        time.Unix(1758000100, 0).UTC(),
		Received:   time.Unix(1758000101, 999).UTC(),
		ServerIP:   "2001:db8::1",
		ServerID:   1,
		ServerStod: 1758000000,
		FileID:     9,
		ReadBytes:  10,
	}
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	zero := &Record{}
	tiny := minimalRecord()
	tiny.ReadSqSum = 1e-9 // exponent formatting
	tiny.WriteSqSum = 1e21
	tiny.ReadvSqSum = 0.1
	for name, r := range map[string]*Record{
		"full":    fullRecord(),
		"minimal": minimalRecord(),
		"zero":    zero,
		"floats":  tiny,
	} {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			got := AppendJSON(nil, r)
			if string(got) != string(want) {
				t.Errorf("AppendJSON mismatch\n got: %s\nwant: %s", got, want)
			}
			// Appending keeps what was in dst.
			got = AppendJSON([]byte("x"), r)
			if string(got[1:]) != string(want) || got[0] != 'x' {
				t.Errorf("AppendJSON did not append")
			}
		})
	}
}

func TestAppendJSONConvertsToUTC(t *testing.T) {
	r := minimalRecord()
	r.Start = r.Start.In(time.FixedZone("X", 3600))
	got := AppendJSON(nil, r)
	if !strings.Contains(string(got), `"start":"2025-09-16T05:21:40Z"`) {
		t.Errorf("start not in UTC: %s", got)
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	cases := []string{
		"", "plain", `quote"back\slash`, "<script>&amp;</script>", "\x00\x01\x1f\x7f",
		"\b\f\n\r\t", "caf\xc3\xa9", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\u2028b\u2029c",
		"日本語", "\xff\xff", "emoji \U0001F600",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
		}
	}
}

func TestAppendFloatMatchesEncodingJSON(t *testing.T) {
	for _, f := range []float64{0, 1, -1, 0.5, 1e-6, 1e-7, 9.99e20, 1e21, 123456789.125, 7.5e12, 2.5e-300, -3e25,
		1 << 53, 1<<53 - 1, -(1 << 53), -(1<<53 - 1), 1<<53 + 2, 1 << 60, -(1 << 60), 1e20, 262144, 261193.06936416184,
		math.Copysign(0, -1), math.MaxInt64, math.MinInt64, 9.2e18, -9.3e18, math.Nextafter(1, 2), math.Nextafter(1<<52, 0)} {
		want, _ := json.Marshal(f)
		if math.Signbit(f) && f == 0 {
			want = []byte("-0") // encoding/json writes -0 as strconv does
		}
		if got := appendFloat(nil, f); string(got) != string(want) {
			t.Errorf("appendFloat(%v) = %s, want %s", f, got, want)
		}
	}
	// The whole-number fast path writes what strconv does.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		f := float64(rng.Int64N(1<<54) - 1<<53)
		if rng.IntN(2) == 0 {
			f = math.Ldexp(float64(rng.Int64N(1<<20)), rng.IntN(60)-10)
		}
		want := strconv.AppendFloat(nil, f, 'f', -1, 64)
		if got := appendFloat(nil, f); string(got) != string(want) && math.Abs(f) < 1e21 && math.Abs(f) >= 1e-6 {
			t.Fatalf("appendFloat(%v) = %s, want %s", f, got, want)
		}
	}
}

func testEvent(t testing.TB, provider byte, line string) *Event {
	t.Helper()
	typ, data, valid := ParseEvent(provider, []byte(line))
	return &Event{
		EventID:    EventID("192.0.2.10", 1758000000, 42, provider, 1, 1758000500, 0, []byte(line)),
		Type:       typ,
		Provider:   string(provider),
		Time:       time.Unix(1758000500, 0).UTC(),
		Received:   time.Unix(1758000501, 5000).UTC(),
		ServerIP:   "192.0.2.10",
		ServerHost: "cache.example.org",
		ServerID:   42,
		ServerStod: 1758000000,
		Site:       "SITE",
		Data:       data,
		Valid:      valid,
	}
}

func TestAppendEventJSONMatchesEncodingJSON(t *testing.T) {
	events := []*Event{
		testEvent(t, 'C', pfcLine),
		testEvent(t, 'P', tpcLine),
		testEvent(t, 'C', "{\"event\":\"file_close\",\"lfn\":\"/a\xff<b>\" broken"),
		testEvent(t, 'T', `{"a":[1,2.50,{"b":"<&>"}]}`),
		{Type: EventUnknown},
	}
	for i, e := range events {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendEventJSON(nil, e); string(got) != string(want) {
			t.Errorf("event %d mismatch\n got: %s\nwant: %s", i, got, want)
		}
	}
}

func TestAppendersDoNotAllocate(t *testing.T) {
	r := fullRecord()
	e := testEvent(t, 'P', tpcLine)
	buf := make([]byte, 0, 4096)
	for name, f := range map[string]func(){
		"native":   func() { buf = AppendJSON(buf[:0], r) },
		"gracc":    func() { buf = AppendGRACC(buf[:0], r) },
		"gracc-go": func() { buf = AppendGRACCGo(buf[:0], r) },
		"wlcg":     func() { buf = AppendWLCG(buf[:0], r) },
		"event":    func() { buf = AppendEventJSON(buf[:0], e) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs per record, want 0", name, n)
		}
	}
}

func TestRecordIDDeterministic(t *testing.T) {
	start := time.Unix(1758000000, 5)
	end := start.Add(time.Minute)
	id := RecordID("192.0.2.1", 1757000000, 258305997245184, 7, start, end)
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Fatalf("id %q is not 32 lowercase hex characters", id)
	}
	if again := RecordID("192.0.2.1", 1757000000, 258305997245184, 7, start.In(time.FixedZone("Y", -7200)), end); again != id {
		t.Errorf("same input gave %q then %q", id, again)
	}
	for name, other := range map[string]string{
		"ip":    RecordID("192.0.2.2", 1757000000, 258305997245184, 7, start, end),
		"stod":  RecordID("192.0.2.1", 1757000001, 258305997245184, 7, start, end),
		"sid":   RecordID("192.0.2.1", 1757000000, 258305997245185, 7, start, end),
		"file":  RecordID("192.0.2.1", 1757000000, 258305997245184, 8, start, end),
		"start": RecordID("192.0.2.1", 1757000000, 258305997245184, 7, start.Add(1), end),
		"end":   RecordID("192.0.2.1", 1757000000, 258305997245184, 7, start, end.Add(1)),
	} {
		if other == id {
			t.Errorf("changing %s did not change the id", name)
		}
	}
	e1 := EventID("192.0.2.1", 1, 2, 'C', 3, 4, 0, []byte("x"))
	if e1 != EventID("192.0.2.1", 1, 2, 'C', 3, 4, 0, []byte("x")) || e1 == EventID("192.0.2.1", 1, 2, 'C', 3, 4, 1, []byte("x")) {
		t.Errorf("EventID not deterministic or ignores the index")
	}
}

func TestEncoder(t *testing.T) {
	r := fullRecord()
	for schema, want := range map[string]func([]byte, *Record) []byte{
		"native": AppendJSON, "gracc": AppendGRACC, "wlcg": AppendWLCG,
	} {
		enc, err := Encoder(schema)
		if err != nil {
			t.Fatalf("Encoder(%q): %v", schema, err)
		}
		if string(enc(nil, r)) != string(want(nil, r)) {
			t.Errorf("Encoder(%q) gives the wrong encoding", schema)
		}
	}
	if _, err := Encoder("xml"); err == nil {
		t.Error("Encoder(xml) did not fail")
	}
	for flavour, want := range map[string]func([]byte, *Record) []byte{"": AppendGRACC, "python": AppendGRACC, "go": AppendGRACCGo} {
		enc, err := EncoderFlavour(SchemaGRACC, flavour)
		if err != nil || string(enc(nil, r)) != string(want(nil, r)) {
			t.Errorf("EncoderFlavour(gracc, %q): %v, or the wrong encoding", flavour, err)
		}
	}
	if _, err := EncoderFlavour(SchemaGRACC, "perl"); err == nil {
		t.Error("EncoderFlavour(gracc, perl) did not fail")
	}
}

// The Go flavour's vo lists each VO once (their normalizeVO), its
// dirnames follow their rules on the cleaned path.
func TestGRACCGoRules(t *testing.T) {
	r := fullRecord()
	for _, c := range []struct{ vo, path, want string }{
		{"cms cms", "/store/a/b", `"vo":"cms","host"`},
		{" osg  OSG atlas osg ", "/store/a/b", `"vo":"osg atlas","host"`},
		{"cms", "/ospool/ap20/data/x/y/f", `"dirname1":"/ospool","dirname2":"/ospool/ap20","logical_dirname":"/ospool/ap20/data/x"`},
		{"cms", "/ospool/ap20", `"logical_dirname":"/ospool/ap20"`},
		{"cms", "//chtc//a/./b", `"dirname1":"/chtc","dirname2":"/chtc/a","logical_dirname":"/chtc"`},
		{"cms", "/elsewhere", `"dirname1":"/elsewhere","dirname2":"/elsewhere","logical_dirname":"unknown directory"`},
	} {
		r.VO, r.Path = c.vo, c.path
		if got := string(AppendGRACCGo(nil, r)); !strings.Contains(got, c.want) {
			t.Errorf("vo %q path %q: want %s in %s", c.vo, c.path, c.want, got)
		}
	}
}

// TestAppendStringEveryByte puts every byte, and some runes, at every
// place of strings of up to 20 bytes: what the 8-byte scan (safePrefix)
// passes must be what encoding/json writes as it is.
func TestAppendStringEveryByte(t *testing.T) {
	base := "abcdefghijklmnopqrst"
	for n := 0; n <= len(base); n++ {
		for at := 0; at < n; at++ {
			for b := 0; b < 256; b++ {
				s := base[:at] + string([]byte{byte(b)}) + base[at+1:n]
				want, _ := json.Marshal(s)
				if got := appendString(nil, s); string(got) != string(want) {
					t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
				}
			}
			for _, r := range []string{"é", "\u2028", "€", "\U0001F600"} {
				s := base[:at] + r + base[at:n]
				want, _ := json.Marshal(s)
				if got := appendString(nil, s); string(got) != string(want) {
					t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
				}
			}
		}
	}
}
