// Package api is xrdmon's read-only query API: JSON over HTTP under
// /api/v1, described by openapi.yaml (served at /api/v1/openapi.yaml).
// It reads the store (records by time, server, site, user and path prefix,
// page by page) and the collector's status; `xrdmon records` and the
// dashboard use it.
//
// Every string in a response comes from packets anyone on the network can
// send: the responses are JSON (with <, > and & escaped), never HTML.
package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/monitored"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/rollup"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Prefix is where the API is mounted.
const Prefix = "/api/v1/"

//go:embed openapi.yaml
var openAPI []byte

// Records is what the API reads records and events from (store.Reader).
type Records interface {
	QueryPage(ctx context.Context, q store.Query) ([]record.Record, *store.Position, error)
	QueryEvents(ctx context.Context, q store.EventQuery) ([]record.Event, *store.Position, error)
}

// Options configure an API.
type Options struct {
	// Status returns the collector's status (nil: /status answers 404).
	Status func(ctx context.Context) (any, error)
	// Token, when set, is required as "Authorization: Bearer <token>".
	Token string
	// Now is the clock for relative times ("since=1h"); nil: time.Now.
	Now func() time.Time
	// MaxLimit caps the records of one page (default 1000).
	MaxLimit int
	// Rollups answers /rollups and /top (nil: they answer 404).
	Rollups Rollups
	// History answers /health (nil: it answers 404).
	History *History
	// Servers answers /servers: the servers heard, when last on each
	// stream, and which are silent (monitored.Monitor.Servers; nil: 404).
	Servers func() []monitored.Server
	// MaxPageBytes bounds the stored bytes of the records or events of
	// one /records or /events page (default 8 MiB; their JSON is at most
	// about twice that): a page that reaches it ends early, with its next
	// cursor.
	MaxPageBytes int
	// MaxPoints bounds the points (series × buckets) of one /rollups or
	// /summary answer (default 200,000, about 30 MB of JSON); a query
	// over it is refused before its answer is built.
	MaxPoints int
	// MaxConcurrent bounds the queries served at once (default: the
	// number of CPUs, at least 2). A query waits at most QueueWait
	// (default 2 s) for its turn, then is answered 503 with Retry-After.
	MaxConcurrent int
	QueueWait     time.Duration
	// Timeout bounds the work of one query (default 30 s).
	Timeout time.Duration
	// WriteStall bounds how long one write of an answer may wait for the
	// client to read (default 5 s): a client that stops reading loses its
	// connection then, and its query slot is free again, long before the
	// server's write timeout for the whole answer.
	WriteStall time.Duration
	// ListenHost is the host of the listen address (http.address). With
	// no Token, only requests naming a loopback host, an IP address or
	// ListenHost in their Host header are served (DNS rebinding).
	ListenHost string
}

// Defaults of Options.
const (
	DefaultMaxPageBytes = 8 << 20
	DefaultMaxPoints    = 200_000
	DefaultQueueWait    = 2 * time.Second
	DefaultTimeout      = 30 * time.Second
	DefaultWriteStall   = 5 * time.Second
)

// Rollups is what the API reads rollups from (rollup.Builder).
type Rollups interface {
	Series(ctx context.Context, q rollup.Query) ([]rollup.Series, error)
	Top(ctx context.Context, by []record.Dim, from, to time.Time, m rollup.Measure, n int) ([]rollup.Row, rollup.Agg, error)
}

// API serves /api/v1.
type API struct {
	recs  Records
	opts  Options
	log   *slog.Logger
	mux   *http.ServeMux
	slots chan struct{} // one per query being served
}

