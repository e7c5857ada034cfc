package record

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func goldenRecord() *Record {
	r := fullRecord()
	r.Path = "/store/data/Run2026A/file.root"
	return r
}

const (
	graccGolden = `{"timestamp":1772366495500,"start_time":1772366400000,"end_time":1772366495500,"HasFileCloseMsg":1,"operation_time":95,` +
		`"server_hostname":"xrootd.example.org","server_ip":"192.0.2.10","serverID":"1758000000#192.0.2.10#258305997245184","server":"192.0.2.10",` +
		`"site":"T2_US_Example","user":"cmsuser","host":"[::ffff:198.51.100.7]","user_domain":"example.edu","protocol":"xroot","ipv6":true,` +
		`"user_dn":"/DC=ch/DC=cern/OU=Users/CN=jdoe/CN=123456/CN=Jane \"Q\" Doe","vo":"cms cms",` +
		`"appinfo":"162_https://glidein.cern.ch/162/190501:101553:heewon:crab:RPCEfficiency:SingleMuon:Run2018D-PromptReco-v2_0",` +
		`"token_subject":"sub\u003c\u0026\u003eject","token_username":"tokuser","token_org":"https://cms-auth.web.cern.ch/",` +
		`"token_role":"prod","token_groups":"/cms\u2028/x\u2029","experiment":"2","activity":"-3",` +
		`"filename":"/store/data/Run2026A/file.root","filesize":2198266271,"dirname1":"/store","dirname2":"/store/data","logical_dirname":"/store/data",` +
		`"read":2899080,"readv":355578585,"write":1024,"read_average":7792992.717391305,"read_bytes_at_close":358477665,"read_max":40000000,` +
		`"read_min":4096,"read_operations":46,"read_single_average":161060,"read_single_bytes":2899080,"read_single_max":1048576,` +
		`"read_single_min":4096,"read_single_operations":18,"read_vector_average":12699235.17857143,"read_vector_count_average":21.392857142857142,` +
		`"read_vector_count_max":300,"read_vector_count_min":1,"read_vector_max":40000000,"read_vector_min":65536,"read_vector_operations":28,` +
		`"write_average":1024,"write_bytes_at_close":1024,"write_max":1024,"write_min":1024,"write_operations":1,"read_sigma":11715732.795752415,` +
		`"read_single_sigma":625081.0691955618,"read_vector_sigma":12795679.969401153,"read_vector_count_sigma":67.39692621526078,"write_sigma":0}`
	graccMinimalGolden = `{"timestamp":1758000100000,"start_time":1758000100000,"end_time":1758000100000,"HasFileCloseMsg":0,"operation_time":0,` +
		`"server_hostname":"2001:db8::1","server_ip":"2001:db8::1","serverID":"1758000000#2001:db8::1#1","server":"2001:db8::1","site":"",` +
		`"filename":"missing directory","filesize":-1,"logical_dirname":"missing directory","read":10,"readv":0,"write":0}`
	wlcgGoldenHead = `{"site_name":"T2_US_Example","fallback":true,"user_dn":"/DC=ch/DC=cern/OU=Users/CN=jdoe/CN=123456/CN=Jane \"Q\" Doe",` +
		`"client_host":"[::ffff:198.51.100.7]","client_domain":"example.edu","server_host":"xrootd.example.org","server_domain":"example.org",` +
		`"server_ip":"192.0.2.10","unique_id":"01234567-89ab-cdef-0123-456789abcdef","file_lfn":"/store/data/Run2026A/file.root",` +
		`"file_size":2198266271,"read_bytes":358477665,"read_single_bytes":2899080,"read_vector_bytes":355578585,"ipv6":true,"user":"jdoe",` +
		`"start_time":1772366400000,"end_time":1772366495500,"operation_time":95,"operation":"read","server_site":"T2_US_Example",` +
		`"user_protocol":"xroot","vo":"cms cms","write_bytes":1024,"read_average":7792992.717391305,"read_bytes_at_close":358477665,` +
		`"read_max":40000000,"read_min":4096,"read_operations":46,"read_sigma":11715732.795752415,"read_single_average":161060,` +
		`"read_single_max":1048576,"read_single_min":4096,"read_single_operations":18,"read_single_sigma":625081.0691955618,` +
		`"read_vector_average":12699235.17857143,"read_vector_count_average":21.392857142857142,"read_vector_count_max":300,` +
		`"read_vector_count_min":1,"read_vector_count_sigma":67.39692621526078,"read_vector_max":40000000,"read_vector_min":65536,` +
		`"read_vector_operations":28,"read_vector_sigma":12795679.969401153,"write_average":1024,"write_bytes_at_close":1024,` +
		`"write_max":1024,"write_min":1024,"write_operations":1,"write_sigma":0,"experiment":"2","activity":"-3",` +
		`"CRAB_Id":"162","CRAB_Retry":"0",` +
		`"CRAB_Workflow":"190501:101553:heewon:crab:RPCEfficiency:SingleMuon:Run2018D-PromptReco-v2",` +
		`"metadata":{"producer":"cms","type":"aaa-ng","timestamp":1772366497123,"type_prefix":"raw","host":`
)

