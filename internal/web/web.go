// Package web is xrdmon's HTTP server: Prometheus metrics, liveness and
// readiness probes, Go profiles when asked for, and whatever other packages
// mount with Handle.
package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/xrdmon/xrdmon/internal/metrics"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// WriteTimeout bounds the time to write one answer: a client that stops
// reading (holding an answer in the server's memory) is cut off after it.
// Profiles (?seconds=N) must stay shorter.
const WriteTimeout = time.Minute

// ShutdownTimeout bounds how long Run waits for requests in progress after
// its context is canceled.
const ShutdownTimeout = 5 * time.Second

// Server serves xrdmon's HTTP endpoints:
//
//	/metrics        Prometheus metrics from the registry given to New
//	/healthz        liveness: 200 while the process serves HTTP
//	/readyz         readiness: 200 when every check added with AddCheck passes,
//	                503 otherwise; both with a JSON body naming each check
//	/debug/pprof/   Go profiles (net/http/pprof), only after EnableProfiling;
//	                never the command line (it may hold secrets)
//
// plus whatever is mounted with Handle. All methods are safe for concurrent
// use, also while Run is serving.
type Server struct {
	addr string
	log  *slog.Logger
	mux  *http.ServeMux
	srv  *http.Server

	mu       sync.Mutex
	ln       net.Listener
	checks   map[string]func() error
	requests *prometheus.CounterVec
}

// Config configures the HTTP server: the http section of the
// configuration.
type Config struct {
	Address string `yaml:"address" help:"HTTP listen address for metrics and health; loopback by default; empty disables it"`
	PProf   bool   `yaml:"pprof" help:"serve Go profiles on /debug/pprof/ (only with a loopback http.address: profiles show memory contents)"`
	// APITokenFile is read by the query API (internal/api).
	APITokenFile string `yaml:"api_token_file" help:"file holding a bearer token that /api/v1 then requires; set it when http.address is not loopback"`
}

// DefaultPort is the HTTP port: clear of XRootD's 9930 (detailed) and 9931
// (summary) monitoring ports and of the shoveler's 9993.
const DefaultPort = "9939"

// DefaultConfig returns the defaults: loopback only, no profiles.
func DefaultConfig() Config { return Config{Address: "127.0.0.1:" + DefaultPort} }

// New returns a server for cfg.Address (host:port; port 0 picks a free
// port), serving profiles when cfg.PProf. It
// serves /metrics from reg, and registers its own request counter,
// xrdmon_http_requests_total{handler,code}, on reg. reg may be nil (an empty
// registry is used); log may be nil.
func New(cfg Config, reg *prometheus.Registry, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s := &Server{
		addr:   cfg.Address,
		log:    log,
		mux:    http.NewServeMux(),
		checks: map[string]func() error{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xrdmon_http_requests_total",
			Help: "HTTP requests served, by handler pattern and status code.",
		}, []string{"handler", "code"}),
	}
	ms := metrics.NewSet(reg)
	s.requests = metrics.Add(ms, s.requests)
	if err := ms.Err(); err != nil {
		log.Warn("Cannot register HTTP metrics", "err", err)
	}
	s.srv = &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	s.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:          reg,
		EnableOpenMetrics: true,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}))
	s.Handle("/healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	}))
	s.Handle("/readyz", http.HandlerFunc(s.serveReady))

	if cfg.PProf {
		s.EnableProfiling()
	}
	return s
}

// EnableProfiling serves Go profiles under /debug/pprof/. The caller
// decides who may reach them (config allows it on loopback only): heap
// and goroutine dumps show the process's memory. /debug/pprof/cmdline is
// not served: a command line can carry a password.
func (s *Server) EnableProfiling() {
	// On our own mux, not http.DefaultServeMux.
	s.mux.HandleFunc("/debug/pprof/", pprof.Index)
	s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s.mux.HandleFunc("/debug/pprof/mutex", withProfiling(pprof.Handler("mutex").ServeHTTP, runtime.SetMutexProfileFraction))
	s.mux.HandleFunc("/debug/pprof/block", withProfiling(pprof.Handler("block").ServeHTTP, setBlockRate))
	s.mux.HandleFunc("/debug/pprof/cmdline", http.NotFound)
}