// New returns the API over recs.
func New(recs Records, opts Options, log *slog.Logger) *API {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	units.Default(&opts.MaxLimit, 1000)
	units.Default(&opts.MaxPageBytes, DefaultMaxPageBytes)
	units.Default(&opts.MaxPoints, DefaultMaxPoints)
	units.Default(&opts.MaxConcurrent, max(2, runtime.GOMAXPROCS(0)))
	units.Default(&opts.QueueWait, DefaultQueueWait)
	units.Default(&opts.Timeout, DefaultTimeout)
	units.Default(&opts.WriteStall, DefaultWriteStall)
	a := &API{recs: recs, opts: opts, log: log, mux: http.NewServeMux(), slots: make(chan struct{}, opts.MaxConcurrent)}
	a.mux.HandleFunc("GET "+Prefix+"records", a.records)
	a.mux.HandleFunc("GET "+Prefix+"events", a.events)
	a.mux.HandleFunc("GET "+Prefix+"summary", a.summary)
	a.mux.HandleFunc("GET "+Prefix+"status", a.status)
	a.mux.HandleFunc("GET "+Prefix+"health", a.health)
	a.mux.HandleFunc("GET "+Prefix+"rollups", a.rollups)
	a.mux.HandleFunc("GET "+Prefix+"top", a.top)
	a.mux.HandleFunc("GET "+Prefix+"servers", a.servers)
	a.mux.HandleFunc("GET "+Prefix+"activity", a.activity)
	a.mux.HandleFunc("GET "+Prefix+"openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(openAPI)
	})
	a.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: see "+Prefix+"openapi.yaml")
	})
	return a
}

