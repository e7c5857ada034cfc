package store

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/record"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testRecord returns a realistic record number i; its End is t0 + i s.
func testRecord(i int) record.Record {
	return record.Record{
		RecordID:   fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15),
		Start:      t0.Add(time.Duration(i)*time.Second - 90*time.Second),
		End:        t0.Add(time.Duration(i) * time.Second),
		Received:   t0.Add(time.Duration(i)*time.Second + 2*time.Second),
		ServerIP:   fmt.Sprintf("192.0.2.%d", i%8),
		ServerHost: fmt.Sprintf("xrootd%d.example.org", i%8),
		ServerID:   uint64(0xabcdef000000 + i%8),
		ServerStod: 1767225600,
		Site:       []string{"T2_US_Nebraska", "T2_US_UCSD", "T1_US_FNAL"}[i%3],
		Program:    "xrootd",
		Version:    "v5.8.4",
		Protocol:   "xroot",
		User:       fmt.Sprintf("user%d", i%50),
		UserDictID: uint32(i),
		ClientHost: "[::ffff:198.51.100.7]",
		ClientName: "worker-17.example.edu",
		DN:         "/DC=org/DC=example/OU=People/CN=Some User 12345",
		VO:         "cms",
		AppInfo:    "crab:250301_120000:someuser_task",
		FileID:     uint32(i),
		Path:       fmt.Sprintf("/store/data/Run2026A/MinimumBias/AOD/v1/%06d/file%d.root", i%97, i),
		FileSize:   2_000_000_000 + int64(i),
		ReadBytes:  int64(i) * 1000,
		ReadvBytes: 12345,
		HasOps:     true,
		ReadOps:    42,
		ReadvOps:   7,
		ReadvSegs:  120,
		ReadMin:    1024,
		ReadMax:    1 << 20,
	}
}

func testEvent(i int) record.Event {
	return record.Event{
		EventID:    fmt.Sprintf("e%031x", i),
		Type:       record.EventCacheFileClose,
		Provider:   "C",
		Time:       t0.Add(time.Duration(i) * time.Second),
		Received:   t0.Add(time.Duration(i)*time.Second + time.Second),
		ServerIP:   "192.0.2.1",
		ServerHost: "cache.example.org",
		Site:       "T2_US_UCSD",
		Data:       json.RawMessage(fmt.Sprintf(`{"lfn":"/store/f%d","size":1000}`, i)),
		Valid:      true,
	}
}

func testRecords(from, n int) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		out[i] = testRecord(from + i)
	}
	return out
}

// openTest opens a store in a fresh temp dir with its own registry.
func openTest(tb testing.TB, mod func(*Options)) (*Store, *prometheus.Registry) {
	tb.Helper()
	o := DefaultOptions()
	o.Path = filepath.Join(tb.TempDir(), "store.db")
	o.Retention = 0
	o.MaxBytes = 0
	if mod != nil {
		mod(&o)
	}
	reg := prometheus.NewRegistry()
	s, err := Open(o, nil, reg)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s, reg
}

// reopen closes s and opens its database again with the same options and
// metrics registry, as a restart would.
func reopen(tb testing.TB, s *Store) *Store {
	tb.Helper()
	o, reg := s.opts, s.m.reg
	if err := s.Close(); err != nil {
		tb.Fatalf("close: %v", err)
	}
	s, err := Open(o, nil, reg)
	if err != nil {
		tb.Fatalf("reopen: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}
