package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/file"
	"github.com/xrdmon/xrdmon/internal/source/sourcetest"
)

func writePcap(t *testing.T, path string, sender netip.AddrPort, pkts [][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps := make([]source.Packet, len(pkts))
	for i, p := range pkts {
		ps[i] = source.Packet{Data: p, Sender: sender, Received: time.Unix(1700000200, int64(i)*1000)}
	}
	if err := file.WritePcap(f, netip.MustParseAddrPort("127.0.0.1:9930"), ps); err != nil {
		t.Fatal(err)
	}
}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestReplayPcap: a pcap capture replays into exact records, and a second
// replay gives identical record ids; the summary counts every packet.
func TestReplayPcap(t *testing.T) {
	dir := t.TempDir()
	s := &session{stod: 1700000000, sid: 99}
	pkts := s.files(10, 1700000100)
	// An open that never closes: flushed at end of input.
	var extra session = *s
	pcap := filepath.Join(dir, "cap.pcap")
	writePcap(t, pcap, netip.MustParseAddrPort("[2001:db8::1]:40000"), append(pkts, openOnly(&extra)...))

	var ids [2][]string
	for i := range 2 {
		out := filepath.Join(dir, "out.jsonl")
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"replay", "--out", out, pcap}, &stdout, &stderr); code != 0 {
			t.Fatalf("replay exit %d: %s", code, stderr.String())
		}
		lines := readLines(t, out)
		if len(lines) != 11 {
			t.Fatalf("got %d records, want 11\n%s", len(lines), stderr.String())
		}
		partial := 0
		for _, l := range lines {
			ids[i] = append(ids[i], l["record_id"].(string))
			if l["reason"] == string(record.EndOfInput) {
				partial++
				if l["read_bytes"].(float64) != 777 {
					t.Errorf("partial record lost the xfr bytes: %v", l)
				}
			}
			if l["server_ip"] != "2001:db8::1" {
				t.Errorf("server_ip %v", l["server_ip"])
			}
		}
		if partial != 1 {
			t.Errorf("%d end_of_input records, want 1", partial)
		}
		sum := stderr.String()
		for _, want := range []string{"accounted", "0 rejected", "0 lost", "10 complete, 1 partial (end_of_input 1)"} {
			if !strings.Contains(sum, want) {
				t.Errorf("summary lacks %q:\n%s", want, sum)
			}
		}
	}
	if strings.Join(ids[0], ",") != strings.Join(ids[1], ",") {
		t.Error("record ids differ between two replays of the same capture")
	}
}

// openOnly returns a login, path and an f packet with an open and an xfr.
func openOnly(s *session) [][]byte {
	pkts := s.files(1, 1700000300)
	// Keep ident, u, d; rebuild the f packet without close and disc.
	out := pkts[:len(pkts)-1]
	return append(out, fOpenXfr(s, s.dict, s.dict+1))
}

// TestReplayRealPackets: the captured production packets replay with no
// rejection and no records (they hold no f-stream).
func TestReplayRealPackets(t *testing.T) {
	path := sourcetest.RealPacketsPath(t)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", "--schema", "gracc", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "11 handled, 11 accounted, 0 rejected") {
		t.Errorf("summary:\n%s", stderr.String())
	}
}

func TestReplayUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay"}, &stdout, &stderr); code != 2 {
		t.Errorf("no input: exit %d", code)
	}
	if code := run(context.Background(), []string{"replay", "--schema", "xml", "-"}, &stdout, &stderr); code != 2 {
		t.Errorf("bad schema: exit %d", code)
	}
	if code := run(context.Background(), []string{"replay", "/nonexistent/capture"}, &stdout, &stderr); code != 1 {
		t.Errorf("unreadable input: exit %d", code)
	}
}