// ServeHTTP checks the Host (without a token) or the token, waits for a
// free slot, then serves the endpoint within the query timeout.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	if a.opts.Token == "" && !LocalHost(r.Host, a.opts.ListenHost) {
		// A page of another origin whose name was rebound to this
		// address must not read the API of a collector without a token.
		writeError(w, http.StatusMisdirectedRequest, "this host name is not served without an API token (http.api_token_file)")
		return
	}
	if a.opts.Token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(a.opts.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="xrdmon"`)
			writeError(w, http.StatusUnauthorized, "a bearer token is required")
			return
		}
	}
	if !a.acquire(r.Context()) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "too many queries at once: retry later")
		return
	}
	defer func() { <-a.slots }()
	ctx, cancel := context.WithTimeout(r.Context(), a.opts.Timeout)
	defer cancel()
	sw := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: a.opts.WriteStall}
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && srv.WriteTimeout > 0 {
		sw.end = time.Now().Add(srv.WriteTimeout) // the server's bound of the whole answer stays
	}
	a.mux.ServeHTTP(sw, r.WithContext(ctx)) // net/http clears the deadline before the connection's next request
}

// stallWriter gives each write of an answer stall to complete (within
// end, the server's bound of the whole answer, if any): the slot of a query whose client stopped
// reading is freed after stall, not after the server's write timeout.
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
	end   time.Time
}

func (s *stallWriter) Write(p []byte) (int, error) {
	d := time.Now().Add(s.stall)
	if !s.end.IsZero() && d.After(s.end) {
		d = s.end
	}
	_ = s.rc.SetWriteDeadline(d) // a writer without deadlines (a test's recorder) writes as before
	return s.ResponseWriter.Write(p)
}

// Unwrap gives http.ResponseController the connection's writer.
func (s *stallWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// acquire takes a query slot, waiting at most QueueWait.
func (a *API) acquire(ctx context.Context) bool {
	select {
	case a.slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(a.opts.QueueWait)
	defer t.Stop()
	select {
	case a.slots <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// LocalHost reports whether the Host header host (host or host:port) may
// be served without a token: "localhost" (and names under .localhost), an
// IP address literal (no name, so no DNS rebinding), or listenHost, the
// host of the listen address. Anything else is a name that may have been
// rebound to this address by the page of another origin.
func LocalHost(host, listenHost string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	switch {
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return true
	case listenHost != "" && strings.EqualFold(host, strings.Trim(listenHost, "[]")):
		return true
	}
	_, err := netip.ParseAddr(host)
	return err == nil
}

// ReadToken returns the token in path (surrounding white space removed).
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("api token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("api token %s: empty file", path)
	}
	return tok, nil
}

// RecordPage is the answer of /records.
type RecordPage struct {
	Records []json.RawMessage `json:"records"`
	// Next is the cursor of the next page; absent on the last one.
	Next string `json:"next,omitempty"`
	// Total is, with count=true on the first page, the number of records
	// the query matches (TotalComplete false: more than Total, the bound).
	Total         int  `json:"total,omitempty"`
	TotalComplete bool `json:"total_complete,omitempty"`
}

func (a *API) records(w http.ResponseWriter, r *http.Request) {
	q, err := a.recordQuery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	recs, next, err := a.recs.QueryPage(r.Context(), q)
	if err != nil {
		a.queryFailed(w, "Record query failed", err)
		return
	}
	var extra []byte // the count asked for, after the list
	if r.URL.Query().Get("count") == "true" && q.After == nil {
		total, complete, err := a.countRecords(r, q, len(recs), next)
		if err != nil {
			a.queryFailed(w, "Record count failed", err)
			return
		}
		extra = fmt.Appendf(nil, `,"total":%d`, total)
		if complete {
			extra = append(extra, `,"total_complete":true`...)
		}
	}
	writeList(w, "records", len(recs), func(dst []byte, i int) []byte { return record.AppendJSON(dst, &recs[i]) }, next, extra)
}

// maxCount bounds the records /records?count=true counts.
const maxCount = 1_000_000

// countRecords counts the records q matches, the first page (n records,
// then next) already read; at most maxCount.
func (a *API) countRecords(r *http.Request, q store.Query, n int, next *store.Position) (int, bool, error) {
	q.Limit = a.opts.MaxLimit
	for next != nil {
		if n >= maxCount {
			return n, false, nil
		}
		q.After = next
		recs, nx, err := a.recs.QueryPage(r.Context(), q)
		if err != nil {
			return n, false, err
		}
		n += len(recs)
		next = nx
	}
	return n, true, nil
}

// recordQuery reads the parameters of /records (documented in
// openapi.yaml).
func (a *API) recordQuery(r *http.Request) (store.Query, error) {
	v := r.URL.Query()
	q := store.Query{
		Server: v.Get("server"), Site: v.Get("site"), User: v.Get("user"),
		PathPrefix: v.Get("path_prefix"), Reason: record.Reason(v.Get("reason")),
		MaxBytes: a.opts.MaxPageBytes,
	}
	var err error
	now := a.opts.Now()
	if q.From, err = ParseTime(v.Get("from"), now); err != nil {
		return q, fmt.Errorf("from: %w", err)
	}
	if q.To, err = ParseTime(v.Get("to"), now); err != nil {
		return q, fmt.Errorf("to: %w", err)
	}
	if q.Partial, err = boolParam(v.Get("partial")); err != nil {
		return q, fmt.Errorf("partial: %w", err)
	}
	if q.Newest, q.Limit, q.After, err = a.paging(v); err != nil {
		return q, err
	}
	if q.Reason != record.Complete && !validReason(q.Reason) {
		return q, fmt.Errorf("reason: %q is not a partial reason", q.Reason)
	}
	return q, nil
}

// EventPage is the answer of /events.
type EventPage struct {
	Events []json.RawMessage `json:"events"`
	// Next is the cursor of the next page; absent on the last one.
	Next string `json:"next,omitempty"`
}

func (a *API) events(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := store.EventQuery{Server: v.Get("server"), Site: v.Get("site"), MaxBytes: a.opts.MaxPageBytes}
	var err error
	bad := func(err error) { writeError(w, http.StatusBadRequest, err.Error()) }
	now := a.opts.Now()
	if q.From, err = ParseTime(v.Get("from"), now); err != nil {
		bad(fmt.Errorf("from: %w", err))
		return
	}
	if q.To, err = ParseTime(v.Get("to"), now); err != nil {
		bad(fmt.Errorf("to: %w", err))
		return
	}
	for t := range strings.SplitSeq(v.Get("type"), ",") {
		if t != "" {
			q.Types = append(q.Types, record.EventType(t))
		}
	}
	if q.Newest, q.Limit, q.After, err = a.paging(v); err != nil {
		bad(err)
		return
	}
	evs, next, err := a.recs.QueryEvents(r.Context(), q)
	if err != nil {
		a.queryFailed(w, "Event query failed", err)
		return
	}
	writeList(w, "events", len(evs), func(dst []byte, i int) []byte { return record.AppendEventJSON(dst, &evs[i]) }, next, nil)
}

// paging reads the order, limit and cursor parameters of a listing.
func (a *API) paging(v url.Values) (newest bool, limit int, after *store.Position, err error) {
	switch order := v.Get("order"); order {
	case "", "newest":
		newest = true
	case "oldest":
	default:
		return newest, 0, nil, fmt.Errorf("order: %q is not newest or oldest", order)
	}
	limit = 100
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return newest, 0, nil, fmt.Errorf("limit: %q is not a positive number", s)
		}
		limit = min(n, a.opts.MaxLimit)
	}
	if c := v.Get("cursor"); c != "" {
		p, err := decodeCursor(c)
		if err != nil {
			return newest, limit, nil, err
		}
		after = &p
	}
	return newest, limit, after, nil
}

func validReason(r record.Reason) bool {
	for _, x := range record.Reasons {
		if x == r {
			return true
		}
	}
	return false
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	if a.opts.Status == nil {
		writeError(w, http.StatusNotFound, "no collector status here")
		return
	}
	st, err := a.opts.Status(r.Context())
	if err != nil {
		a.log.Warn("Status failed", "err", err)
		writeError(w, http.StatusInternalServerError, "status failed")
		return
	}
	a.writeJSON(w, http.StatusOK, st)
}

// Span is the time range an answer covers (the query's from and to), in
// UTC. The answers embed it, so its members are theirs in JSON.
type Span struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// spanOf returns the span from..to in UTC.
func spanOf(from, to time.Time) Span { return Span{from.UTC(), to.UTC()} }

// ParseTime reads a time parameter: RFC 3339, Unix seconds, or a duration
// before now ("90m", "24h", "7d"). Empty is the zero time (no bound).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0).UTC(), nil
	}
	d, err := parseAgo(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not RFC 3339, Unix seconds or a duration such as 24h or 7d", s)
	}
	return now.Add(-d), nil
}

// parseAgo reads a duration, allowing days ("7d", "1d12h").
func parseAgo(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return 0, errors.New("bad days")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	if days, rest, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, errors.New("bad days")
		}
		d, err := time.ParseDuration(rest)
		if err != nil {
			return 0, err
		}
		return time.Duration(n)*24*time.Hour + d, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, errors.New("bad duration")
	}
	return d, nil
}

func boolParam(s string) (bool, error) {
	if s == "" {
		return false, nil
	}
	return strconv.ParseBool(s)
}

func encodeCursor(p store.Position) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.T, 10) + "." + strconv.FormatInt(p.Seq, 10)))
}

func decodeCursor(c string) (store.Position, error) {
	bad := errors.New("cursor: not a cursor of this API (use the next of the previous page)")
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return store.Position{}, bad
	}
	ts, seqs, ok := strings.Cut(string(b), ".")
	if !ok {
		return store.Position{}, bad
	}
	t, err1 := strconv.ParseInt(ts, 10, 64)
	seq, err2 := strconv.ParseInt(seqs, 10, 64)
	if err1 != nil || err2 != nil {
		return store.Position{}, bad
	}
	return store.Position{T: t, Seq: seq}, nil
}

// Error is the body of every error answer.
type Error struct {
	Error string `json:"error"`
}

// queryFailed answers 500 "query failed" for a query of the store that
// failed, and logs err at Warn with msg.
func (a *API) queryFailed(w http.ResponseWriter, msg string, err error) {
	a.log.Warn(msg, "err", err)
	writeError(w, http.StatusInternalServerError, "query failed")
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(Error{msg})
}

// writeJSON answers v as JSON (with <, > and & escaped: safe even if
// sniffed as HTML). A value that does not encode (a number JSON cannot
// hold) is a logged 500, never a 200 with an empty body.
func (a *API) writeJSON(w http.ResponseWriter, code int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		a.log.Error("Cannot encode an API answer", "err", err)
		writeError(w, http.StatusInternalServerError, "the answer could not be encoded")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// writeList streams {"<field>":[entry 0, …],"next":"<cursor>"}, writing as
// it goes rather than building the whole answer; entry appends the JSON of
// the i-th entry to dst. Every entry is HTML-escaped as writeJSON does.
func writeList(w http.ResponseWriter, field string, n int, entry func(dst []byte, i int) []byte, next *store.Position, extra []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	var out bytes.Buffer
	out.WriteString(`{"` + field + `":[`)
	var e []byte
	for i := range n {
		if i > 0 {
			out.WriteByte(',')
		}
		e = entry(e[:0], i)
		json.HTMLEscape(&out, e)
		if out.Len() >= 64<<10 {
			if _, err := w.Write(out.Bytes()); err != nil {
				return // the client went away
			}
			out.Reset()
		}
	}
	out.WriteByte(']')
	if next != nil {
		out.WriteString(`,"next":"` + encodeCursor(*next) + `"`)
	}
	out.Write(extra)
	out.WriteString("}\n")
	_, _ = w.Write(out.Bytes())
}
