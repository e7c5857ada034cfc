package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// reportStore imports a loadgen capture into a store with collect and
// returns the store's directory and the truth.
func reportStore(t *testing.T) (string, *loadgen.Truth) {
	t.Helper()
	dir := t.TempDir()
	pcap, truthFile := filepath.Join(dir, "cap.pcap"), filepath.Join(dir, "truth.json")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"loadgen", "--pcap", pcap, "--truth", truthFile, "--servers", "5",
		"--duration", "20m", "--seed", "5"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("loadgen exit %d: %s", code, stderr.String())
	}
	cfg := config.Default()
	cfg.FileInput.Paths, cfg.FileInput.Flush = []string{pcap}, true
	cfg.Listen.UDP = ""
	cfg.Store.Path = filepath.Join(dir, "store")
	cfg.Store.Retention = 0 // loadgen's clock is months back
	cfg.HTTP.Address = ""
	cfg.DNS.Enabled = false
	if err := collect(context.Background(), cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("collect: %v", err)
	}
	b, err := os.ReadFile(truthFile)
	if err != nil {
		t.Fatal(err)
	}
	var truth loadgen.Truth
	if err := json.Unmarshal(b, &truth); err != nil {
		t.Fatal(err)
	}
	return cfg.Store.Path, &truth
}

