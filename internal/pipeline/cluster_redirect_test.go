package pipeline_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/cluster"
	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/pipeline"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// memLocal is a cluster collector's local store, kept in memory.
type memLocal struct {
	mu     sync.Mutex
	states map[string][]byte
}

func (m *memLocal) AppendWithProgress(context.Context, []record.Record, []record.Event, []record.Record) error {
	return nil
}

func (m *memLocal) PutState(_ context.Context, key string, blob []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states[key] = append([]byte(nil), blob...)
	return nil
}

func (m *memLocal) GetState(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.states[key]
	if !ok {
		return nil, store.ErrNotFound
	}
	return b, nil
}

// collector is one pipeline and the records it committed.
type collector struct {
	p    *pipeline.Pipeline
	in   chan *source.Batch
	done chan error
	mu   sync.Mutex
	recs map[string]record.Record
	stop func() // releases a cluster member's lease and store
}

// startCollector starts a pipeline on st; recs (nil: a new map) collects
// the records it commits. A collector that is to be restarted keeps its
// state at the end of its input (checkpoint) instead of flushing it.
func startCollector(t *testing.T, st pipeline.Store, recs map[string]record.Record, restarts bool) *collector {
	t.Helper()
	if recs == nil {
		recs = map[string]record.Record{}
	}
	c := &collector{in: make(chan *source.Batch, 64), done: make(chan error, 1), recs: recs}
	o := pipeline.DefaultOptions()
	o.Shards = 2
	o.FlushInterval, o.CheckpointInterval = 20*time.Millisecond, 100*time.Millisecond
	o.InputClock, o.FlushOnExit, o.Progress = true, !restarts, false
	o.Observe = func(chunks [][]record.Record, _ []record.Event, _ []correlate.ServerActivity) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, ch := range chunks {
			for _, r := range ch {
				if r.RecordID != "" {
					c.recs[r.RecordID] = r
				}
			}
		}
	}
	p, err := pipeline.New(context.Background(), o, st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.p = p
	go func() { c.done <- p.Run(context.Background(), c.in) }()
	return c
}

// TestClusterLinksRedirectsAcrossShards: a workload with two redirectors
// in front of four data servers, sharded as a bus cluster shards it (each
// server's packets to one collector), with no data server on its
// redirectors' shard for most redirects. Each collector shares its shard's
// redirects through PostgreSQL (shard_redirects) and links the other
// shards' ones: the cluster's records equal, field for field (redirect
// fields included), a single collector's, and so do the redirect columns
// of the records table. In "failover", the collectors of shards 0 and 1
// stop halfway and new ones (new leases, empty local stores) take the
// shards over from their checkpoints in PostgreSQL, and are given the
// last 5 s of their input again (what the broker redelivers): the
// records are the same.
func TestClusterLinksRedirectsAcrossShards(t *testing.T) {
	t.Run("steady", func(t *testing.T) { clusterRedirects(t, false) })
	t.Run("failover", func(t *testing.T) { clusterRedirects(t, true) })
}

