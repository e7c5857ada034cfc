package postgres

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// testURL returns the database URL, skipping (or failing under CI=true)
// when PostgreSQL does not answer.
func testURL(tb testing.TB) string { return testenv.PostgresURL(tb) }

// withAddr returns u pointing at addr instead.
func withAddr(tb testing.TB, u, addr string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		tb.Fatal(err)
	}
	h, p, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("postgres://%s@%s:%s/%s?sslmode=disable", cfg.User, h, p, cfg.Database)
}

func dbAddr(tb testing.TB, u string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		tb.Fatal(err)
	}
	return net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
}

// testRecord is record i, a CMS read with readv operations and app info;
// its End is sinktest.T0 + i minutes, so records spread over days.
func testRecord(i int) record.Record {
	r := sinktest.Record(i, time.Minute)
	r.AppInfo = "crab:250301_120000:someuser_task"
	r.ReadvBytes, r.ReadvOps, r.ReadvSegs = 12345, 7, 120
	return r
}

func testRecords(from, n int) []record.Record { return sinktest.Records(from, n, testRecord) }

// fastOptions make retries quick for tests.
func fastOptions(schema string) Options {
	o := DefaultOptions()
	o.Name = "pg-" + schema
	o.Schema = schema
	o.PollInterval = 10 * time.Millisecond
	o.MinBackoff = 20 * time.Millisecond
	o.MaxBackoff = 200 * time.Millisecond
	o.ConnectTimeout = 2 * time.Second
	return o
}

func newSink(tb testing.TB, u string, opts Options, st *store.Store) *Sink {
	tb.Helper()
	s, err := NewWithOptions(Config{Enabled: true, URL: u}, opts, st, sinktest.Discard(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