func runOut(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("xrdmon %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}

type summaryJSON struct {
	Rows []struct {
		Keys       []string `json:"keys"`
		Transfers  int64    `json:"transfers"`
		ReadBytes  int64    `json:"read_bytes"`
		ReadvBytes int64    `json:"readv_bytes"`
		WriteBytes int64    `json:"write_bytes"`
		Users      int      `json:"users"`
	} `json:"rows"`
	Total struct {
		Transfers int64 `json:"transfers"`
	} `json:"total"`
}

// xrdmon report's sums, from the store and from a running collector's API,
// are loadgen's truth.
func TestReportMatchesTruth(t *testing.T) {
	dir, truth := reportStore(t)
	want, _ := truthBySiteVO(truth)
	check := func(t *testing.T, out string) {
		var s summaryJSON
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if s.Total.Transfers != int64(len(truth.Records)) || len(s.Rows) != len(want) {
			t.Fatalf("%d transfers in %d groups, truth %d in %d\n%.500s", s.Total.Transfers, len(s.Rows), len(truth.Records), len(want), out)
		}
		for _, row := range s.Rows {
			w := want[row.Keys[0]+"/"+row.Keys[1]]
			if w == nil || w.n != row.Transfers || w.read != row.ReadBytes+row.ReadvBytes || w.write != row.WriteBytes {
				t.Errorf("%v: %+v, truth %+v", row.Keys, row, w)
			}
		}
	}
	// From the rollups (what auto picks: they keep site,vo) and from the
	// records, the same sums.
	for _, source := range []string{"auto", "rollups", "records"} {
		check(t, runOut(t, "report", "--store.path", dir, "--since", "100000d", "--until", "2200-01-01T00:00:00Z", "--by", "site,vo", "--format", "json", "--source", source))
	}
	// A dimension the rollups do not keep: auto sums the records, rollups
	// says why not.
	if out := runOut(t, "report", "--store.path", dir, "--since", "100000d", "--until", "2200-01-01T00:00:00Z", "--by", "vo,protocol", "--format", "json"); !strings.Contains(out, `"rows"`) {
		t.Errorf("report by vo,protocol:\n%s", out)
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"report", "--store.path", dir, "--by", "vo,protocol", "--source", "rollups"}, io.Discard, &stderr); code == 0 || !strings.Contains(stderr.String(), "not rolled up") {
		t.Errorf("--source rollups by a combination not kept: exit %d, %s", code, stderr.String())
	}

	// The same question to a collector running on that store, over HTTP.
	d := startDaemon(t, func(c *config.Config) { c.Store.Path, c.Store.Retention = dir, 0 })
	for _, source := range []string{"rollups", "records"} {
		check(t, runOut(t, "report", "--url", "http://"+d.http, "--since", "100000d", "--until", "2200-01-01T00:00:00Z", "--by", "site,vo", "--format", "json", "--source", source))
	}

	// Top users, CSV: exact numbers, at most --n rows, most bytes first.
	csv := strings.Split(strings.TrimSpace(runOut(t, "report", "--store.path", dir, "--since", "100000d", "--until", "2200-01-01T00:00:00Z", "--top", "users", "--n", "3", "--format", "csv")), "\n")
	if len(csv) != 4 || csv[0] != "user,transfers,partial,read_bytes,readv_bytes,write_bytes,users,transfer_seconds" {
		t.Errorf("top users CSV:\n%s", strings.Join(csv, "\n"))
	}
	// The table humanises.
	if tab := runOut(t, "report", "--store.path", dir, "--since", "100000d", "--until", "2200-01-01T00:00:00Z", "--by", "vo"); !strings.Contains(tab, " GB") || !strings.Contains(tab, "TOTAL") {
		t.Errorf("table:\n%s", tab)
	}
}

// A column called read_bytes means bytes read with read() (readv apart,
// in readv_bytes) in every output: records as JSON and CSV, report as
// JSON and CSV, from the records and from the rollups.
func TestReadBytesOneDefinition(t *testing.T) {
	dir, truth := reportStore(t)
	byUser := map[string]int64{}
	user := truth.Records[0].User
	for i := range truth.Records {
		r := &truth.Records[i]
		if byUser[r.User] += r.ReadvBytes; byUser[r.User] > byUser[user] {
			user = r.User
		}
	}
	var read, readv int64
	for i := range truth.Records {
		if r := &truth.Records[i]; r.User == user {
			read, readv = read+r.ReadBytes, readv+r.ReadvBytes
		}
	}
	if readv == 0 {
		t.Fatal("the workload has no vector reads: nothing tells the definitions apart")
	}
	span := []string{"--store.path", dir, "--since", "100000d", "--until", "2200-01-01T00:00:00Z"}
	// sumCSV sums the byte columns of the rows (of user, with byUser).
	sumCSV := func(out string, byUser bool) (sums map[string]int64) {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		head := strings.Split(lines[0], ",")
		sums = map[string]int64{}
		for _, l := range lines[1:] {
			f := strings.Split(l, ",")
			if byUser && f[0] != user {
				continue
			}
			for i, h := range head {
				if h == "read_bytes" || h == "readv_bytes" {
					n, _ := strconv.ParseInt(f[i], 10, 64)
					sums[h] += n
				}
			}
		}
		return sums
	}
	got := map[string][2]int64{}
	var jr, jv int64
	for _, l := range strings.Split(strings.TrimSpace(runOut(t, append([]string{"records", "--user", user, "--format", "json", "--limit", "0"}, span...)...)), "\n") {
		var r record.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		jr, jv = jr+r.ReadBytes, jv+r.ReadvBytes
	}
	got["records json"] = [2]int64{jr, jv}
	c := sumCSV(runOut(t, append([]string{"records", "--user", user, "--format", "csv", "--limit", "0"}, span...)...), false)
	got["records csv"] = [2]int64{c["read_bytes"], c["readv_bytes"]}
	for _, source := range []string{"records", "rollups"} {
		var s summaryJSON
		out := runOut(t, append([]string{"report", "--by", "user", "--format", "json", "--source", source}, span...)...)
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatal(err)
		}
		for _, row := range s.Rows {
			if row.Keys[0] == user {
				got["report json "+source] = [2]int64{row.ReadBytes, row.ReadvBytes}
			}
		}
		c := sumCSV(runOut(t, append([]string{"report", "--by", "user", "--format", "csv", "--source", source}, span...)...), true)
		got["report csv "+source] = [2]int64{c["read_bytes"], c["readv_bytes"]}
	}
	for where, v := range got {
		if v != [2]int64{read, readv} {
			t.Errorf("%s: read_bytes %d readv_bytes %d, truth %d and %d", where, v[0], v[1], read, readv)
		}
	}
}

// xrdmon records --user lists that user's records, all of them.
func TestRecordsByUser(t *testing.T) {
	dir, truth := reportStore(t)
	user := truth.Records[0].User
	n := 0
	for i := range truth.Records {
		if truth.Records[i].User == user {
			n++
		}
	}
	out := runOut(t, "records", "--store.path", dir, "--since", "100000d", "--until", "2200-01-01T00:00:00Z", "--user", user, "--format", "json", "--limit", "0")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != n {
		t.Fatalf("%d records of %s, truth %d", len(lines), user, n)
	}
	for _, l := range lines {
		var r record.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.User != user {
			t.Fatalf("record %s: %v", l, err)
		}
	}
}

