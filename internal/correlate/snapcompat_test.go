package correlate_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/loadgen"
)

// compatShard is a shard fed a fixed loadgen workload (sessions with
// logins and tokens, open and waiting files, pending references), with
// arrival times at 150,000 packets/s as `xrdmon bench` makes them.
func compatShard(t *testing.T) *correlate.Shard {
	t.Helper()
	cfg := loadgen.DefaultConfig()
	cfg.Count, cfg.Duration, cfg.Seed, cfg.KeepRecords = 5_000, 0, 7, false
	mem, _, err := loadgen.InMemory(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := correlate.NewShard(correlate.DefaultConfig())
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out correlate.Output
	for i := range mem.Packets {
		p := &mem.Packets[i]
		s.Handle(p.Data, p.Sender, t0.Add(time.Duration(i)*time.Second/150_000))
	}
	s.Drain(&out)
	return s
}

// TestSnapshotEarlierVersion: a checkpoint written by the previous format
// (version 5, testdata/snapshot-v5.bin: the userid index as a sorted list
// of texts) restores to the state it was taken of: the restored shard
// snapshots to the same bytes as the shard that was checkpointed.
// XRDMON_WRITE_SNAPSHOT=FILE writes this build's checkpoint of that shard
// (how the file was made, with the build before version 6).
func TestSnapshotEarlierVersion(t *testing.T) {
	s := compatShard(t)
	var want bytes.Buffer
	if err := s.Snapshot(&want); err != nil {
		t.Fatal(err)
	}
	if f := os.Getenv("XRDMON_WRITE_SNAPSHOT"); f != "" {
		if err := os.WriteFile(f, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	old, err := os.ReadFile(filepath.Join("testdata", "snapshot-v5.bin"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := correlate.RestoreShard(correlate.DefaultConfig(), bytes.NewReader(old))
	if err != nil {
		t.Fatalf("restore version 5: %v", err)
	}
	var got bytes.Buffer
	if err := r.Snapshot(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("a version 5 checkpoint restores to another state: %d bytes, want %d", got.Len(), want.Len())
	}
	if st := r.Stats(); st.Sessions == 0 || st.OpenFiles == 0 {
		t.Fatalf("restored shard: %d sessions, %d open files", st.Sessions, st.OpenFiles)
	}
	t.Logf("version 5: %d bytes; version 6: %d bytes", len(old), want.Len())
}
