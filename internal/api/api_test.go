package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/xrdmon/xrdmon/internal/monitored"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/rollup"
	"github.com/xrdmon/xrdmon/internal/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// serve returns a test server over a real store holding n records (user
// u<i%5>, path /store/d<i%3>/f<i>, one second apart), the last one with
// hostile strings.
func serve(t *testing.T, n int, opts Options) (*httptest.Server, []record.Record) {
	t.Helper()
	o := store.DefaultOptions()
	o.Path = filepath.Join(t.TempDir(), "store.db")
	o.Retention, o.MaxBytes = 0, 0
	st, err := store.Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{
			RecordID: fmt.Sprintf("%032x", i+1), Start: t0.Add(time.Duration(i) * time.Second), End: t0.Add(time.Duration(i+1) * time.Second),
			ServerIP: "192.0.2.1", ServerHost: "xrd.example.org", Site: "T2_TEST", User: fmt.Sprintf("u%d", i%5),
			Path: fmt.Sprintf("/store/d%d/f%d", i%3, i), ReadBytes: int64(i),
		}
	}
	recs[n-1].User = `<script>alert(1)</script>`
	recs[n-1].Path = "/store/\"><img src=x onerror=alert(1)>\xff\xfe"
	// Every 2 seconds a redirect, a third-party copy or a progress
	// snapshot (internal, never listed as an event), interleaved with
	// the records.
	for i := 0; i < n; i += 50 {
		var evs []record.Event
		var progress []record.Record
		for k := i; k < min(i+50, n); k++ {
			at, host := t0.Add(time.Duration(2*k)*time.Second), fmt.Sprintf("xrd%d.example.org", k%2)
			if k%3 == 2 {
				progress = append(progress, record.Record{Start: at.Add(-time.Minute), End: at, ServerIP: "192.0.2.1", ServerHost: host,
					Site: "T2_TEST", FileID: uint32(k), ReadBytes: int64(k)})
				continue
			}
			typ := []record.EventType{record.EventRedirect, record.EventTPC}[k%3]
			evs = append(evs, record.Event{EventID: fmt.Sprintf("e%d", k), Type: typ, Time: at,
				ServerIP: "192.0.2.1", ServerHost: host, Site: "T2_TEST", Data: json.RawMessage(`{"n":1}`), Valid: true})
		}
		if err := st.AppendWithProgress(context.Background(), recs[i:min(i+50, n)], evs, progress); err != nil {
			t.Fatal(err)
		}
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return t0.Add(time.Hour) }
	}
	srv := httptest.NewServer(New(st, opts, nil))
	t.Cleanup(srv.Close)
	return srv, recs
}