// Strings from packets reach a terminal as text: no escape sequence, no
// control character, no invalid UTF-8 passes.
func TestRecordsTableEscapes(t *testing.T) {
	dir := t.TempDir()
	o := store.DefaultOptions()
	o.Path = filepath.Join(dir, store.DBFile)
	st, err := store.Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	r := record.Record{RecordID: "0123456789abcdef0123456789abcdef", Start: now.Add(-time.Minute), End: now, Received: now,
		ServerIP: "192.0.2.1", User: "evil\x1b[2J\x1b[31m", Path: "/x/<script>alert(1)</script>\r\x07\xff", VO: "cms"}
	if err := st.Append(context.Background(), []record.Record{r}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	out := runOut(t, "records", "--store.path", dir)
	if strings.ContainsAny(out, "\x1b\r\x07") || !strings.Contains(out, `evil\x1b[2J`) || !strings.Contains(out, `\xff`) {
		t.Errorf("table not escaped: %q", out)
	}
}

// The collector's rollups answer top-N and series over HTTP with the sums
// of loadgen's truth: by site and VO, and hour by hour for the total.
func TestRollupAPIMatchesTruth(t *testing.T) {
	dir, truth := reportStore(t)
	want, total := truthBySiteVO(truth)
	d := startDaemon(t, func(c *config.Config) { c.Store.Path, c.Store.Retention = dir, 0 })
	const window = "from=2025-01-01T00:00:00Z&to=2027-01-01T00:00:00Z"
	var top struct {
		Rows []struct {
			Keys       []string `json:"keys"`
			Transfers  int64    `json:"transfers"`
			Partial    int64    `json:"partial"`
			ReadBytes  int64    `json:"read_bytes"`
			ReadvBytes int64    `json:"readv_bytes"`
			WriteBytes int64    `json:"write_bytes"`
			Users      int64    `json:"users"`
		} `json:"rows"`
	}
	getJSON(t, "http://"+d.http+"/api/v1/top?by=site,vo&n=1000&"+window, &top)
	if len(top.Rows) != len(want) {
		t.Fatalf("%d site/vo rows, truth %d", len(top.Rows), len(want))
	}
	for _, r := range top.Rows {
		w := want[r.Keys[0]+"/"+r.Keys[1]]
		if w == nil || r.Transfers+r.Partial != w.n || r.ReadBytes+r.ReadvBytes != w.read || r.WriteBytes != w.write || r.Users < 1 {
			t.Errorf("%v: %+v, truth %+v", r.Keys, r, w)
		}
	}
	var series struct {
		Step   string `json:"step"`
		Series []struct {
			Total struct {
				Transfers  int64 `json:"transfers"`
				Partial    int64 `json:"partial"`
				ReadBytes  int64 `json:"read_bytes"`
				ReadvBytes int64 `json:"readv_bytes"`
				WriteBytes int64 `json:"write_bytes"`
			} `json:"total"`
			Points []json.RawMessage `json:"points"`
		} `json:"series"`
	}
	getJSON(t, "http://"+d.http+"/api/v1/rollups?step=1h&from=2025-12-31T00:00:00Z&to=2026-01-02T00:00:00Z", &series)
	if len(series.Series) != 1 {
		t.Fatalf("%d series for the total", len(series.Series))
	}
	s := series.Series[0].Total
	if s.Transfers+s.Partial != total.n || s.ReadBytes+s.ReadvBytes != total.read || s.WriteBytes != total.write || len(series.Series[0].Points) == 0 {
		t.Errorf("total %+v over %d hours, truth %+v", s, len(series.Series[0].Points), total)
	}
	// Dimensions not rolled up, and bad steps, are refused with a reason.
	for _, q := range []string{"top?by=site,user", "rollups?step=5m", "top?by=nope"} {
		if code := getStatus(t, "http://"+d.http+"/api/v1/"+q); code != 400 {
			t.Errorf("%s: status %d, want 400", q, code)
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v\n%.300s", url, err, b)
	}
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// truthSums are loadgen's truth summed: transfers, bytes read (with
// vector reads) and written.
type truthSums struct{ n, read, write int64 }

func (s *truthSums) add(r *record.Record) {
	s.n++
	s.read += r.ReadBytes + r.ReadvBytes
	s.write += r.WriteBytes
}

// truthBySiteVO sums the truth's records by "site/vo", and in all.
func truthBySiteVO(truth *loadgen.Truth) (map[string]*truthSums, truthSums) {
	by := map[string]*truthSums{}
	var total truthSums
	for i := range truth.Records {
		r := &truth.Records[i]
		k := r.Site + "/" + r.VO
		if by[k] == nil {
			by[k] = &truthSums{}
		}
		by[k].add(r)
		total.add(r)
	}
	return by, total
}