// setBlockRate sets the block profile rate. The runtime has no way to read
// the previous rate, so it reports 0 (off, the default).
func setBlockRate(rate int) int {
	runtime.SetBlockProfileRate(rate)
	return 0
}

// profilingMu serialises mutex and block profiles, which change a
// process-wide rate.
var profilingMu sync.Mutex

// withProfiling turns on the mutex or block profile only while a profile
// with ?seconds=N is being taken (they cost something when always on), then
// restores the previous rate. setRate returns the previous rate.
func withProfiling(h http.HandlerFunc, setRate func(int) int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("seconds") == "" {
			h(w, r)
			return
		}
		profilingMu.Lock()
		defer profilingMu.Unlock()
		prev := setRate(1)
		defer setRate(prev)
		h(w, r)
	}
}

// Handle mounts h at pattern (http.ServeMux syntax, e.g. "GET /api/v1/records"
// or "/"). Requests are counted under the pattern. It panics if the pattern
// conflicts with one already mounted, like http.ServeMux.Handle.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, promhttp.InstrumentHandlerCounter(
		s.requests.MustCurryWith(prometheus.Labels{"handler": pattern}), h))
}

// AddCheck adds (or replaces) a readiness check. /readyz answers 200 only
// when every check returns nil. A check must be quick and must not block;
// report state that is kept up to date elsewhere (e.g. "connected to the
// broker"), don't probe on each request.
func (s *Server) AddCheck(name string, fn func() error) {
	s.mu.Lock()
	s.checks[name] = fn
	s.mu.Unlock()
}

// RemoveCheck removes a readiness check.
func (s *Server) RemoveCheck(name string) {
	s.mu.Lock()
	delete(s.checks, name)
	s.mu.Unlock()
}

// checkResult is one check in the /readyz body.
type checkResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// readyBody is the /readyz body.
type readyBody struct {
	Status string        `json:"status"`           // "ready" or "not ready"
	Failed []string      `json:"failed,omitempty"` // names of the failing checks
	Checks []checkResult `json:"checks"`
}

func (s *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	names := make([]string, 0, len(s.checks))
	fns := make(map[string]func() error, len(s.checks))
	for n, fn := range s.checks {
		names = append(names, n)
		fns[n] = fn
	}
	s.mu.Unlock()
	slices.Sort(names)

	body := readyBody{Status: "ready", Checks: make([]checkResult, 0, len(names))}
	for _, n := range names {
		err := runCheck(fns[n])
		r := checkResult{Name: n, OK: err == nil}
		if err != nil {
			r.Error = err.Error()
			body.Failed = append(body.Failed, n)
		}
		body.Checks = append(body.Checks, r)
	}
	code := http.StatusOK
	if len(body.Failed) > 0 {
		body.Status = "not ready"
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// runCheck runs fn, turning a panic into an error.
func runCheck(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("check panicked: %v", r)
		}
	}()
	return fn()
}

// Handler returns the server's handler, for tests and for embedding.
func (s *Server) Handler() http.Handler { return s.mux }

// Listen binds the address now, so that a port in use is reported before
// anything else starts. It is optional: Run listens if Listen was not called.
// It returns the bound address (useful with port 0).
func (s *Server) Listen() (net.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr(), nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return nil, fmt.Errorf("listen http: %w", err)
	}
	s.ln = ln
	return ln.Addr(), nil
}

// Addr returns the bound address, or nil before Listen or Run has bound it.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Run serves until ctx is canceled, then shuts down gracefully: it stops
// accepting, waits up to ShutdownTimeout for requests in progress, and
// returns. It returns an error if it cannot listen or serving fails.
func (s *Server) Run(ctx context.Context) error {
	addr, err := s.Listen()
	if err != nil {
		return err
	}
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	s.log.Info("HTTP server listening", "addr", addr.String())

	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	err = s.srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		_ = s.srv.Close()
		return fmt.Errorf("shut down http: %w", err)
	}
	s.log.Info("HTTP server stopped", "addr", addr.String())
	return nil
}

// Loopback reports whether the listen address hostPort binds to a loopback
// address only ("localhost" included; an empty host binds every interface).
func Loopback(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
