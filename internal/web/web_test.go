package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, h http.Handler, path string) (int, string, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String(), rec.Header()
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "xrdmon_test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(3)
	s := New(Config{Address: "127.0.0.1:0"}, reg, nil)
	s.Handle("GET /api/v1/hello", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"hello":"world"}`))
	}))
	h := s.Handler()

	cases := []struct {
		path     string
		code     int
		contains string
	}{
		{"/healthz", 200, "ok"},
		{"/readyz", 200, `"status":"ready"`},
		{"/api/v1/hello", 200, `"hello":"world"`},
		{"/debug/pprof/", 404, ""}, // off unless EnableProfiling
		{"/debug/pprof/goroutine?debug=1", 404, ""},
		{"/debug/pprof/cmdline", 404, ""},
		{"/nowhere", 404, ""},
	}
	for _, tc := range cases {
		code, body, _ := get(t, h, tc.path)
		if code != tc.code || !strings.Contains(body, tc.contains) {
			t.Errorf("GET %s = %d %.80q, want %d containing %q", tc.path, code, body, tc.code, tc.contains)
		}
	}
	// /metrics last, so it sees the requests above.
	code, body, _ := get(t, h, "/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, want := range []string{
		"xrdmon_test_things_total 3",
		`xrdmon_http_requests_total{code="200",handler="/healthz"} 1`,
		`xrdmon_http_requests_total{code="200",handler="GET /api/v1/hello"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

// TestProfiling: with profiling on, the profiles are served, and the
// command line (which may carry a password) still is not.
func TestProfiling(t *testing.T) {
	s := New(Config{Address: "127.0.0.1:0"}, nil, nil)
	s.EnableProfiling()
	h := s.Handler()
	for _, tc := range []struct {
		path     string
		code     int
		contains string
	}{
		{"/debug/pprof/", 200, "goroutine"},
		{"/debug/pprof/goroutine?debug=1", 200, "goroutine profile"},
		{"/debug/pprof/mutex?debug=1", 200, "mutex"},
		{"/debug/pprof/cmdline", 404, ""},
	} {
		code, body, _ := get(t, h, tc.path)
		if code != tc.code || !strings.Contains(body, tc.contains) {
			t.Errorf("GET %s = %d %.80q, want %d containing %q", tc.path, code, body, tc.code, tc.contains)
		}
	}
}

func TestReadiness(t *testing.T) {
	s := New(Config{Address: "127.0.0.1:0"}, nil, nil)
	brokerErr := errors.New("connection refused")
	broker := func() error { return brokerErr }
	s.AddCheck("store", func() error { return nil })
	s.AddCheck("amqp_input", broker)
	s.AddCheck("panicky", func() error { panic("boom") })

	code, body, hdr := get(t, s.Handler(), "/readyz")
	if code != http.StatusServiceUnavailable {
		t.Errorf("code = %d, want 503", code)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var rb readyBody
	if err := json.Unmarshal([]byte(body), &rb); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if rb.Status != "not ready" || strings.Join(rb.Failed, ",") != "amqp_input,panicky" {
		t.Errorf("body = %+v", rb)
	}
	if len(rb.Checks) != 3 || rb.Checks[0].Name != "amqp_input" || rb.Checks[0].Error != "connection refused" ||
		!rb.Checks[2].OK || rb.Checks[2].Name != "store" || !strings.Contains(rb.Checks[1].Error, "boom") {
		t.Errorf("checks = %+v", rb.Checks)
	}

	brokerErr = nil
	s.RemoveCheck("panicky")
	code, body, _ = get(t, s.Handler(), "/readyz")
	if code != http.StatusOK || !strings.Contains(body, `"status":"ready"`) {
		t.Errorf("after recovery: %d %s", code, body)
	}
}

func TestRunServesAndShutsDownGracefully(t *testing.T) {
	s := New(Config{Address: "127.0.0.1:0"}, prometheus.NewRegistry(), nil)
	started := make(chan struct{})
	finish := make(chan struct{})
	s.Handle("/slow", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(started)
		<-finish
		_, _ = w.Write([]byte("done"))
	}))
	addr, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr().String() != addr.String() {
		t.Errorf("Addr() = %v, want %v", s.Addr(), addr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()
	base := "http://" + addr.String()

	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		t.Errorf("/healthz = %d %q", resp.StatusCode, b)
	}

	// A request in progress when shutdown starts still completes.
	slow := make(chan string, 1)
	go func() {
		resp, err := http.Get(base + "/slow")
		if err != nil {
			slow <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		slow <- string(b)
	}()
	<-started
	cancel()
	close(finish)
	if got := <-slow; got != "done" {
		t.Errorf("request in flight during shutdown got %q", got)
	}
	if err := <-runErr; err != nil {
		t.Errorf("Run = %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("server still answers after Run returned")
	}
}

func TestListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := New(Config{Address: ln.Addr().String()}, nil, nil)
	err = s.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen http") {
		t.Errorf("Run on a used port = %v, want a listen error", err)
	}
}

func TestTwoServersShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := New(Config{Address: "127.0.0.1:0"}, reg, nil)
	b := New(Config{Address: "127.0.0.1:0"}, reg, nil)
	get(t, a.Handler(), "/healthz")
	get(t, b.Handler(), "/healthz")
	_, body, _ := get(t, a.Handler(), "/metrics")
	if !strings.Contains(body, `xrdmon_http_requests_total{code="200",handler="/healthz"} 2`) {
		t.Errorf("shared counter not shared:\n%s", body)
	}
}

// A client that never reads its answer is cut off after the write timeout,
// so that the answer it holds in memory is let go (issue 25: 30 clients
// holding 20 MB answers kept 1.98 GB for minutes).
func TestWriteTimeout(t *testing.T) {
	s := New(Config{Address: "127.0.0.1:0"}, prometheus.NewRegistry(), nil)
	if s.srv.WriteTimeout != WriteTimeout || WriteTimeout <= 0 {
		t.Fatalf("write timeout %v", s.srv.WriteTimeout)
	}
	s.srv.WriteTimeout = 100 * time.Millisecond // the same mechanism, sooner
	gaveUp := make(chan error, 1)
	s.Handle("/big", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := make([]byte, 1<<20)
		for {
			if _, err := w.Write(chunk); err != nil {
				gaveUp <- err
				return
			}
		}
	}))
	addr, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	conn, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	select { // never reading
	case <-gaveUp:
	case <-time.After(30 * time.Second):
		t.Fatal("the answer to a client that does not read was still being written after 30 s")
	}
}
