package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// TestOutputsCommand: `xrdmon outputs` lists the cursors beside a running
// writer, with how far behind each is; --forget refuses while a collector
// holds the store, then removes a removed output's cursor, and never the
// rollups'.
func TestOutputsCommand(t *testing.T) {
	dir := t.TempDir()
	o := store.DefaultOptions()
	o.Path = filepath.Join(dir, store.DBFile)
	st, err := store.Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var recs []record.Record
	for i := range 10 {
		recs = append(recs, record.Record{RecordID: fmt.Sprint(i), End: time.Unix(1700000000+int64(i), 0), ServerIP: "192.0.2.1"})
	}
	if err := st.Append(ctx, recs, nil); err != nil {
		t.Fatal(err)
	}
	for name, seq := range map[string]int64{"postgres": 10, "old-output": 3} {
		if err := st.SetCursor(ctx, name, seq); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := runOutputs(ctx, []string{"--store.path", dir}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], `"old-output"`) || strings.Fields(lines[1])[2] != "7" ||
		!strings.HasPrefix(lines[2], `"postgres"`) || strings.Fields(lines[2])[2] != "0" {
		t.Fatalf("listing:\n%s", out.String())
	}
	err = runOutputs(ctx, []string{"--store.path", dir, "--forget", "old-output"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "stop the collector first") {
		t.Fatalf("forget beside a running collector: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{store.RollupCursor, "never-there"} {
		if err := runOutputs(ctx, []string{"--store.path", dir, "--forget", bad}, io.Discard, io.Discard); err == nil {
			t.Errorf("forget %q: no error", bad)
		}
	}
	out.Reset()
	if err := runOutputs(ctx, []string{"--store.path", dir, "--forget", "old-output"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := runOutputs(ctx, []string{"--store.path", dir}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "old-output") || !strings.Contains(out.String(), "postgres") {
		t.Fatalf("after forgetting:\n%s", out.String())
	}
}
