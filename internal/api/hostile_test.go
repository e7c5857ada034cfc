package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/rollup"
	"github.com/xrdmon/xrdmon/internal/store"
)

// fakeRecords answers every event query with evs (one page); a query of
// more than one event blocks while block is open.
type fakeRecords struct {
	evs   []record.Event
	block chan struct{}
}

func (f *fakeRecords) QueryPage(context.Context, store.Query) ([]record.Record, *store.Position, error) {
	return nil, nil, nil
}

func (f *fakeRecords) QueryEvents(ctx context.Context, q store.EventQuery) ([]record.Event, *store.Position, error) {
	if f.block != nil && q.Limit > 1 {
		select {
		case <-f.block:
		case <-ctx.Done():
		}
	}
	return f.evs, nil, nil
}

func summaryEvent(tod int64, v float64) record.Event {
	d, _ := json.Marshal(record.SummaryReport{Format: "xml", Src: "xrd.example.org:1094", Tod: tod, Tos: 1, Pid: 1, Pgm: "xrootd",
		Values: map[string]float64{"link.out": v, "link.num": v}})
	return record.Event{EventID: fmt.Sprint(tod), Type: record.EventSummary, Time: time.Unix(tod, 0), ServerIP: "192.0.2.1", Data: d, Valid: true}
}

// Two summaries whose counter goes from -1.7e308 to +1.7e308 make an
// increase JSON cannot hold: the answer leaves it out and still answers
// (issue 25: a 200 with an empty body, "no data" for every server).
func TestSummaryNonFinite(t *testing.T) {
	now := t0.Add(time.Hour)
	f := &fakeRecords{evs: []record.Event{summaryEvent(now.Unix()-120, -1.7e308), summaryEvent(now.Unix()-60, 1.7e308)}}
	srv := httptest.NewServer(New(f, Options{Now: func() time.Time { return now }}, nil))
	defer srv.Close()
	code, body := get(t, srv, "/api/v1/summary?from=1h&name=link.out,link.num")
	var ans SummaryAnswer
	if code != 200 || json.Unmarshal(body, &ans) != nil || len(ans.Servers) != 1 || len(ans.Servers[0].Series) != 2 {
		t.Fatalf("%d %s", code, body)
	}
	if pts := ans.Servers[0].Series[1].Points; len(pts) != 2 || *pts[1].Max != 1.7e308 {
		t.Errorf("the gauge: %s", body)
	}
}

// An answer that cannot be encoded is a 500, not a 200 with no body.
func TestWriteJSONFailure(t *testing.T) {
	a := New(&fakeRecords{}, Options{}, nil)
	rec := httptest.NewRecorder()
	a.writeJSON(rec, http.StatusOK, map[string]float64{"x": math.Inf(1)})
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "could not be encoded") {
		t.Errorf("%d %q", rec.Code, rec.Body)
	}
}

// Without a token only loopback names, IP addresses and the listen host
// are served: a page whose name was rebound to 127.0.0.1 cannot read the
// API (issue 25, DNS rebinding). With a token the token decides.
func TestHostWithoutToken(t *testing.T) {
	srv, _ := serve(t, 3, Options{ListenHost: "collector.example.org"})
	for host, want := range map[string]int{
		"attacker.example:9939": http.StatusMisdirectedRequest, "attacker.example": http.StatusMisdirectedRequest,
		"localhost:9939": 200, "127.0.0.1:9939": 200, "[::1]:9939": 200, "127.0.0.2": 200, "Collector.Example.org:9939": 200,
		"localhost.attacker.example": http.StatusMisdirectedRequest,
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/api/v1/records?limit=1", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
	tok, _ := serve(t, 3, Options{Token: "s3cret"})
	req, _ := http.NewRequest("GET", tok.URL+"/api/v1/records?limit=1", nil)
	req.Host = "attacker.example"
	req.Header.Set("Authorization", "Bearer s3cret")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("with the token: %v %v", resp, err)
	}
}

