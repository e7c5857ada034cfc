package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// cliStore writes n records ending a second apart up to a minute ago, the
// last with a long path, and returns the store's directory.
func cliStore(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	o := store.DefaultOptions()
	o.Path = filepath.Join(dir, store.DBFile)
	st, err := store.Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	recs := make([]record.Record, n)
	for i := range recs {
		e := end.Add(time.Duration(i-n+1) * time.Second)
		recs[i] = record.Record{RecordID: record.EventID("cli", int64(i), 0, 'x', 0, 0, 0, nil)[:32], Start: e.Add(-time.Second), End: e, Received: e,
			ServerIP: "192.0.2.1", User: "user" + string(rune('a'+i%26)), Path: "/store/file.root", VO: "cms"}
	}
	recs[n-1].Path = "/store/" + strings.Repeat("very-long-directory-name/", 12) + "last.root"
	if err := st.Append(context.Background(), recs, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runCode(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

// TestRecordsNewestWithCount (issue 28, item 13): records lists the newest
// first, says how many the window holds when --limit cuts it, and a table
// fits a terminal whatever the path.
func TestRecordsNewestWithCount(t *testing.T) {
	dir := cliStore(t, 30)
	code, out, errs := runCode("records", "--store.path", dir, "--limit", "10")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 11 || !strings.Contains(lines[1], "last.root") {
		t.Errorf("want the header and 10 records, the newest first:\n%s", out)
	}
	if !strings.Contains(errs, "10 of 30 records in the window shown, newest first") {
		t.Errorf("stderr %q does not give the count", errs)
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > 220 {
			t.Errorf("a table line of %d characters: %q", n, l)
		}
	}
	_, out, _ = runCode("records", "--store.path", dir, "--limit", "1", "--oldest", "--format", "csv")
	if !strings.Contains(out, "duration_seconds") || !strings.Contains(out, "/store/file.root") || strings.Contains(out, "last.root") {
		t.Errorf("--oldest --format csv:\n%s", out)
	}
}

// TestCLIMistakes: a mistake is refused with one line that says what to
// do, never an empty answer or a page of usage.
func TestCLIMistakes(t *testing.T) {
	dir := cliStore(t, 3)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"records", "--store.path", dir, "--reason", "bogus"}, `--reason "bogus" is not a partial reason`},
		{[]string{"records", "--store.path", dir, "--since", "1h", "--until", "2h"}, "is not after --since"},
		{[]string{"records", "--store.path", dir, "extra"}, `unexpected argument "extra"`},
		{[]string{"report", "--store.path", dir, "--top", "user", "--n", "0"}, "--n 0: want at least 1"},
		{[]string{"report", "--store.path", dir, "site"}, `unexpected argument "site"`},
		{[]string{"collect", "--listen.udpp=:1"}, "unknown flag --listen.udpp (did you mean --listen.udp?)"},
		{[]string{"records", "--store.pth", dir}, "did you mean --store.path?"},
	} {
		code, _, errs := runCode(c.args...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("xrdmon %s: exit %d, %q; want an error with %q", strings.Join(c.args, " "), code, errs, c.want)
		}
		if n := strings.Count(errs, "\n"); n > 3 {
			t.Errorf("xrdmon %s: %d lines of error", strings.Join(c.args, " "), n)
		}
	}
	// Outside the collector's directory, report says where to look.
	wd, _ := os.Getwd()
	t.Cleanup(func() { _ = os.Chdir(wd) })
	if err := os.Chdir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCode("report"); code == 0 || !strings.Contains(errs, "--store.path") || !strings.Contains(errs, "--url") {
		t.Errorf("report outside the data directory: exit %d, %q", code, errs)
	}
}

// TestHTTPPortClash: a port in use says so and what to do, as the UDP one
// does.
func TestHTTPPortClash(t *testing.T) {
	d := startDaemon(t, nil)
	code, _, errs := runCode("collect", "--listen.udp=127.0.0.1:0", "--http.address="+d.http, "--store.path="+t.TempDir(), "--dns.enabled=false")
	if code == 0 || !strings.Contains(errs, "another collector") || !strings.Contains(errs, "--http.address") {
		t.Errorf("exit %d, %q", code, errs)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStartupLog: the log names the dashboard's address, and "outputs=none"
// when the store is the only destination (the rollups are not an output).
func TestStartupLog(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"collect", "--listen.udp=127.0.0.1:0", "--http.address=127.0.0.1:0", "--store.path=" + t.TempDir(), "--dns.enabled=false"}, io.Discard, &errs)
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(errs.String(), "Collector running"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no start in 20 s: %s", errs.String())
		}
	}
	cancel()
	<-done
	log := errs.String()
	if !regexp.MustCompile(`dashboard=http://127\.0\.0\.1:\d+/`).MatchString(log) || !strings.Contains(log, "outputs=none") {
		t.Errorf("startup log:\n%s", log)
	}
}
