package packet

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func summaryValue(s *Summary, name string) (float64, bool) {
	for _, v := range s.Values {
		if v.Name == name {
			return v.Value, true
		}
	}
	return 0, false
}

// Every section of an XML summary, as XRootD writes them, becomes dotted
// values; the header is the server's identity.
func TestParseSummaryXML(t *testing.T) {
	b, err := os.ReadFile("testdata/summary.xml")
	if err != nil {
		t.Fatal(err)
	}
	if Classify(b) != KindXMLSummary {
		t.Fatalf("classified %v", Classify(b))
	}
	s, err := ParseSummary(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Tod != 1767225660 || s.Tos != 1767225600 || s.Pid != 4321 || s.Src != "xrd1.example.org:1094" ||
		s.Pgm != "xrootd" || s.Ins != "anon" || s.Site != "T2_US_Example" || s.Ver != "v5.7.1" {
		t.Errorf("header %+v", s)
	}
	for name, want := range map[string]float64{
		"info.port": 1094, "buff.mem": 16777216, "link.num": 12, "link.in": 52428800, "link.out": 1073741824,
		"poll.ev": 3390, "proc.usr.s": 120, "proc.sys.u": 250000, "xrootd.ops.open": 900, "xrootd.lgn.au": 1200,
		"xrootd.aio.rej": 0, "ofs.tpc.grnt": 5, "oss.paths": 1, "oss.paths.0.free": 4e11, "oss.space.0.usg": 6e11,
		"sched.threads": 20, "sgen.toe": 1767225660,
	} {
		if got, ok := summaryValue(s, name); !ok || got != want {
			t.Errorf("%s = %v (%v), want %v", name, got, ok, want)
		}
	}
	texts := map[string]string{}
	for _, x := range s.Texts {
		texts[x.Name] = x.Text
	}
	if texts["oss.paths.0.lp"] != "/data" || texts["ofs.role"] != "server" || texts["info.host"] != "xrd1.example.org" {
		t.Errorf("texts %v", texts)
	}
	if len(s.Values) < 80 {
		t.Errorf("%d values", len(s.Values))
	}
}

func TestParseSummaryJSON(t *testing.T) {
	b, err := os.ReadFile("testdata/summary.json")
	if err != nil {
		t.Fatal(err)
	}
	if Classify(b) != KindJSONSummary {
		t.Fatalf("classified %v", Classify(b))
	}
	s, err := ParseSummary(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Tod != 1767225660 || s.Tos != 1767225600 || s.Pid != 99 || s.Src != "cache1.example.org:1094" || s.Site != "T2_US_Cache" {
		t.Errorf("header %+v", s)
	}
	for name, want := range map[string]float64{"pfc.prerd.hits": 80, "pfc.rd.out": 7e6, "pfc.rd.hits.1": 2, "pfc.saves.ok": 1} {
		if got, ok := summaryValue(s, name); !ok || got != want {
			t.Errorf("%s = %v (%v), want %v", name, got, ok, want)
		}
	}
}

// Malformed summaries are errors with a reason, never a panic.
func TestParseSummaryBad(t *testing.T) {
	deep := strings.Repeat("<a>", 40) + strings.Repeat("</a>", 40)
	for name, tc := range map[string]struct {
		in   string
		want error
	}{
		"truncated xml":   {`<statistics tod="1" src="h:1"><stats id="link"><num>3</num>`, ErrSummaryXML},
		"mismatched tags": {`<statistics tod="1" src="h:1"><a></b></statistics>`, ErrSummaryXML},
		"not statistics":  {`<html><body>hi</body></html>`, ErrSummaryHeader},
		"no header":       {`<statistics><stats id="link"><num>3</num></stats></statistics>`, ErrSummaryHeader},
		"too deep":        {`<statistics tod="1" src="h:1">` + deep + `</statistics>`, ErrSummaryBounds},
		"not utf8":        {"<statistics tod=\"1\" src=\"h:1\"><a>\xff</a></statistics>", ErrSummaryXML},
		"bad json":        {`{"statistics":{"tod":1,`, ErrSummaryJSON},
		"json trailing":   {`{"statistics":{"tod":1,"src":"h:1"}} {}`, ErrSummaryJSON},
		"json no stats":   {`{"tod":1}`, ErrSummaryHeader},
		"json deep":       {`{"statistics":{"tod":1,"src":"h:1","a":` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40) + `}}`, ErrSummaryBounds},
		"empty":           {``, ErrSummaryXML},
	} {
		if _, err := ParseSummary([]byte(tc.in)); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	var many strings.Builder
	many.WriteString(`<statistics tod="1" src="h:1">`)
	for range maxSummaryValues + 1 {
		many.WriteString(`<v>1</v>`)
	}
	many.WriteString(`</statistics>`)
	if _, err := ParseSummary([]byte(many.String())); !errors.Is(err, ErrSummaryBounds) {
		t.Errorf("too many values: %v", err)
	}
}

func FuzzParseSummary(f *testing.F) {
	for _, p := range []string{"testdata/summary.xml", "testdata/summary.json"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`<statistics tod="1" src="h:1"><stats id="x"><y>1e309</y></stats></statistics>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSummary(b)
		if err == nil && (s.Tod == 0 || s.Src == "" || len(s.Values)+len(s.Texts) > maxSummaryValues) {
			t.Fatalf("accepted %+v", s)
		}
	})
}