// The Go collector's document (gracc_flavour go) of the same records.
const (
	graccGoGolden = `{"@timestamp":"2026-03-01T12:01:37.123456789Z","start_time":1772366400,"end_time":1772366495,"operation_time":95,` +
		`"serverID":"1758000000#192.0.2.10#258305997245184","server_hostname":"xrootd.example.org","server":"192.0.2.10",` +
		`"server_ip":"192.0.2.10","site":"T2_US_Example","user":"cmsuser",` +
		`"user_dn":"/DC=ch/DC=cern/OU=Users/CN=jdoe/CN=123456/CN=Jane \"Q\" Doe","user_domain":"example.edu","vo":"cms",` +
		`"host":"[::ffff:198.51.100.7]","token_subject":"sub\u003c\u0026\u003eject","token_username":"tokuser",` +
		`"token_org":"https://cms-auth.web.cern.ch/","token_role":"prod","token_groups":"/cms\u2028/x\u2029","experiment":"2",` +
		`"activity":"-3","filename":"/store/data/Run2026A/file.root","dirname1":"/store","dirname2":"/store/data",` +
		`"logical_dirname":"/store/data","protocol":"xroot",` +
		`"appinfo":"162_https://glidein.cern.ch/162/190501:101553:heewon:crab:RPCEfficiency:SingleMuon:Run2018D-PromptReco-v2_0",` +
		`"ipv6":true,"filesize":2198266271,"read_operations":18,"read_single_operations":18,"read_vector_operations":28,` +
		`"write_operations":1,"read":2899080,"read_single_bytes":2899080,"readv":355578585,"write":1024,"read_min":4096,` +
		`"read_max":1048576,"read_average":161060,"read_single_min":4096,"read_single_max":1048576,"read_single_average":161060,` +
		`"read_vector_min":65536,"read_vector_max":40000000,"read_vector_average":12699235,"write_min":1024,"write_max":1024,` +
		`"write_average":1024,"read_vector_count_min":1,"read_vector_count_max":300,"read_vector_count_average":21.392857142857142,` +
		`"read_bytes_at_close":2899080,"write_bytes_at_close":1024,"HasFileCloseMsg":1}`
	graccGoMinimalGolden = `{"@timestamp":"2025-09-16T05:21:41.000000999Z","start_time":1758000100,"end_time":1758000100,` +
		`"operation_time":0,"serverID":"1758000000#2001:db8::1#1","server_hostname":"2001:db8::1","server":"2001:db8::1",` +
		`"server_ip":"2001:db8::1","site":"UNKNOWN","user":"0","user_dn":"","host":"unknown","filename":"unknown",` +
		`"dirname1":"unknown directory","dirname2":"unknown directory","logical_dirname":"unknown directory","protocol":"unknown",` +
		`"appinfo":"","ipv6":false,"filesize":0,"read_operations":0,"read_single_operations":0,"read_vector_operations":0,` +
		`"write_operations":0,"read":10,"read_single_bytes":10,"readv":0,"write":0,"read_min":0,"read_max":0,"read_average":0,` +
		`"read_single_min":0,"read_single_max":0,"read_single_average":0,"read_vector_min":0,"read_vector_max":0,` +
		`"read_vector_average":0,"write_min":0,"write_max":0,"write_average":0,"read_vector_count_min":0,` +
		`"read_vector_count_max":0,"read_vector_count_average":0,"read_bytes_at_close":10,"write_bytes_at_close":0,"HasFileCloseMsg":1}`
)

func TestGolden(t *testing.T) {
	host, _ := json.Marshal(collectorHost())
	cases := []struct {
		name string
		got  []byte
		want string
	}{
		{"gracc/full", AppendGRACC(nil, goldenRecord()), graccGolden},
		{"gracc/minimal", AppendGRACC(nil, minimalRecord()), graccMinimalGolden},
		{"gracc-go/full", AppendGRACCGo(nil, goldenRecord()), graccGoGolden},
		{"gracc-go/minimal", AppendGRACCGo(nil, minimalRecord()), graccGoMinimalGolden},
		{"wlcg/full", AppendWLCG(nil, goldenRecord()), wlcgGoldenHead + string(host) + `,"_id":"01234567-89ab-cdef-0123-456789abcdef"}}`},
	}
	for _, c := range cases {
		if string(c.got) != c.want {
			t.Errorf("%s\n got: %s\nwant: %s", c.name, c.got, c.want)
		}
		if !json.Valid(c.got) {
			t.Errorf("%s: not valid JSON", c.name)
		}
	}
}

