package monitored

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/record"
)

// fixture is one commit as the writer sees it: a chunk of
// correlate.RecordChunk records of 50 servers on 10 sites and 8 VOs, in no
// order, a few events, and the activity of the 50 servers.
func fixture() ([][]record.Record, []record.Event, []correlate.ServerActivity) {
	rng := rand.New(rand.NewPCG(1, 2))
	vos := []string{"cms", "atlas", "lhcb", "alice", "dune", "ligo", "belle", ""}
	chunk := make([]record.Record, correlate.RecordChunk)
	for i := range chunk {
		s := rng.IntN(50)
		r := &chunk[i]
		r.ServerIP, r.ServerHost, r.Site, r.VO = fmt.Sprintf("192.0.2.%d", s), fmt.Sprintf("xrd%d.example.org", s), fmt.Sprintf("SITE_%d", s%10), vos[rng.IntN(len(vos))]
		r.ReadBytes, r.WriteBytes = rng.Int64N(1<<30), rng.Int64N(1<<20)
		if rng.IntN(20) == 0 {
			r.Reason = record.Timeout
		}
	}
	evs := []record.Event{
		{Type: record.EventRedirect, ServerIP: "192.0.2.200", Site: "SITE_0"},
		{Type: record.EventCacheFileClose, ServerIP: "192.0.2.201", Site: "SITE_0", Data: []byte(`{"lfn":"/store/x","b_hit":1234567,"b_miss":890,"b_bypass":0}`)},
	}
	act := make([]correlate.ServerActivity, 50)
	for i := range act {
		act[i] = correlate.ServerActivity{ServerIP: fmt.Sprintf("192.0.2.%d", i), Site: fmt.Sprintf("SITE_%d", i%10), OpenFiles: i}
		act[i].Heard[correlate.StreamF] = 1_800_000_000
	}
	return [][]record.Record{chunk}, evs, act
}

// BenchmarkObserve: one commit of a full chunk; ns/record is the cost per
// record, activity and events included.
//
//	go test -run '^$' -bench Observe -benchmem ./internal/monitored/
func BenchmarkObserve(b *testing.B) {
	recs, evs, act := fixture()
	m, _ := New(nil, nil)
	m.Observe(recs, evs, act) // every label seen once
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		m.Observe(recs, evs, act)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs[0])), "ns/record")
}

// TestObserveAllocs: once its labels are known, a commit allocates nothing.
func TestObserveAllocs(t *testing.T) {
	recs, evs, act := fixture()
	m, _ := New(nil, nil)
	m.Observe(recs, evs, act)
	if n := testing.AllocsPerRun(20, func() { m.Observe(recs, evs, act) }); n != 0 {
		t.Errorf("Observe allocates %v times per commit in steady state", n)
	}
}