func clusterRedirects(t *testing.T, failover bool) {
	pgURL := testenv.PostgresURL(t)
	ctx := context.Background()
	schema := strings.ReplaceAll(testenv.Uniq("xrdmon_redir"), "-", "_")
	pg, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pg.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pg.Close(ctx)
	})

	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients, cfg.Duration, cfg.Seed = 4, 12, 3*time.Minute, 29
	cfg.Redirectors = 2
	cfg.TransferMin, cfg.TransferMax = time.Second, 40*time.Second
	gen, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mem loadgen.Memory
	if _, err := gen.Run(ctx, &mem); err != nil {
		t.Fatal(err)
	}
	// Servers 0..3 serve data, 4 and 5 redirect. Shard k gets servers
	// with index k mod 3: data servers 0 and 3 on shard 0, with no
	// redirector; redirector 4 on shard 1 (with data server 1), 5 on
	// shard 2 (with data server 2).
	const nShards = 3
	shardOf := func(server int) int { return server % nShards }

	// The single collector.
	single := startCollector(t, nil, nil, false)
	// The cluster: one collector per shard, each holding its shard's lease.
	var members [nShards]*collector
	member := func(k int, recs map[string]record.Record, restarts bool) *collector {
		lease, err := cluster.AcquireLease(ctx, pgURL, schema, fmt.Sprintf("shard.%02d", k), fmt.Sprint("c", k), time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := cluster.NewStore(&memLocal{states: map[string][]byte{}}, lease, pgURL, schema, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := startCollector(t, cs, recs, restarts)
		c.stop = func() { cs.Close(); lease.Release() }
		t.Cleanup(c.stop)
		return c
	}
	for k := range members {
		members[k] = member(k, nil, failover && k < 2)
	}

	// Feed every collector its packets in steps of 5 s of input time, at
	// about 20 times real time: as a live cluster, each collector commits
	// its redirects well within the two link windows (2 min of input
	// time) after which an open is decided.
	pkts := mem.Packets
	var last [nShards]*source.Batch
	shared := false // a redirect is in shard_redirects
	for i, step := 0, 0; i < len(pkts); step++ {
		end := pkts[i].Received.Add(5 * time.Second)
		all := &source.Batch{}
		var parts [nShards]*source.Batch
		for k := range parts {
			parts[k] = &source.Batch{}
		}
		for ; i < len(pkts) && pkts[i].Received.Before(end); i++ {
			all.Packets = append(all.Packets, pkts[i])
			k := shardOf(mem.Servers[i])
			parts[k].Packets = append(parts[k].Packets, pkts[i])
		}
		if failover && i >= len(pkts)/2 && last[0] != nil {
			// Shards 0 and 1 fail over: their collectors stop (their
			// state checkpointed in PostgreSQL), new ones take over and
			// get the last step again.
			for k := range 2 {
				c := members[k]
				close(c.in)
				if err := <-c.done; err != nil {
					t.Fatal(err)
				}
				c.stop()
				members[k] = member(k, c.recs, false)
				members[k].in <- last[k]
			}
			failover = false
		}
		single.in <- all
		if !shared {
			// A new cluster's first moments (docs/scale-out.md, "Where
			// it cannot"): a linker holds records for redirects only once
			// it has seen one, so until the first redirect is shared,
			// shard 0 gets each step once the redirectors' shards have
			// committed it (as a single collector gets the redirects
			// before the records that come after them). Without this,
			// how many of the first records are linked depends on how
			// fast the other collectors' first commits are.
			acked, n := make(chan struct{}, nShards), 0
			for k := 1; k < nShards; k++ {
				if b := parts[k]; len(b.Packets) > 0 {
					b.Ack = func() error {
						select { // once; a redelivery's ack is not waited for
						case acked <- struct{}{}:
						default:
						}
						return nil
					}
					members[k].in <- b
					last[k], parts[k] = b, &source.Batch{}
					n++
				}
			}
			for range n {
				<-acked
			}
			if err := pg.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+schema+`.shard_redirects)`).Scan(&shared); err != nil {
				t.Fatal(err)
			}
		}
		for k, b := range parts {
			if len(b.Packets) > 0 {
				members[k].in <- b
				last[k] = b
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(time.Second) // every shard's last redirects committed
	for _, c := range append([]*collector{single}, members[:]...) {
		close(c.in)
		if err := <-c.done; err != nil {
			t.Fatal(err)
		}
	}

	want := single.recs
	got := map[string]record.Record{}
	for _, c := range members {
		for id, r := range c.recs {
			got[id] = r
		}
	}
	linked, cross := 0, 0
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("record %s (%s file %d) not made by the cluster", id, w.ServerIP, w.FileID)
			continue
		}
		// Received is the collector's clock at the emission: a shard
		// expires state at its own packets' times.
		g.Received = w.Received
		if !reflect.DeepEqual(g, w) {
			t.Errorf("record %s (%s file %d) differs:\n got %+v\nwant %+v", id, w.ServerIP, w.FileID, g, w)
		}
		if w.RedirectHops > 0 {
			linked++
		}
	}
	if len(got) != len(want) {
		t.Errorf("cluster made %d records, single collector %d", len(got), len(want))
	}

	// What PostgreSQL holds: the redirect columns of every record.
	rows, err := pg.Query(ctx, `SELECT record_id, redirect_hops, redirect_delay_ms, redirect_delay_max_ms FROM `+schema+`.records`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var id string
		var hops int32
		var dmin, dmax int64
		if err := rows.Scan(&id, &hops, &dmin, &dmax); err != nil {
			t.Fatal(err)
		}
		n++
		w, ok := want[id]
		if !ok {
			t.Errorf("PostgreSQL holds record %s, which the single collector did not make", id)
			continue
		}
		if hops != w.RedirectHops || dmin != w.RedirectDelayMS || dmax != w.RedirectDelayMaxMS {
			t.Errorf("record %s in PostgreSQL: hops %d delay %d..%d ms, want %d, %d..%d", id, hops, dmin, dmax, w.RedirectHops, w.RedirectDelayMS, w.RedirectDelayMaxMS)
		}
		if hops > 0 && shardOf(serverIndex(t, mem, w.ServerIP)) == 0 {
			cross++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Errorf("PostgreSQL holds %d records, want %d", n, len(want))
	}
	// Shard 0 has no redirector: all its links crossed shards.
	if linked < 100 || cross < linked/4 {
		t.Errorf("%d records linked, %d of them across shards: workload too tame", linked, cross)
	}
	t.Logf("%d packets, %d records, %d with redirects (%d on the shard without a redirector)", len(pkts), len(want), linked, cross)
}

// serverIndex returns the loadgen index of the server with address ip.
func serverIndex(t *testing.T, mem loadgen.Memory, ip string) int {
	t.Helper()
	for i, p := range mem.Packets {
		if p.Sender.Addr().String() == ip {
			return mem.Servers[i]
		}
	}
	t.Fatalf("no server %s", ip)
	return -1
}
