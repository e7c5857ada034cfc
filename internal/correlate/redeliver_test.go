package correlate_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/sourcetest"
)

// outcome is what a run made: records and events by id.
type outcome struct {
	recs map[string]record.Record
	evs  map[string]record.Event
	st   correlate.Stats
}

// collect takes what s made into o, checking that an id made twice (a
// redelivery's duplicate, which the store drops by id) is the same
// content.
func (o *outcome) collect(t *testing.T, s *correlate.Shard) {
	t.Helper()
	var out correlate.Output
	s.Drain(&out)
	for _, c := range out.Records {
		for _, r := range c {
			if r.RecordID == "" {
				continue
			}
			if old, ok := o.recs[r.RecordID]; ok && !reflect.DeepEqual(old, r) {
				t.Fatalf("record %s made twice with other content:\n%+v\n%+v", r.RecordID, old, r)
			}
			o.recs[r.RecordID] = r
		}
	}
	for i := range out.Events {
		record.TypeEvent(&out.Events[i])
	}
	for _, e := range out.Events {
		if old, ok := o.evs[e.EventID]; ok && (old.Type != e.Type || !bytes.Equal(old.Data, e.Data) || !old.Time.Equal(e.Time)) {
			t.Fatalf("event %s made twice with other content", e.EventID)
		}
		o.evs[e.EventID] = e
	}
}

// replay feeds pkts to a new shard in order, with an expiry every input
// second, as the pipeline does with InputClock, and flushes at the end.
// With restoreAt > 0 the shard is checkpointed after the first restoreAt
// packets and replaced by its restored copy, which is then given the
// redeliver packets before the checkpoint again (as the broker redelivers
// what was applied and checkpointed but not acknowledged) and everything
// after it.
func replay(t *testing.T, cfg correlate.Config, pkts []source.Packet, restoreAt, redeliver int) outcome {
	t.Helper()
	o := outcome{recs: map[string]record.Record{}, evs: map[string]record.Event{}}
	s := correlate.NewShard(cfg)
	var tick time.Time
	handle := func(p *source.Packet, at time.Time) {
		s.Handle(p.Data, p.Sender, at)
		if at.Sub(tick) >= time.Second {
			tick = at
			s.Tick(tick)
		}
		o.collect(t, s)
	}
	for i := range pkts {
		if restoreAt > 0 && i == restoreAt {
			var b bytes.Buffer
			if err := s.Snapshot(&b); err != nil {
				t.Fatal(err)
			}
			var err error
			if s, err = correlate.RestoreShard(cfg, &b); err != nil {
				t.Fatal(err)
			}
			// The redelivered packets arrive after the restart: at the
			// collector's clock of then, not before it.
			for j := max(restoreAt-redeliver, 0); j < restoreAt; j++ {
				handle(&pkts[j], tick)
			}
		}
		handle(&pkts[i], pkts[i].Received)
	}
	s.Flush(tick.Add(time.Second))
	o.collect(t, s)
	o.st = s.Stats()
	return o
}

// sameOutcome checks that got has exactly want's records and events, field
// for field (the I/O profile and the collector's Received included).
func sameOutcome(t *testing.T, what string, got, want outcome) {
	t.Helper()
	bad := 0
	for id, w := range want.recs {
		g, ok := got.recs[id]
		switch {
		case !ok:
			t.Errorf("%s: record %s (%s file %d) missing", what, id, w.ServerIP, w.FileID)
		case !reflect.DeepEqual(g, w):
			t.Errorf("%s: record %s (%s file %d) differs:\n got %s\nwant %s", what, id, w.ServerIP, w.FileID, recText(&g), recText(&w))
		default:
			continue
		}
		if bad++; bad > 5 {
			t.FailNow()
		}
	}
	for id, g := range got.recs {
		if _, ok := want.recs[id]; !ok {
			t.Errorf("%s: extra record %s (%s file %d, %s)", what, id, g.ServerIP, g.FileID, g.Reason)
			if bad++; bad > 5 {
				t.FailNow()
			}
		}
	}
	if len(got.evs) != len(want.evs) {
		t.Errorf("%s: %d events, want %d", what, len(got.evs), len(want.evs))
	}
	for id := range want.evs {
		if _, ok := got.evs[id]; !ok {
			t.Errorf("%s: event %s missing", what, id)
			break
		}
	}
	if g, w := got.st.TotalLost(), want.st.TotalLost(); g != w {
		t.Errorf("%s: %d packets counted lost, want %d", what, g, w)
	}
}

func recText(r *record.Record) string {
	s := fmt.Sprintf("%+v", *r)
	if r.IO != nil {
		s += fmt.Sprintf(" IO=%+v", *r.IO)
	}
	return s
}

