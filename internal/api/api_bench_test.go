package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/rollup"
	"github.com/xrdmon/xrdmon/internal/store"
)

// BenchmarkQueries answers the questions of issue #13 over HTTP from a
// store of XRDMON_BENCH_RECORDS records (default 1,000,000; the targets
// are stated for 10,000,000) spread over 30 days: 2,000 users, 40 sites,
// 8 VOs, 200 servers, 20,000 directories. The store and its rollups are
// built once, in XRDMON_BENCH_DIR when set (kept for the next run),
// else in a temporary directory. Each sub-benchmark reports ms per answer.
//
//	XRDMON_BENCH_RECORDS=10000000 XRDMON_BENCH_DIR=/tmp/q10m \
//	  go test ./internal/api -run '^$' -bench Queries -benchtime 20x
func BenchmarkQueries(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("XRDMON_BENCH_RECORDS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	dir := os.Getenv("XRDMON_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	st, rb := benchStore(b, filepath.Join(dir, fmt.Sprintf("q%d.db", n)), n)
	end := benchT0.Add(30 * 24 * time.Hour)
	srv := httptest.NewServer(New(st, Options{Rollups: rb, Now: func() time.Time { return end }}, nil))
	defer srv.Close()
	for _, q := range []struct{ name, path string }{
		{"top-users-30d", "/api/v1/top?by=user&from=30d&n=10"},
		{"top-site-vo-30d", "/api/v1/top?by=site,vo&from=30d&n=10"},
		{"top-servers-7d", "/api/v1/top?by=server&from=7d&n=10"},
		{"series-vo-1h-30d", "/api/v1/rollups?by=vo&from=30d&step=1h"},
		{"records-user-30d", "/api/v1/records?user=user1234&from=30d&limit=100"},
		{"records-path-30d", "/api/v1/records?path_prefix=/store/vo3/dir1234/&from=30d&limit=100"},
		{"records-user-1d", "/api/v1/records?user=user77&from=1d&limit=100"},
	} {
		b.Run(q.name, func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				resp, err := http.Get(srv.URL + q.path)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %s", q.path, resp.Status)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/answer")
		})
	}
}

var benchT0 = time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)

// benchStore opens the store at path, filling it first with n records and
// their rollups when it does not exist.
func benchStore(b *testing.B, path string, n int) (*store.Store, *rollup.Builder) {
	b.Helper()
	_, statErr := os.Stat(path)
	o := store.DefaultOptions()
	o.Path = path
	o.Retention, o.MaxBytes = 0, 0
	o.Synchronous = store.SyncNormal
	st, err := store.Open(o, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	ctx := context.Background()
	cfg := rollup.DefaultConfig()
	cfg.RetentionMinute = 0 // the data is months old by the wall clock; keep it all
	rb, err := rollup.New(cfg, st, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := rb.Restore(ctx); err != nil {
		b.Fatal(err)
	}
	if statErr == nil {
		return st, rb
	}
	start := time.Now()
	span := 30 * 24 * time.Hour
	batch := make([]record.Record, 0, 5000)
	for i := range n {
		end := benchT0.Add(time.Duration(int64(span) / int64(n) * int64(i)))
		u, dir := (i*7919)%2000, (i*104729)%20000
		vo := dir % 8
		batch = append(batch, record.Record{
			RecordID: fmt.Sprintf("%032x", i+1), Start: end.Add(-time.Duration(30+i%600) * time.Second), End: end, Received: end,
			ServerIP: fmt.Sprintf("10.0.%d.%d", i%200/100, i%200), ServerHost: fmt.Sprintf("xrd%03d.site%02d.example.org", i%200, i%200%40),
			Site: fmt.Sprintf("SITE_%02d", i%200%40), User: fmt.Sprintf("user%d", u), VO: fmt.Sprintf("vo%d", vo), Protocol: "xroot",
			ClientHost: fmt.Sprintf("wn%d.example.edu", i%5000), Path: fmt.Sprintf("/store/vo%d/dir%d/file%d.root", vo, dir, i),
			ReadBytes: int64(1+i%977) << 20, WriteBytes: int64(i%3) << 20,
		})
		if len(batch) == cap(batch) || i == n-1 {
			if err := st.Append(ctx, batch, nil); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
		if i%1_000_000 == 999_999 {
			if err := rb.CatchUp(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := rb.CatchUp(ctx); err != nil {
		b.Fatal(err)
	}
	if err := st.PostNow(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("built a store of %d records and its rollups in %s", n, time.Since(start).Round(time.Second))
	return st, rb
}
