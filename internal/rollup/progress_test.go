package rollup

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// TestProgressEntries: a progress snapshot appended as the store's
// progress entry reaches the rollups both fed live (store.Entry.Progress,
// no decoding) and read from the log; both builders sum the same.
func TestProgressEntries(t *testing.T) {
	ctx := context.Background()
	o := store.DefaultOptions()
	o.Path = filepath.Join(t.TempDir(), "xrdmon.db")
	o.Retention = 0
	st, err := store.Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := DefaultConfig()
	cfg.RetentionMinute, cfg.RetentionHour = 0, 0
	live := newBuilder(t, st, cfg)
	st.Listen(live.Feed)

	t0 := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	snap := func(file uint32, end time.Duration, read int64) record.Record {
		return record.Record{
			Start: t0, End: t0.Add(end), Received: t0.Add(end + time.Second),
			ServerIP: "192.0.2.1", ServerHost: "xrd.example.org", ServerID: 0xabc, ServerStod: 1767225600,
			Site: "SITE", Protocol: "xroot", User: "alice", VO: "cms", FileID: file,
			Path: "/store/data/a.root", ReadBytes: read,
		}
	}
	// Fed live: the snapshot is summed from the listener's entry.
	if err := st.AppendWithProgress(ctx, nil, nil, []record.Record{snap(1, 90*time.Second, 1000)}); err != nil {
		t.Fatal(err)
	}
	live.drainFeed()
	if live.cursor != 1 || testutil.ToFloat64(live.m.progress) != 1 {
		t.Fatalf("after the live feed: cursor %d, %v progress summed; want 1, 1", live.cursor, testutil.ToFloat64(live.m.progress))
	}
	// Another access, then a newer snapshot of the first, both fed.
	if err := st.AppendWithProgress(ctx, nil, nil, []record.Record{snap(2, 100*time.Second, 500)}); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendWithProgress(ctx, nil, nil, []record.Record{snap(1, 150*time.Second, 1700)}); err != nil {
		t.Fatal(err)
	}
	live.drainFeed()
	if live.cursor != 3 {
		t.Fatalf("after three fed snapshots: cursor %d, want 3", live.cursor)
	}
	if err := live.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	ref := newBuilder(t, &memRollups{Store: st}, cfg)
	if err := ref.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	for _, b := range []*Builder{live, ref} {
		_, tot, err := b.Top(ctx, []record.Dim{record.DimUser}, forever[0], forever[1], ByBytes, 0)
		if err != nil {
			t.Fatal(err)
		}
		if tot.ReadBytes != 1700+500 || testutil.ToFloat64(b.m.progress) != 3 {
			t.Errorf("read %d, %v progress summed; want %d, 3", tot.ReadBytes, testutil.ToFloat64(b.m.progress), 1700+500)
		}
	}
	sameSeries(t, ref, live, "progress entries")
	// The bytes count in the minutes of their updates.
	ss, err := ref.Series(ctx, Query{From: forever[0], To: forever[1], Step: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := map[time.Time]int64{}
	for _, s := range ss {
		for _, p := range s.Points {
			got[p.Time.UTC()] += p.ReadBytes
		}
	}
	if got[t0.Add(time.Minute)] != 1500 || got[t0.Add(2*time.Minute)] != 700 {
		t.Errorf("read by minute %v, want 1500 at 01:01 and 700 at 01:02", got)
	}
}
