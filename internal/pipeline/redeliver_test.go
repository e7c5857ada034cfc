package pipeline_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/pipeline"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/store"
)

// memStore keeps what a pipeline appends and checkpoints, as the store
// does across a restart.
type memStore struct {
	mu     sync.Mutex
	recs   []record.Record
	states map[string][]byte
}

func (m *memStore) AppendWithProgress(_ context.Context, recs []record.Record, _ []record.Event, _ []record.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, recs...)
	return nil
}

func (m *memStore) PutState(_ context.Context, key string, blob []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states[key] = append([]byte(nil), blob...)
	return nil
}

func (m *memStore) GetState(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.states[key]
	if !ok {
		return nil, store.ErrNotFound
	}
	return b, nil
}

// runPipeline runs pkts through a pipeline on st with time taken from the
// input; flush ends it as replay does, else with a checkpoint (a daemon's
// stop).
func runPipeline(t *testing.T, st pipeline.Store, pkts []source.Packet, flush bool) {
	t.Helper()
	o := pipeline.DefaultOptions()
	o.Shards = 2
	o.InputClock, o.FlushOnExit, o.Progress = true, flush, false
	p, err := pipeline.New(context.Background(), o, st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *source.Batch, 1)
	go func() {
		for i := 0; i < len(pkts); i += 100 {
			in <- &source.Batch{Packets: pkts[i:min(i+100, len(pkts))]}
		}
		close(in)
	}()
	if err := p.Run(context.Background(), in); err != nil {
		t.Fatal(err)
	}
}

// TestRestartRedelivery: a collector stops (its state checkpointed), and
// its successor restores the checkpoint and is given again what came
// before the stop (the broker redelivers what was not acknowledged) and
// then the rest: every record, field for field (I/O profiles and redirect
// fields included), is the one an uninterrupted run makes, none is made
// twice with other content, and none is missing or extra.
func TestRestartRedelivery(t *testing.T) {
	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients, cfg.Duration, cfg.Seed = 4, 48, 4*time.Minute, 3
	cfg.Trace, cfg.FileSizeMax = "io", 64<<20
	cfg.Redirectors = 1
	gen, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mem loadgen.Memory
	if _, err := gen.Run(context.Background(), &mem); err != nil {
		t.Fatal(err)
	}
	pkts := mem.Packets
	clean := &memStore{states: map[string][]byte{}}
	runPipeline(t, clean, pkts, true)
	want := map[string]record.Record{}
	traced := 0
	for _, r := range clean.recs {
		want[r.RecordID] = r
		if r.IO != nil && r.IO.Reads > 0 {
			traced++
		}
	}
	if traced < 50 {
		t.Fatalf("%d records, %d with traced reads: workload too tame", len(want), traced)
	}
	for _, split := range []int{len(pkts) / 3, len(pkts) * 2 / 3} {
		for _, redeliver := range []int{50, 400} {
			t.Run(fmt.Sprintf("stop at %d, %d redelivered", split, redeliver), func(t *testing.T) {
				st := &memStore{states: map[string][]byte{}}
				runPipeline(t, st, pkts[:split], false)
				// The redelivered packets arrive after the restart.
				var again []source.Packet
				for _, p := range pkts[split-redeliver : split] {
					p.Received = pkts[split-1].Received
					again = append(again, p)
				}
				runPipeline(t, st, append(again, pkts[split:]...), true)
				got := map[string]record.Record{}
				for _, r := range st.recs {
					if old, ok := got[r.RecordID]; ok && !reflect.DeepEqual(old, r) {
						t.Fatalf("record %s made twice with other content:\n%+v\n%+v", r.RecordID, old, r)
					}
					got[r.RecordID] = r
				}
				bad := 0
				for id, w := range want {
					g, ok := got[id]
					if !ok || !reflect.DeepEqual(g, w) {
						t.Errorf("record %s (%s file %d): got %s\nwant %s", id, w.ServerIP, w.FileID, text(g, ok), text(w, true))
						if bad++; bad > 3 {
							t.FailNow()
						}
					}
				}
				if len(got) != len(want) {
					t.Errorf("%d records, the uninterrupted run made %d", len(got), len(want))
				}
			})
		}
	}
}

func text(r record.Record, ok bool) string {
	if !ok {
		return "none"
	}
	s := fmt.Sprintf("%+v", r)
	if r.IO != nil {
		s += fmt.Sprintf(" IO=%+v", *r.IO)
	}
	return s
}
