package loadgen

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

func TestHooks(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 2 * time.Minute
	cfg.Rate = 0
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		ids     []uint32
		reasons []record.Reason
		sent    []int
	)
	g.SetHooks(Hooks{
		Record: func(i int, rec *record.Record) {
			if i != len(ids) {
				t.Errorf("record hook index %d, want %d", i, len(ids))
			}
			ids = append(ids, rec.FileID)
			reasons = append(reasons, rec.Reason)
		},
		Sent: func(n int, _ time.Time) {
			mu.Lock()
			sent = append(sent, n)
			mu.Unlock()
		},
	})
	var mem Memory
	truth, err := g.Run(context.Background(), &mem)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) == 0 || len(ids) != len(truth.Records) {
		t.Fatalf("record hook saw %d records, truth has %d", len(ids), len(truth.Records))
	}
	for i, r := range truth.Records {
		if r.FileID != ids[i] || r.Reason != reasons[i] {
			t.Fatalf("record %d: hook saw file %d %q, truth has %d %q", i, ids[i], reasons[i], r.FileID, r.Reason)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) == 0 || sent[len(sent)-1] != len(ids) {
		t.Fatalf("sent hook: %v, want the last to be %d", sent, len(ids))
	}
	for i := 1; i < len(sent); i++ {
		if sent[i] < sent[i-1] {
			t.Fatalf("sent hook counts decrease: %v", sent)
		}
	}

	// Without KeepRecords the hook still sees every record.
	cfg.KeepRecords = false
	g2, _ := New(cfg)
	n := 0
	g2.SetHooks(Hooks{Record: func(int, *record.Record) { n++ }})
	t2, err := g2.Run(context.Background(), &Discard{})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(ids) || len(t2.Records) != 0 {
		t.Fatalf("without KeepRecords: hook saw %d (want %d), truth kept %d", n, len(ids), len(t2.Records))
	}
}
