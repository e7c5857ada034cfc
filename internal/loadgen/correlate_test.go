package loadgen

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/file"
)

// replayCapture does what `xrdmon replay` does with a capture: read it with
// the file source, feed one correlator shard in order, flush at the last
// packet's time, and return the records and events.
func replayCapture(t *testing.T, path string) ([]record.Record, []record.Event) {
	t.Helper()
	src, err := file.New(file.Options{Paths: []string{path}, BatchSize: 512}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := correlate.DefaultConfig()
	cfg.ReportOpens = true
	shard := correlate.NewShard(cfg)
	linker := correlate.NewLinker(correlate.DefaultLinkWindow, cfg.OpenTTL, 64<<20)
	var opens []correlate.Open
	batches := make(chan *source.Batch, 8)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(context.Background(), batches)
		close(batches)
	}()
	var recs []record.Record
	var evs []record.Event
	var last time.Time
	for b := range batches {
		for _, p := range b.Packets {
			shard.Handle(p.Data, p.Sender, p.Received)
			if p.Received.After(last) {
				last = p.Received
			}
		}
		if b.Free != nil {
			b.Free()
		}
		n, m := len(recs), len(evs)
		recs, evs, opens = drainShard(shard, recs, evs)
		recs = append(recs[:n], linker.Link(slices.Clone(recs[n:]), evs[m:], opens, last, false)...)
	}
	if err := <-done; err != nil {
		t.Fatalf("read capture: %v", err)
	}
	shard.Flush(last)
	n, m := len(recs), len(evs)
	recs, evs, opens = drainShard(shard, recs, evs)
	recs = append(recs[:n], linker.Link(slices.Clone(recs[n:]), evs[m:], opens, last, true)...)
	return recs, evs
}

// drainShard drains shard (correlate.Shard.Drain) and appends its records,
// copied out of their chunks (which go back to the shard), to recs and its
// events, typed, to evs; it returns them and the shard's opens.
func drainShard(shard *correlate.Shard, recs []record.Record, evs []record.Event) ([]record.Record, []record.Event, []correlate.Open) {
	var o correlate.Output
	shard.Drain(&o)
	for _, c := range o.Records {
		recs = append(recs, c...)
	}
	shard.Recycle(o.Records)
	for i := range o.Events {
		record.TypeEvent(&o.Events[i])
	}
	return recs, append(evs, o.Events...), o.Opens
}

// recordKey identifies one file access.
func recordKey(r *record.Record) string {
	return fmt.Sprintf("%s/%d/%d/%d", r.ServerIP, r.ServerStod, r.ServerID, r.FileID)
}

// comparable returns the fields of r that the truth predicts exactly:
// everything but the collector's clock, the id (a hash of the times) and
// reverse DNS.
func comparable(r record.Record) record.Record {
	r.RecordID, r.Received, r.ClientName = "", time.Time{}, ""
	r.Start, r.End = time.Time{}, time.Time{}
	r.RedirectDelayMS, r.RedirectDelayMaxMS = 0, 0 // bounds, checked apart
	return r
}

// TestTruthEqualsReplay is the ground-truth test: for lossless runs, the
// records `xrdmon replay` derives from loadgen's own pcap capture are
// exactly the records in loadgen's truth.
func TestTruthEqualsReplay(t *testing.T) {
	cases := map[string]func(*Config){
		"default":     func(*Config) {},
		"restarts":    func(c *Config) { c.Restarts = 3; c.Servers = 3 },
		"no-drain":    func(c *Config) { c.Drain = false },
		"count":       func(c *Config) { c.Duration = 0; c.Count = 1500 },
		"caches":      func(c *Config) { c.CacheFrac = 1; c.TPCFrac = 0.3; c.Servers = 2 },
		"trace-io":    func(c *Config) { c.Trace = "io"; c.FileSizeMax = 64 << 20; c.Servers = 2 },
		"trace-iov":   func(c *Config) { c.Trace = "iov"; c.FileSizeMax = 64 << 20; c.Servers = 2; c.ReadvFrac = 0.8 },
		"redirectors": func(c *Config) { c.Redirectors = 3; c.RedirectDelay = 700 * time.Millisecond },
		"small-fbsz": func(c *Config) {
			c.FBSZ = 600
			c.LongFrac = 0.3
			c.LongTransfer = 3 * time.Minute
		},
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.Duration = 5 * time.Minute
			cfg.Seed = 7
			mod(&cfg)
			truth, capture := generatePcap(t, cfg)
			got, evs := replayCapture(t, capture)

			if len(got) != len(truth.Records) {
				t.Errorf("replay gave %d records, truth has %d", len(got), len(truth.Records))
			}
			want := make(map[string]*record.Record, len(truth.Records))
			for i := range truth.Records {
				want[recordKey(&truth.Records[i])] = &truth.Records[i]
			}
			tol := cfg.FStat + time.Second
			bad := 0
			for i := range got {
				g := &got[i]
				w, ok := want[recordKey(g)]
				if !ok {
					t.Errorf("unexpected record %s: %+v", recordKey(g), *g)
					bad++
				} else {
					delete(want, recordKey(g))
					if cg, cw := comparable(*g), comparable(*w); !reflect.DeepEqual(cg, cw) {
						t.Errorf("record %s differs:\n got %+v\nwant %+v", recordKey(g), cg, cw)
						bad++
					}
					if g.RedirectHops > 0 && (w.RedirectDelayMS < g.RedirectDelayMS || w.RedirectDelayMS > g.RedirectDelayMaxMS) {
						t.Errorf("record %s: redirect delay %d ms, outside the bounds [%d, %d] ms the collector gave",
							recordKey(g), w.RedirectDelayMS, g.RedirectDelayMS, g.RedirectDelayMaxMS)
						bad++
					}
					if d := g.Start.Sub(w.Start).Abs(); d > tol {
						t.Errorf("record %s: start %s, truth %s", recordKey(g), g.Start, w.Start)
						bad++
					}
					if d := g.End.Sub(w.End).Abs(); d > tol {
						t.Errorf("record %s: end %s, truth %s", recordKey(g), g.End, w.End)
						bad++
					}
				}
				if bad > 5 {
					t.Fatal("too many differences")
				}
			}
			for k := range want {
				t.Errorf("truth record %s missing from the replay", k)
				if bad++; bad > 5 {
					t.Fatal("too many differences")
				}
			}
			var nev int64
			for _, n := range truth.Events {
				nev += n
			}
			if int64(len(evs)) != nev {
				t.Errorf("replay gave %d events, truth %d", len(evs), nev)
			}
			t.Logf("%d packets, %d records %v, %d events", truth.Generated, len(got), truth.Reasons, len(evs))
		})
	}
}

// generatePcap runs cfg into a pcap file and returns the truth and the path.
func generatePcap(t *testing.T, cfg Config) (*Truth, string) {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "capture.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := NewPcap(f, DefaultCollector)
	if err != nil {
		t.Fatal(err)
	}
	truth, err := g.Run(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return truth, path
}
