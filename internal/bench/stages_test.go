package bench

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"
)

// TestStages: a CPU profile's samples are summed by the stage of their
// stack: the rollups own what they call (the store's read included), the
// other stacks go to the first stage from the leaf up (sqlite under the
// writer is the store's), and stacks of the runtime alone are its own.
func TestStages(t *testing.T) {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 10_000_000,
	}
	var id uint64
	loc := func(names ...string) []*profile.Location { // leaf first
		var out []*profile.Location
		for _, n := range names {
			id++
			fn := &profile.Function{ID: id, Name: n}
			p.Function = append(p.Function, fn)
			l := &profile.Location{ID: id, Line: []profile.Line{{Function: fn}}}
			p.Location = append(p.Location, l)
			out = append(out, l)
		}
		return out
	}
	add := func(ns int64, names ...string) {
		p.Sample = append(p.Sample, &profile.Sample{Value: []int64{1, ns}, Location: loc(names...)})
	}
	add(3e9, "runtime.mapaccess2", "github.com/xrdmon/xrdmon/internal/correlate.(*Shard).Handle", "github.com/xrdmon/xrdmon/internal/pipeline.(*shard).run")
	add(2e9, "github.com/xrdmon/xrdmon/internal/store.(*Reader).Read", "github.com/xrdmon/xrdmon/internal/rollup.(*Builder).Run")
	add(1e9, "github.com/mattn/go-sqlite3._Cfunc_step", "github.com/xrdmon/xrdmon/internal/store.(*Store).Append", "github.com/xrdmon/xrdmon/internal/pipeline.(*Pipeline).writer")
	add(1e9, "runtime.scanobject", "runtime.gcBgMarkWorker")
	add(1e9, "syscall.Syscall6", "github.com/xrdmon/xrdmon/internal/source/udp.(*reader).recv")
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	stages, err := Stages(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"shards (decode, correlate)": 3, "rollups": 2, "store": 1, "runtime (GC, scheduler)": 1, "source": 1}
	if len(stages) != len(want) {
		t.Fatalf("stages %+v, want %v", stages, want)
	}
	for _, st := range stages {
		if want[st.Name] != st.Seconds {
			t.Errorf("%s: %.1f s, want %.1f", st.Name, st.Seconds, want[st.Name])
		}
	}
	if stages[0].Name != "shards (decode, correlate)" || stages[0].Share != 3.0/8 {
		t.Errorf("first %+v, want the shards with 3/8", stages[0])
	}
}
