package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

func TestParseStatCPU(t *testing.T) {
	line := []byte("1234 (xrdmon (collect) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 12 0 100 1000000 500 18446744073709551615")
	got, err := parseStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 4 * time.Second; got != want {
		t.Errorf("cpu = %s, want %s", got, want)
	}
	if p := statPPID(line); p != 1 {
		t.Errorf("ppid = %d, want 1", p)
	}
	if _, err := parseStatCPU([]byte("garbage")); err == nil {
		t.Error("no error for a line without a command name")
	}
	if _, err := procCPU(os.Getpid()); err != nil {
		t.Errorf("own process: %v", err)
	}
}

func TestParseHWM(t *testing.T) {
	got, err := parseHWM([]byte("Name:\txrdmon\nVmPeak:\t  900 kB\nVmHWM:\t   2048 kB\nVmRSS:\t 1024 kB\n"))
	if err != nil || got != 2<<20 {
		t.Errorf("hwm = %d, %v; want %d", got, err, 2<<20)
	}
	if _, err := parseHWM([]byte("Name: x\n")); err == nil {
		t.Error("no error without VmHWM")
	}
	s, err := sampleTree(os.Getpid())
	if err != nil || s.PeakRSS <= 0 || s.CPU < 0 {
		t.Errorf("own tree: %+v, %v", s, err)
	}
}

func TestParseProcNetUDP(t *testing.T) {
	table := `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  100: 0100007F:26C2 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 17
  101: 0100007F:26C3 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 5
  102: 0000000000000000FFFF00000100007F:26C2 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 3
`
	got := parseProcNetUDP([]byte(table), 0x26C2)
	if !got.Bound || got.Drops != 20 {
		t.Errorf("port 0x26C2: %+v, want bound with 20 drops", got)
	}
	if got := parseProcNetUDP([]byte(table), 9999); got.Bound || got.Drops != 0 {
		t.Errorf("absent port: %+v", got)
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP xrdmon_packets_total Datagrams.
# TYPE xrdmon_packets_total counter
xrdmon_packets_total{outcome="accounted"} 1000
xrdmon_packets_total{outcome="rejected"} 2
xrdmon_packets_lost_total{domain="f"} 3
xrdmon_packets_lost_total{domain="main"} 4
xrdmon_udp_kernel_drops_total 7 1700000000000
process_cpu_seconds_total 1.5e+00
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"xrdmon_packets_total": 1002, "xrdmon_packets_lost_total": 7,
		"xrdmon_udp_kernel_drops_total": 7, "process_cpu_seconds_total": 1.5,
	} {
		if got := m.get(name); got != want {
			t.Errorf("%s = %g, want %g", name, got, want)
		}
	}
	if got := m.series(`xrdmon_packets_total{outcome="accounted"}`); got != 1000 {
		t.Errorf("accounted = %g, want 1000", got)
	}
}