func get(t *testing.T, srv *httptest.Server, path string, hdr ...string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// pages follows the cursors of a record listing and returns the ids.
func pages(t *testing.T, srv *httptest.Server, query string) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for n := 0; ; n++ {
		q := query
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		code, body := get(t, srv, "/api/v1/records?"+q)
		if code != 200 {
			t.Fatalf("%s: %d %s", q, code, body)
		}
		var page struct {
			Records []record.Record `json:"records"`
			Next    string          `json:"next"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			ids = append(ids, r.RecordID)
		}
		if page.Next == "" {
			return ids
		}
		if n > 1000 {
			t.Fatal("endless pages")
		}
		cursor = page.Next
	}
}

func TestRecordsPagesAndFilters(t *testing.T) {
	srv, recs := serve(t, 250, Options{})
	want := func(keep func(r *record.Record) bool, newest bool) []string {
		var ids []string
		for i := range recs {
			if keep(&recs[i]) {
				ids = append(ids, recs[i].RecordID)
			}
		}
		if newest {
			slices.Reverse(ids)
		}
		return ids
	}
	all := func(*record.Record) bool { return true }
	for _, tc := range []struct {
		query string
		keep  func(*record.Record) bool
		newes bool
	}{
		{"limit=17", all, true},
		{"limit=33&order=oldest", all, false},
		{"user=u3&limit=7", func(r *record.Record) bool { return r.User == "u3" }, true},
		{"path_prefix=/store/d1/&limit=9&order=oldest", func(r *record.Record) bool { return strings.HasPrefix(r.Path, "/store/d1/") }, false},
		{"from=" + t0.Add(100*time.Second).Format(time.RFC3339) + "&to=" + t0.Add(150*time.Second).Format(time.RFC3339),
			func(r *record.Record) bool {
				return !r.End.Before(t0.Add(100*time.Second)) && r.End.Before(t0.Add(150*time.Second))
			}, true},
		{"from=30m&limit=50", func(r *record.Record) bool { return !r.End.Before(t0.Add(30 * time.Minute)) }, true},
		{"user=nobody", func(*record.Record) bool { return false }, true},
	} {
		if got, w := pages(t, srv, tc.query), want(tc.keep, tc.newes); !slices.Equal(got, w) {
			t.Errorf("%s: %d records %v..., want %d", tc.query, len(got), got[:min(3, len(got))], len(w))
		}
	}
}

// /events lists the events of a window, by type and server, page by
// page, in both orders; internal events never show.
func TestEventsPagesAndFilters(t *testing.T) {
	srv, _ := serve(t, 250, Options{})
	list := func(query string) []string {
		t.Helper()
		var ids []string
		cursor := ""
		for n := 0; n < 1000; n++ {
			q := query
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			code, body := get(t, srv, "/api/v1/events?"+q)
			if code != 200 {
				t.Fatalf("%s: %d %s", q, code, body)
			}
			var page struct {
				Events []record.Event `json:"events"`
				Next   string         `json:"next"`
			}
			if err := json.Unmarshal(body, &page); err != nil {
				t.Fatal(err)
			}
			for _, e := range page.Events {
				ids = append(ids, e.EventID)
			}
			if page.Next == "" {
				return ids
			}
			cursor = page.Next
		}
		t.Fatal("endless pages")
		return nil
	}
	want := func(keep func(i int) bool, newest bool) []string {
		var ids []string
		for i := range 250 {
			if i%3 != 2 && keep(i) {
				ids = append(ids, fmt.Sprintf("e%d", i))
			}
		}
		if newest {
			slices.Reverse(ids)
		}
		return ids
	}
	all := func(int) bool { return true }
	for _, tc := range []struct {
		query  string
		keep   func(int) bool
		newest bool
	}{
		{"limit=17", all, true},
		{"limit=40&order=oldest", all, false},
		{"type=redirect&limit=9", func(i int) bool { return i%3 == 0 }, true},
		{"type=tpc,redirect&server=xrd1.example.org&order=oldest&limit=11", func(i int) bool { return i%2 == 1 }, false},
		{"type=progress", func(int) bool { return false }, true},
		{"from=" + t0.Add(100*time.Second).Format(time.RFC3339) + "&to=" + t0.Add(300*time.Second).Format(time.RFC3339) + "&limit=7",
			func(i int) bool { return 2*i >= 100 && 2*i < 300 }, true},
	} {
		if got, w := list(tc.query), want(tc.keep, tc.newest); !slices.Equal(got, w) {
			t.Errorf("%s: %d events %v..., want %d %v...", tc.query, len(got), got[:min(3, len(got))], len(w), w[:min(3, len(w))])
		}
	}
}

func TestBadParameters(t *testing.T) {
	srv, _ := serve(t, 3, Options{})
	for _, q := range []string{"limit=0", "limit=x", "from=yesterday", "order=random", "cursor=bm90YWN1cnNvcg", "cursor=***", "reason=bogus", "partial=maybe"} {
		code, body := get(t, srv, "/api/v1/records?"+q)
		var e Error
		if code != 400 || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("%s: %d %s, want 400 with an error", q, code, body)
		}
	}
	if code, _ := get(t, srv, "/api/v1/nothing"); code != 404 {
		t.Errorf("unknown endpoint: %d", code)
	}
	if code, _ := get(t, srv, "/api/v1/status"); code != 404 {
		t.Errorf("status without a status func: %d", code)
	}
}

// TestHostileStringsStayText: strings from packets come back as JSON
// strings with <, > and & escaped and invalid UTF-8 replaced, so no
// browser can take them for markup.
func TestHostileStringsStayText(t *testing.T) {
	srv, recs := serve(t, 3, Options{})
	code, body := get(t, srv, "/api/v1/records?limit=1")
	if code != 200 {
		t.Fatal(code)
	}
	for _, bad := range []string{"<script", "<img", "\xff"} {
		if strings.Contains(string(body), bad) {
			t.Errorf("answer holds %q raw: %s", bad, body)
		}
	}
	var page struct{ Records []record.Record }
	if err := json.Unmarshal(body, &page); err != nil || len(page.Records) != 1 {
		t.Fatalf("%v %s", err, body)
	}
	if page.Records[0].User != recs[2].User {
		t.Errorf("user %q, want %q back", page.Records[0].User, recs[2].User)
	}
}

func TestToken(t *testing.T) {
	srv, _ := serve(t, 3, Options{Token: "s3cret", Status: func(context.Context) (any, error) { return map[string]int{"ok": 1}, nil }})
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret"}} {
		if code, _ := get(t, srv, "/api/v1/status", hdr...); code != 401 {
			t.Errorf("%v: %d, want 401", hdr, code)
		}
	}
	if code, body := get(t, srv, "/api/v1/status", "Authorization", "Bearer s3cret"); code != 200 || !strings.Contains(string(body), `"ok":1`) {
		t.Errorf("with the token: %d %s", code, body)
	}
}

// TestOpenAPIDescribesEveryEndpoint: the served document parses and lists
// every path the API answers, and nothing else.
func TestOpenAPIDescribesEveryEndpoint(t *testing.T) {
	srv, _ := serve(t, 3, Options{Status: func(context.Context) (any, error) { return struct{}{}, nil }, Rollups: noRollups{}, History: NewHistory(prometheus.NewRegistry(), time.Second, 10),
		Servers: func() []monitored.Server { return nil }})
	code, body := get(t, srv, "/api/v1/openapi.yaml")
	if code != 200 {
		t.Fatal(code)
	}
	var doc struct {
		OpenAPI string         `yaml:"openapi"`
		Paths   map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(body, &doc); err != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi.yaml: %v", err)
	}
	required := map[string]string{"/top": "?by=site"}
	for p := range doc.Paths {
		if code, _ := get(t, srv, "/api/v1"+p+required[p]); code != 200 {
			t.Errorf("documented %s answers %d", p, code)
		}
	}
	for _, p := range []string{"/records", "/events", "/summary", "/status", "/health", "/rollups", "/top", "/servers", "/activity", "/openapi.yaml"} {
		if _, ok := doc.Paths[p]; !ok {
			t.Errorf("%s is served but not documented", p)
		}
	}
}

func TestParseTime(t *testing.T) {
	now := t0
	for in, want := range map[string]time.Time{
		"":                     {},
		"2026-03-01T10:00:00Z": t0.Add(-2 * time.Hour),
		"1772359200":           time.Unix(1772359200, 0).UTC(),
		"90m":                  t0.Add(-90 * time.Minute),
		"7d":                   t0.Add(-7 * 24 * time.Hour),
		"1d12h":                t0.Add(-36 * time.Hour),
	} {
		got, err := ParseTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"soon", "-5m", "xd", "3dx"} {
		if _, err := ParseTime(in, now); err == nil {
			t.Errorf("ParseTime(%q) succeeded", in)
		}
	}
}

// noRollups answers every rollup query with nothing.
type noRollups struct{}

func (noRollups) Series(context.Context, rollup.Query) ([]rollup.Series, error) { return nil, nil }

func (noRollups) Top(context.Context, []record.Dim, time.Time, time.Time, rollup.Measure, int) ([]rollup.Row, rollup.Agg, error) {
	return nil, rollup.Agg{}, nil
}