// Queries beyond MaxConcurrent wait QueueWait, then are answered 503 with
// Retry-After (issue 25: six heavy queries at once pinned every core).
func TestConcurrentQueries(t *testing.T) {
	f := &fakeRecords{block: make(chan struct{})}
	srv := httptest.NewServer(New(f, Options{MaxConcurrent: 1, QueueWait: time.Millisecond}, nil))
	defer srv.Close()
	done := make(chan int)
	go func() {
		resp, err := http.Get(srv.URL + "/api/v1/events")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	// Until the first query holds the slot, a second one may get it.
	var resp *http.Response
	for {
		var err error
		if resp, err = http.Get(srv.URL + "/api/v1/events?limit=1"); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second query: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(f.block)
	if code := <-done; code != 200 {
		t.Errorf("first query: %d", code)
	}
}

// fakeRollups answers n series of points each.
type fakeRollups struct{ n, points int }

func (f fakeRollups) Series(_ context.Context, q rollup.Query) ([]rollup.Series, error) {
	out := make([]rollup.Series, f.n)
	for i := range out {
		out[i].Keys = []string{fmt.Sprintf("user%d<&>", i)}
		for j := range f.points {
			out[i].Points = append(out[i].Points, rollup.Point{Time: q.From.Add(time.Duration(j) * time.Minute)})
		}
	}
	return out, nil
}

func (fakeRollups) Top(context.Context, []record.Dim, time.Time, time.Time, rollup.Measure, int) ([]rollup.Row, rollup.Agg, error) {
	return nil, rollup.Agg{}, nil
}

// A /rollups answer of more series × points than MaxPoints is refused
// before it is built (issue 25: 20.7 MB answers held by clients that never
// read); a smaller one is streamed whole, escaped.
func TestRollupPointsBound(t *testing.T) {
	for _, c := range []struct {
		n, points int
		query     string
		want      int
	}{{100, 720, "", http.StatusBadRequest}, {100, 720, "&limit=10", 200}, {3, 5, "", 200}} {
		srv := httptest.NewServer(New(&fakeRecords{}, Options{Rollups: fakeRollups{c.n, c.points}, MaxPoints: 10_000}, nil))
		code, body := get(t, srv, "/api/v1/rollups?by=user&from=12h&step=1m"+c.query)
		srv.Close()
		if code != c.want {
			t.Errorf("%d series of %d points%s: %d, want %d: %.200s", c.n, c.points, c.query, code, c.want, body)
			continue
		}
		var ans SeriesAnswer
		if code == 200 {
			if err := json.Unmarshal(body, &ans); err != nil || len(ans.Series) != min(c.n, 10) || len(ans.Series[0].Points) != c.points || ans.Step != "1m" {
				t.Errorf("answer: %v %.300s", err, body)
			}
			if strings.Contains(string(body), "<&>") {
				t.Errorf("keys not escaped: %.300s", body)
			}
		}
	}
}

// A page of large events ends at MaxPageBytes with a cursor to go on.
func TestPageBytes(t *testing.T) {
	srv, _ := serve(t, 300, Options{MaxPageBytes: 2000})
	code, body := get(t, srv, "/api/v1/events?limit=1000")
	var page struct {
		Events []json.RawMessage `json:"events"`
		Next   string            `json:"next"`
	}
	if code != 200 || json.Unmarshal(body, &page) != nil || len(page.Events) == 0 || len(page.Events) > 30 || page.Next == "" {
		t.Errorf("%d: %d events, next %q", code, len(page.Events), page.Next)
	}
}

// TestStalledReaderFreesSlot: a client that asks for a large answer and
// never reads it holds its query slot only until one write has waited
// WriteStall, not for the server's write timeout: with one slot, the next
// query is served soon after, where it was answered 503 for as long as the
// stalled client kept its connection.
func TestStalledReaderFreesSlot(t *testing.T) {
	srv := httptest.NewServer(New(&fakeRecords{}, Options{Rollups: fakeRollups{100, 1999}, MaxConcurrent: 1,
		QueueWait: time.Millisecond, WriteStall: 300 * time.Millisecond}, nil))
	defer srv.Close()
	// About 30 MB of answer, far more than the sockets buffer.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET /api/v1/rollups?by=user&from=34h&step=1m HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The stalled query takes the slot (others get 503: on a busy machine
	// the first queries may come before it does), holds it while its
	// writes wait, then loses its connection and the slot is free.
	poll := func(want int, within time.Duration) time.Duration {
		start := time.Now()
		for {
			code, _ := get(t, srv, "/api/v1/events?limit=1")
			if code == want {
				return time.Since(start)
			}
			if code != http.StatusOK && code != http.StatusServiceUnavailable {
				t.Fatalf("query: %d", code)
			}
			if time.Since(start) > within {
				t.Fatalf("no answer %d in %s", want, within)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	poll(http.StatusServiceUnavailable, 10*time.Second)
	if d := poll(http.StatusOK, 20*time.Second); d > 10*time.Second {
		t.Errorf("the slot of a client that never reads was freed after %s (write stall 300 ms)", d)
	}
	// The stalled client's connection was cut, not its answer completed.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _ := io.Copy(io.Discard, conn)
	if n >= 25<<20 {
		t.Errorf("the stalled client got the whole answer (%d bytes): its writes were not bounded", n)
	}
}