// After a restore, the broker redelivers what was applied and
// checkpointed but not yet acknowledged: every stream's packets among
// them (maps, f-stream, t-stream I/O traces, r-stream redirects, g-stream
// events) must be recognised as applied already (summaries, which have no
// sequence number and no state, make the same event again), however many there are
// per server, so that the records (I/O profiles included) and events are
// those of an uninterrupted run.
func TestRestoreRedeliveryLoadgen(t *testing.T) {
	t.Run("clean", func(t *testing.T) { restoreRedelivery(t, func(*loadgen.Config) {}) })
	// Packets reordered and duplicated on their way (the clean run has
	// its own reordered I/O profiles, duplicates and collisions).
	t.Run("impaired", func(t *testing.T) {
		restoreRedelivery(t, func(c *loadgen.Config) { c.Reorder, c.Duplicate = 0.05, 0.02 })
	})
}

func restoreRedelivery(t *testing.T, mod func(*loadgen.Config)) {
	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients = 4, 24
	cfg.Duration = 4 * time.Minute
	cfg.ThinkTime = 2 * time.Second
	cfg.Trace = "io"
	cfg.FileSizeMax = 64 << 20
	cfg.Redirectors = 2
	cfg.RedirectWindow = 5 * time.Second
	cfg.CacheFrac = 0.5
	cfg.SummaryInterval = 30 * time.Second
	cfg.Seed = 29
	mod(&cfg)
	g, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mem loadgen.Memory
	truth, err := g.Run(context.Background(), &mem)
	if err != nil {
		t.Fatal(err)
	}
	pkts := mem.Packets
	ccfg := correlate.DefaultConfig()
	ccfg.ReportOpens = true
	clean := replay(t, ccfg, pkts, 0, 0)
	traced := 0
	for _, r := range clean.recs {
		if r.IO != nil && r.IO.Reads > 0 {
			traced++
		}
	}
	kinds := map[record.EventType]int{}
	for _, e := range clean.evs {
		kinds[e.Type]++
	}
	if len(clean.recs) != len(truth.Records) || traced < 100 || kinds[record.EventRedirect] < 100 ||
		kinds[record.EventSummary] < 10 || kinds[record.EventCacheFileClose] < 10 || clean.st.TotalLost() != 0 {
		t.Fatalf("workload: %d records (truth %d), %d traced, events %v, %d lost", len(clean.recs), len(truth.Records), traced, kinds, clean.st.TotalLost())
	}
	// Redeliveries of up to 600 packets: up to ~200 numbers of a server's
	// busiest counter, far beyond the reorder window (16) and the loss
	// horizon (64), within the 256 numbers of a counter that the
	// fingerprints cover.
	deepest := 0
	for _, redeliver := range []int{1, 40, 300, 600} {
		for _, at := range []int{len(pkts) / 5, len(pkts) / 2, len(pkts) * 4 / 5} {
			per := map[netip.AddrPort]int{}
			for _, p := range pkts[max(at-redeliver, 0):at] {
				per[p.Sender]++
				deepest = max(deepest, per[p.Sender])
			}
			got := replay(t, ccfg, pkts, at, redeliver)
			sameOutcome(t, fmt.Sprintf("restore at %d, %d redelivered", at, redeliver), got, clean)
			// Summaries carry no sequence number: made again, their
			// event has the same id (the store keeps one).
			seqd := 0
			for _, p := range pkts[max(at-redeliver, 0):at] {
				if k := packet.Classify(p.Data); k != packet.KindXMLSummary && k != packet.KindJSONSummary {
					seqd++
				}
			}
			if want := clean.st.Duplicates + uint64(seqd); got.st.Duplicates != want {
				t.Errorf("restore at %d, %d redelivered: %d duplicates recognised, want %d", at, redeliver, got.st.Duplicates, want)
			}
		}
	}
	if deepest < 128 || deepest >= 256 {
		t.Errorf("the deepest redelivery holds %d packets of one server: want 128..255", deepest)
	}
	t.Logf("%d packets, %d records (%d with traced reads), events %v; up to %d packets of one server redelivered",
		len(pkts), len(clean.recs), traced, kinds, deepest)
}

// The real capture (f-stream of two production servers, out of sequence
// order): a restore anywhere, with everything before it redelivered,
// gives the records of an uninterrupted run.
func TestRestoreRedeliveryRealCapture(t *testing.T) {
	f, err := os.Open(sourcetest.UseCaseCapturePath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pkts []source.Packet
	now := time.Unix(1748891940, 0).UTC()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		p, err := source.ParseShoveler(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, source.Packet{Data: bytes.Clone(p.Data), Sender: p.Sender,
			Received: now.Add(time.Duration(len(pkts)) * time.Second)})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	cfg := correlate.DefaultConfig()
	clean := replay(t, cfg, pkts, 0, 0)
	if len(clean.recs) < 2000 {
		t.Fatalf("%d records from the capture", len(clean.recs))
	}
	for at := 1; at < len(pkts); at++ {
		got := replay(t, cfg, pkts, at, at)
		sameOutcome(t, fmt.Sprintf("restore at %d, all redelivered", at), got, clean)
	}
}