// decode returns the document as a map, numbers as float64.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	return m
}

func TestGRACCValues(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(r *Record)
		check map[string]any // key -> value; nil value means "absent"
	}{
		{"read_min ignores unused readv", func(r *Record) { r.ReadvOps, r.ReadvMin, r.ReadvMax = 0, 0, 0 },
			map[string]any{"read_min": 4096.0, "read_max": 1048576.0}},
		{"no ops block", func(r *Record) { r.HasOps, r.HasSSQ = false, false },
			map[string]any{"read_average": nil, "read_sigma": nil, "read": 2899080.0}},
		{"ops without ssq", func(r *Record) { r.HasSSQ = false },
			map[string]any{"read_sigma": nil, "read_average": 7792992.717391305}},
		{"partial is not a close", func(r *Record) { r.Reason = Timeout },
			map[string]any{"HasFileCloseMsg": 0.0, "filesize": 2198266271.0}},
		{"close without open keeps the path", func(r *Record) { r.Reason = NoOpen },
			map[string]any{"HasFileCloseMsg": 0.0, "filesize": -1.0, "filename": "/store/data/Run2026A/file.root"}},
		{"unknown session", func(r *Record) { r.User, r.ClientHost, r.ClientName = "", "", "" },
			map[string]any{"user": nil, "host": nil, "ipv6": nil, "protocol": nil}},
		{"client domain from userid host", func(r *Record) { r.ClientName, r.ClientHost = "", "fermicloud01.fnal.gov" },
			map[string]any{"user_domain": "fnal.gov"}},
		{"no domain for an address", func(r *Record) { r.ClientName, r.ClientHost = "", "198.51.100.7" },
			map[string]any{"user_domain": nil}},
		{"dn from &n= when &m= is empty", func(r *Record) { r.MonInfo, r.DN = "", "/DC=org/CN=x" },
			map[string]any{"user_dn": "/DC=org/CN=x"}},
		{"mapped name is not a dn", func(r *Record) { r.MonInfo = "" },
			map[string]any{"user_dn": nil}},
		{"server name falls back to the address", func(r *Record) { r.ServerHost = "" },
			map[string]any{"server_hostname": "192.0.2.10"}},
		{"non-UTF-8 path", func(r *Record) { r.Path = "/ospool/ap20/data/\xffuser/f" },
			map[string]any{"filename": "/ospool/ap20/data/\ufffduser/f", "logical_dirname": "/ospool/ap20/data/\ufffduser"}},
		{"operation_time truncates", func(r *Record) { r.End = r.Start.Add(1999e6) },
			map[string]any{"operation_time": 1.0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := goldenRecord()
			c.edit(r)
			m := decode(t, AppendGRACC(nil, r))
			for k, want := range c.check {
				got, ok := m[k]
				if want == nil {
					if ok {
						t.Errorf("%s = %v, want absent", k, got)
					}
					continue
				}
				if got != want {
					t.Errorf("%s = %#v, want %#v", k, got, want)
				}
			}
		})
	}
}

