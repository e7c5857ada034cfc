package pipeline

import (
	"bytes"
	"testing"

	"github.com/xrdmon/xrdmon/internal/record"
)

// cacheLine is a cache's file_close g-stream line.
var cacheLine = []byte(`{"event":"file_close","lfn":"/store/data/f.root","size":1048576,"blk_size":1048576,"n_blks":1,"n_blks_done":1,"access_cnt":1,"attach_t":1750000000,"detach_t":1750000010,"remotes":[],"b_hit":0,"b_miss":1048576,"b_bypass":0}`)

// BenchmarkTypeEvents types a barrier's 1,000 raw events (cache
// file_close lines) as the commit does, on one core.
//
//	go test -run '^$' -bench TypeEvents ./internal/pipeline
func BenchmarkTypeEvents(b *testing.B) {
	var p Pipeline
	evs := make([]record.Event, 1000)
	b.ReportAllocs()
	for b.Loop() {
		for i := range evs {
			evs[i] = record.Event{Provider: "C", Raw: cacheLine}
		}
		p.typeEventsOf(evs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}

// TestTypeEventsAllocs: typing a barrier's events allocates a chunk of
// payloads at a time, not one payload per event, and gives each event
// the payload ParseEvent gives.
func TestTypeEventsAllocs(t *testing.T) {
	var p Pipeline
	line := cacheLine
	evs := make([]record.Event, 1000)
	n := testing.AllocsPerRun(20, func() {
		for i := range evs {
			evs[i] = record.Event{Provider: "C", Raw: line}
		}
		p.typeEventsOf(evs)
	})
	// 1,000 payloads of about 300 bytes: ten chunks of typeChunk.
	if n > 15 {
		t.Errorf("%v allocations to type %d events", n, len(evs))
	}
	_, want, _ := record.ParseEvent('C', line)
	for i := range evs {
		if !bytes.Equal(evs[i].Data, want) || !evs[i].Valid {
			t.Fatalf("event %d: %s, want %s", i, evs[i].Data, want)
		}
	}
}