func TestParseObserved(t *testing.T) {
	own := record.Record{RecordID: "00112233445566778899aabbccddeeff", ServerIP: "127.0.0.2", ServerStod: 1700000000, FileID: 7,
		Path: "/store/a.root", ReadBytes: 10, ReadvBytes: 20, WriteBytes: 30}
	ownPartial := own
	ownPartial.Reason = record.Timeout
	cases := []struct {
		name string
		line string
		want Observed
		ok   bool
	}{
		{"xrdmon", string(record.AppendJSON(nil, &own)),
			Observed{ServerIP: "127.0.0.2", Stod: 1700000000, FileID: 7, HasID: true, Path: "/store/a.root", Read: 10, Readv: 20, Write: 30}, true},
		{"xrdmon partial", string(record.AppendJSON(nil, &ownPartial)),
			Observed{ServerIP: "127.0.0.2", Stod: 1700000000, FileID: 7, HasID: true, Path: "/store/a.root", Read: 10, Readv: 20, Write: 30, Partial: true}, true},
		{"gracc", `{"timestamp":1,"server_ip":"127.0.0.3","filename":"/store/b.root","read":5,"readv":6,"write":0,"user":"u"}`,
			Observed{ServerIP: "127.0.0.3", Path: "/store/b.root", Read: 5, Readv: 6}, true},
		{"envelope", `{"record":{"server_ip":"127.0.0.4","file_lfn":"/c","read":1}}`,
			Observed{ServerIP: "127.0.0.4", Path: "/c", Read: 1}, true},
		{"event", `{"event_id":"x","server_ip":"127.0.0.2","path":"/p"}`, Observed{}, false},
		{"no server", `{"path":"/p","read_bytes":1}`, Observed{}, false},
		{"not json", `hello`, Observed{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := parseObserved([]byte(c.line))
			if ok != c.ok || (ok && got != c.want) {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func rec(ip string, stod int64, fid uint32, path string, rd int64, reason record.Reason) *record.Record {
	return &record.Record{ServerIP: ip, ServerStod: stod, FileID: fid, Path: path, ReadBytes: rd, Reason: reason}
}

func TestMatcher(t *testing.T) {
	start := time.Unix(1000, 0)
	m := newMatcher(start, false)
	m.add(0, rec("127.0.0.2", 1, 1, "/a", 100, record.Complete))
	m.add(1, rec("127.0.0.2", 1, 2, "/b", 200, record.Complete))
	m.add(2, rec("127.0.0.2", 1, 3, "/c", 300, record.Complete))
	m.add(3, rec("127.0.0.3", 1, 1, "/d", 400, record.Complete))
	m.add(4, rec("127.0.0.3", 1, 2, "/e", 0, record.EndOfInput))
	m.add(5, rec("127.0.0.3", 1, 3, "/f", 0, record.ServerRestart))
	m.sent(2, start.Add(10*time.Millisecond))
	m.sent(6, start.Add(20*time.Millisecond))
	if n := m.pending(); n != 5 {
		t.Fatalf("pending = %d, want 5", n)
	}
	obs := func(ip string, fid uint32, rd int64, partial bool) Observed {
		return Observed{ServerIP: ip, Stod: 1, FileID: fid, HasID: true, Read: rd, Partial: partial}
	}
	m.observe([]Observed{obs("127.0.0.2", 1, 100, false), obs("127.0.0.2", 2, 201, false)}, start.Add(110*time.Millisecond), false)
	m.observe([]Observed{obs("127.0.0.2", 1, 100, false), obs("127.0.0.9", 1, 1, false), obs("127.0.0.3", 3, 5, true)}, start.Add(220*time.Millisecond), false)
	m.observe([]Observed{obs("127.0.0.3", 1, 400, true)}, start.Add(time.Hour), true)
	c, lat := m.result()
	want := Check{Expected: 5, Complete: 1, Partial: 2, Missing: 1, WrongBytes: 1, Open: 1, Unexpected: 1, Duplicates: 1}
	if c != want {
		t.Errorf("check = %+v, want %+v", c, want)
	}
	// Records 0 and 1 were sent at 10ms and seen at 110ms; record 5 sent
	// at 20ms, seen at 220ms; record 3 was seen late and is not timed.
	wantLat := []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}
	if !equalDurations(lat, wantLat) {
		t.Errorf("latencies = %v, want %v", lat, wantLat)
	}
	if p := percentile(lat, 50); p != 100*time.Millisecond {
		t.Errorf("p50 = %s", p)
	}
	if p := percentile(lat, 99); p != 200*time.Millisecond {
		t.Errorf("p99 = %s", p)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMatcherByPath(t *testing.T) {
	start := time.Now()
	m := newMatcher(start, true)
	m.add(0, rec("127.0.0.2", 1, 1, "/a", 100, record.Complete))
	m.add(1, rec("127.0.0.2", 1, 2, "/a", 200, record.Complete))
	m.add(2, rec("127.0.0.2", 1, 3, "/b", 300, record.Complete))
	// GRACC-like records: no stod or file id; the second /a matches by bytes.
	m.observe([]Observed{
		{ServerIP: "127.0.0.2", Path: "/a", Read: 200},
		{ServerIP: "127.0.0.2", Path: "/a", Read: 100},
		{ServerIP: "127.0.0.2", Path: "/a", Read: 100},
		{ServerIP: "127.0.0.2", Path: "/b", Read: 1},
	}, start.Add(time.Second), false)
	c, _ := m.result()
	want := Check{Expected: 3, Complete: 2, WrongBytes: 1, Duplicates: 1}
	if c != want {
		t.Errorf("check = %+v, want %+v", c, want)
	}
}

func TestJSONLSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	s := newJSONLSource(path)
	defer s.Close()
	if got, err := s.Poll(context.Background()); err != nil || len(got) != 0 {
		t.Fatalf("before the file exists: %v, %v", got, err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(`{"server_ip":"127.0.0.2","filename":"/a","read":1}` + "\n" + `{"server_ip":"127.0.0.2","file`)
	got, err := s.Poll(context.Background())
	if err != nil || len(got) != 1 || got[0].Path != "/a" {
		t.Fatalf("first poll: %+v, %v", got, err)
	}
	f.WriteString(`name":"/b","read":2}` + "\nnot json\n")
	got, err = s.Poll(context.Background())
	if err != nil || len(got) != 1 || got[0].Path != "/b" || got[0].Read != 2 {
		t.Fatalf("second poll (torn line completed): %+v, %v", got, err)
	}
}

func sampleRows() []Row {
	return []Row{
		{Step: "rate=1000", Servers: 4, Clients: 16, Sent: 10000, Offered: 1000, Accepted: 1000, SeqGaps: 0,
			CPUPer100k: 0.5, PeakRSS: 40 << 20, LatencyP50: 120 * time.Millisecond, LatencyP99: 300 * time.Millisecond,
			Check: Check{Expected: 5000, Complete: 5000}},
		{Step: "rate=2000", Servers: 4, Clients: 16, Sent: 20000, Offered: 2000, Accepted: 1900, SeqGaps: -1, KernelDrops: 100, LossPct: 0.5,
			CPUPer100k: 0.6, PeakRSS: 50 << 20, LatencyP50: 150 * time.Millisecond, LatencyP99: 900 * time.Millisecond,
			Check: Check{Expected: 10000, Complete: 9990, Missing: 10}, SimSpeed: 190.5},
	}
}

func TestWriteTableAndCSV(t *testing.T) {
	rows := sampleRows()
	var tb bytes.Buffer
	WriteTable(&tb, rows, true)
	lines := strings.Split(strings.TrimSpace(tb.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "step") || !strings.HasPrefix(lines[2], "rate=2000") {
		t.Fatalf("table:\n%s", tb.String())
	}
	var cb bytes.Buffer
	if err := WriteCSV(&cb, rows); err != nil {
		t.Fatal(err)
	}
	csvBytes := bytes.Clone(cb.Bytes())
	recs, err := csv.NewReader(&cb).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || len(recs[0]) != len(Columns) {
		t.Fatalf("csv: %d rows, %d columns", len(recs), len(recs[0]))
	}
	col := func(name string) int {
		for i, c := range Columns {
			if c == name {
				return i
			}
		}
		t.Fatalf("no column %s", name)
		return -1
	}
	back, err := ReadCSV(bytes.NewReader(csvBytes))
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back[1].Step != "rate=2000" || back[1].Value != 2000 || back[1].SeqGaps != -1 || back[1].Missing != 10 ||
		back[1].LatencyP99 != 900*time.Millisecond || back[0].PeakRSS != 40<<20 || back[1].SimSpeed != 190.5 {
		t.Errorf("ReadCSV: %+v", back)
	}
	// A CSV from before the last column (sim_speed) still reads.
	var old strings.Builder
	for _, line := range strings.SplitAfter(string(csvBytes), "\n") {
		if i := strings.LastIndexByte(line, ','); i >= 0 {
			old.WriteString(line[:i] + "\n")
		}
	}
	if back, err := ReadCSV(strings.NewReader(old.String())); err != nil || back[1].SimSpeed != 0 {
		t.Errorf("CSV without sim_speed: %v, %+v", err, back)
	}
	for name, want := range map[string]string{"seq_gaps": "-", "kernel_drops": "100", "loss_pct": "0.500", "latency_p99_ms": "900.0", "missing": "10", "peak_rss_mib": "50.0"} {
		if got := recs[2][col(name)]; got != want {
			t.Errorf("row 2 %s = %q, want %q", name, got, want)
		}
	}
}

func TestWriteSVG(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSVG(&b, sampleRows(), "a <test>"); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if !strings.HasPrefix(s, "<svg") || !strings.HasSuffix(s, "</svg>\n") || strings.Count(s, "<polyline") != 3 || !strings.Contains(s, "a &lt;test&gt;") {
		t.Errorf("svg:\n%s", s)
	}
	// Same rate, varying clients: the x axis is the parameter.
	rows := sampleRows()
	rows[0].Step, rows[0].Value, rows[1].Step, rows[1].Value, rows[1].Offered = "clients=50", 50, "clients=100", 100, 1000
	b.Reset()
	if err := WriteSVG(&b, rows, "clients"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), ">clients (at 1k packets/s)<") {
		t.Errorf("x axis is not the parameter:\n%s", b.String())
	}
	if got := niceCeil(1300); got != 2000 {
		t.Errorf("niceCeil(1300) = %g", got)
	}
}

func TestExpand(t *testing.T) {
	got := expand("--listen={udp_addr} --dir={dir}/x {udp_port}", map[string]string{"udp_addr": "127.0.0.1:5", "dir": "/d", "udp_port": "5"})
	if want := "--listen=127.0.0.1:5 --dir=/d/x 5"; got != want {
		t.Errorf("expand = %q, want %q", got, want)
	}
}

// TestValidate: the defaults are valid; a zero time or count is refused
// by name (Run fills in no defaults), before any step starts.
func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, set := range map[string]func(*Config){
		"poll":          func(c *Config) { c.Poll = 0 },
		"quiet":         func(c *Config) { c.Quiet = -time.Second },
		"step-duration": func(c *Config) { c.StepDuration = 0 },
		"max-settle":    func(c *Config) { c.MaxSettle = 0 },
		"packets":       func(c *Config) { c.Packets = 0 },
	} {
		c := DefaultConfig()
		set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
		c.Target.Command = []string{"true"}
		if _, err := Run(context.Background(), c, nil); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Run with a bad %s: %v", name, err)
		}
	}
}