func TestLogicalDirname(t *testing.T) {
	cases := map[string]string{
		"/user/alice/data/f":                 "/user/alice",
		"/user/dteam/x/f":                    "/user/dteam",
		"/osgconnect/public/bob/proj/f":      "/osgconnect/public/bob",
		"/ospool/PROTECTED/carol/x/f":        "/ospool/PROTECTED/carol",
		"/ospool/ap21/data/dave/f":           "/ospool/ap21/data/dave",
		"/path-facility/data/erin/f":         "/path-facility/data/erin",
		"/hcc/a/b/c/d/e/f":                   "/hcc/a/b/c/d",
		"/pnfs/fnal.gov/usr/nova/persistent": "/pnfs/fnal.gov/usr/nova",
		"/gwdata/x/y":                        "/gwdata/x",
		"/chtc/x/y":                          "/chtc",
		"/icecube/x/y":                       "/icecube",
		"/igwn/ligo/frames/O4/f":             "/igwn/ligo/frames",
		"/store/mc/x/f":                      "/store/mc",
		"/store":                             "/store",
		"/data/x":                            "unknown directory",
		"":                                   "unknown directory",
	}
	for in, want := range cases {
		if got := logicalDirname(in); got != want {
			t.Errorf("logicalDirname(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWLCGMatcher(t *testing.T) {
	def := DefaultWLCGMatcher()
	custom := &WLCGMatcher{VOs: []string{"ATLAS"}, PathPrefixes: []string{"/atlas/"}}
	cases := []struct {
		m     *WLCGMatcher
		vo    string
		path  string
		match bool
	}{
		{def, "cms", "/data/f", true},
		{def, "CMS cms", "", true},
		{def, "osg,dteam", "", true},
		{def, "", "/store/mc/f", true},
		{def, "", "/store", true},
		{def, "", "/storage/f", false},
		{def, "", "/user/dteam/f", true},
		{def, "", "/user/alice/f", false},
		{def, "cmsx", "/data", false},
		{def, "", "", false},
		{custom, "atlas", "", true},
		{custom, "", "/atlas/rucio/f", true},
		{custom, "cms", "/store/f", false},
		{nil, "cms", "/store/f", false},
		{&WLCGMatcher{}, "cms", "/store/f", false},
	}
	for _, c := range cases {
		r := &Record{VO: c.vo, Path: c.path}
		if got := c.m.Match(r); got != c.match {
			t.Errorf("%+v.Match(vo=%q path=%q) = %v, want %v", c.m, c.vo, c.path, got, c.match)
		}
	}
}

func TestWLCGValues(t *testing.T) {
	r := goldenRecord()
	r.HasOps, r.HasSSQ, r.AppInfo, r.ReadBytes, r.ReadvBytes = false, false, "cmsRun", 0, 0
	r.ServerHost = ""
	m := decode(t, AppendWLCG(nil, r))
	for k, want := range map[string]any{
		"operation": "write", "read_single_bytes": 0.0, "read_operations": 0.0, "read_sigma": 0.0,
		"server_host": "192.0.2.10", "server_domain": "", "write_bytes_at_close": 1024.0,
	} {
		if m[k] != want {
			t.Errorf("%s = %#v, want %#v", k, m[k], want)
		}
	}
	if _, ok := m["CRAB_Id"]; ok {
		t.Error("CRAB_Id present for non-CRAB app info")
	}
	for dn, user := range map[string]string{
		"/DC=ch/DC=cern/OU=Users/CN=jdoe/CN=1/CN=J D":   "jdoe",
		"/DC=org/DC=cilogon/C=US/O=Univ/CN=Jane Doe A1": "Jane Doe A1",
		"CN=x,O=y": "x",
		"/O=none":  "",
	} {
		if got := dnUser(dn); got != user {
			t.Errorf("dnUser(%q) = %q, want %q", dn, got, user)
		}
	}
	if !strings.Contains(string(AppendWLCG(nil, &Record{RecordID: "not-hex"})), `"unique_id":"not-hex"`) {
		t.Error("non-hex record id not written as is")
	}
}

// documentedFields returns the field names in backquotes in the first
// column of the tables of docs/records.md between the headings from and
// to.
func documentedFields(t *testing.T, from, to string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/records.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, from), strings.Index(doc, to)
	if i < 0 || j < i {
		t.Fatalf("sections %q to %q not found", from, to)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(doc[i:j], "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.Split(line, "|")[1]
		for _, f := range strings.Split(cell, "`") {
			if f = strings.TrimSpace(f); f != "" && f != "," && f != "/" {
				names[f] = true
			}
		}
	}
	return names
}

// Every field of the python flavour is one docs/records.md §3.1 documents
// (the Python collector's documented fields and xrdmon's additions), and
// every one of the go flavour is in §3.4's table.
func TestGRACCFieldsDocumented(t *testing.T) {
	py := documentedFields(t, "### 3.1 Fields", "### 3.2")
	for _, s := range []string{"read_sigma", "read_single_sigma", "read_vector_sigma", "read_vector_count_sigma", "write_sigma"} {
		py[s] = true // listed in the text under the tables
	}
	goDoc := documentedFields(t, "### 3.4", "## 4.")
	for _, r := range []*Record{goldenRecord(), minimalRecord()} {
		for name, c := range map[string]struct {
			doc map[string]bool
			enc func([]byte, *Record) []byte
		}{"python": {py, AppendGRACC}, "go": {goDoc, AppendGRACCGo}} {
			var m map[string]any
			if err := json.Unmarshal(c.enc(nil, r), &m); err != nil {
				t.Fatal(err)
			}
			for k := range m {
				if !c.doc[k] && !documentedPattern(c.doc, k) {
					t.Errorf("%s flavour writes %q, not in docs/records.md", name, k)
				}
			}
		}
	}
}

// documentedPattern reports whether k matches a documented name with a
// "*" (read_single_* and the like) or a "…" range.
func documentedPattern(doc map[string]bool, k string) bool {
	for d := range doc {
		if p, ok := strings.CutSuffix(d, "*"); ok && strings.HasPrefix(k, p) {
			return true
		}
	}
	return strings.HasPrefix(k, "token_") && doc["token_subject"]
}
