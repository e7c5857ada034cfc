// Package pipeline wires xrdmon's stages together: batches of datagrams from
// the sources are correlated on per-server shards, the records they produce
// are named by reverse DNS and committed to the store, and only then is the
// input acknowledged.
//
// # Shape
//
// One dispatcher goroutine reads batches and hands each batch to every shard
// goroutine; a shard handles only the packets whose sender hashes to it
// (correlate.ShardOf), so one server's packets are always applied in order by
// one goroutine and different servers spread over cores without a lock.
//
// Every FlushInterval the dispatcher sends a barrier down each shard's queue.
// Because queues are FIFO, when every shard has answered the barrier every
// batch dispatched before it has been applied. The shards' answers (records,
// events, and at checkpoints a snapshot of their state) go to one writer
// goroutine, which waits a bounded time for DNS names, appends to the store
// in one transaction and then acknowledges the batches covered by the
// barrier. The hot path (dispatch and correlation) never waits on DNS or
// disk: the writer runs beside it, and a slow writer only delays the next
// barrier, which is the pipeline's backpressure.
//
// # Acknowledgement
//
// A batch with an Ack (RabbitMQ) is acknowledged only after a checkpoint
// barrier that follows it has been written: its records are in the store and
// the correlation state it changed is in the store's checkpoint. A crash at
// any moment therefore loses nothing: unacknowledged input is redelivered and
// applied to the restored state, and records it produces again carry the same
// record_id, which the store deduplicates.
package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/backoff"
	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/dnscache"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/store"
)

// Store is what the pipeline needs of the durable store.
// AppendWithProgress (store.Store.AppendWithProgress) writes records,
// events and progress snapshots (the bytes of open files at their isXfr
// updates, for the rollups) in one batch; it must not keep recs, evs or
// progress after it returns: the pipeline reuses them.
type Store interface {
	AppendWithProgress(ctx context.Context, recs []record.Record, evs []record.Event, progress []record.Record) error
	PutState(ctx context.Context, key string, blob []byte) error
	GetState(ctx context.Context, key string) ([]byte, error)
}

// RedirectFeed is a Store shared with the other collectors of a cluster
// (cluster.Store): it gives the redirect events that the other
// shards' collectors committed, so that a redirect is linked to the
// record of the open it led to whichever shard the redirector and the
// data server hash to (docs/scale-out.md, "Redirects across shards"). The
// store shares this collector's redirect events itself, as they are
// appended.
type RedirectFeed interface {
	// ForeignRedirects returns the other shards' redirect events
	// committed since the last call, each exactly once.
	ForeignRedirects(ctx context.Context) ([]record.Event, error)
	// RedirectFeedState returns the reading position, kept in the
	// redirect linker's checkpoint; RestoreRedirectFeed sets it back.
	RedirectFeedState() []byte
	RestoreRedirectFeed(state []byte) error
}

// Namer names addresses by reverse DNS without blocking (dnscache.Cache).
type Namer interface {
	// Lookup returns the cached name of addr, starting a lookup if needed.
	Lookup(addr netip.Addr) (string, bool)
}

// Options configure a Pipeline. Start from DefaultOptions.
type Options struct {
	// Shards is the number of correlation goroutines (default GOMAXPROCS).
	Shards int
	// FlushInterval is how often records are committed to the store.
	FlushInterval time.Duration
	// CheckpointInterval is how often the correlation state is checkpointed
	// and acknowledgeable input acknowledged. It is rounded up to a multiple
	// of FlushInterval. RabbitMQ prefetch must cover this much input.
	CheckpointInterval time.Duration
	// DNSMaxWait is how long a commit waits for reverse-DNS names before
	// records go out with the address.
	DNSMaxWait time.Duration
	// CommitPackets bounds the packets between two commits: a commit
	// happens after that many even before FlushInterval, so a burst (or a
	// replay, which reads as fast as it can) keeps a small working set.
	CommitPackets int
	// CommitBytes, when positive, also makes a commit due after that many
	// bytes of datagrams: replay sets it, so that the records of a run of
	// large f-stream buffers (thousands of closes) are written while the
	// shards go on, not all at its end.
	CommitBytes int
	// AckPackets makes a checkpoint due, at once, when this many packets
	// of acknowledgeable batches (RabbitMQ) wait for one (0: only every
	// CheckpointInterval). Set it below the source's prefetch: the broker
	// sends no more than prefetch unacknowledged messages, so without it
	// the input runs at most at prefetch per CheckpointInterval.
	AckPackets int
	// Queue is the number of batches buffered per shard.
	Queue int
	// Correlate configures the correlator shards.
	Correlate correlate.Config
	// StateKey is the store key of the checkpoint ("" disables checkpoints).
	StateKey string
	// FlushOnExit emits every still-open file as a partial record
	// (end_of_input) when the input ends, instead of checkpointing it. Replay
	// sets it; the daemon keeps state across restarts instead.
	FlushOnExit bool
	// InputClock makes time follow the input instead of the wall clock, for
	// captures read from files: the correlator's timeouts run on the
	// packets' Received times, at the first batch that reaches each second
	// of input time, so the same capture gives the same records however
	// fast it is read and whatever the commit timing. Commits still happen
	// every FlushInterval of wall time.
	InputClock bool
	// RedirectWindow is how far apart a redirect and the open it led to
	// may be (correlate.Linker).
	RedirectWindow time.Duration
	// Progress makes progress snapshots (the bytes of open files at their
	// isXfr updates, for the rollups: store.Entry.Progress). Without
	// rollups nobody reads them: replay and a collector with rollups off
	// leave it false.
	Progress bool
	// Observe, when set, is called by the writer after each commit is
	// durable, with its record chunks, its events and every server's
	// activity at its barrier (monitored.Monitor.Observe). It must not
	// keep the slices.
	Observe func(recs [][]record.Record, evs []record.Event, servers []correlate.ServerActivity)
}

// linkMaxBytes bounds the redirect Linker's memory.
const linkMaxBytes = 64 << 20

// inputTick is the step of input time at which an InputClock pipeline
// expires state (the correlator's TTLs are whole seconds).
const inputTick = time.Second

// DefaultOptions returns the daemon's defaults.
func DefaultOptions() Options {
	return Options{
		Shards:             shardCount(),
		FlushInterval:      200 * time.Millisecond,
		CheckpointInterval: 2 * time.Second,
		DNSMaxWait:         dnscache.DefaultConfig().MaxWait.D(),
		CommitPackets:      8192,
		Queue:              64,
		Correlate:          correlate.DefaultConfig(),
		StateKey:           "correlate",
		RedirectWindow:     correlate.DefaultLinkWindow,
		Progress:           true,
	}
}

// Pipeline correlates batches of datagrams and commits what they produce.
type Pipeline struct {
	opts  Options
	store Store
	namer Namer
	log   *slog.Logger
	m     *metrics

	shards []*shard

	statsMu sync.Mutex
	stats   []correlate.Stats // last stats reported by each shard

	ready         atomic.Bool
	invalidEvents atomic.Uint64 // g-stream lines that were not valid JSON (typed in commit)

	free   chan barrierBuffers  // slices of committed barriers, for reuse
	chunks chan []record.Record // record chunks of committed barriers, for the shards to reuse

	pruned bool // checkpoints of other shard layouts dropped (writer only)

	busy func() bool // ShedProgressWhile

	linker    *correlate.Linker // writer only
	linkStats atomic.Pointer[correlate.LinkStats]
	feed      RedirectFeed // the store's, in a cluster (else nil)
}

// New returns a pipeline writing to st and naming hosts with namer (nil: no
// names). It restores the correlation state checkpointed in st, if any.
func New(ctx context.Context, opts Options, st Store, namer Namer, log *slog.Logger, reg prometheus.Registerer) (*Pipeline, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Shards <= 0 {
		opts.Shards = shardCount()
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultOptions().FlushInterval
	}
	if opts.CheckpointInterval < opts.FlushInterval {
		opts.CheckpointInterval = opts.FlushInterval
	}
	if opts.Queue <= 0 {
		opts.Queue = DefaultOptions().Queue
	}
	if opts.CommitPackets <= 0 {
		opts.CommitPackets = DefaultOptions().CommitPackets
	}
	if opts.RedirectWindow <= 0 {
		opts.RedirectWindow = DefaultOptions().RedirectWindow
	}
	opts.Correlate.ReportOpens = true
	opts.Correlate.ReportProgress = opts.Progress
	opts.Correlate.ReportActivity = opts.Observe != nil
	p := &Pipeline{opts: opts, store: st, namer: namer, log: log, free: make(chan barrierBuffers, 2)}
	if f, ok := st.(RedirectFeed); ok && opts.StateKey != "" {
		p.feed = f
	}
	p.chunks = make(chan []record.Record, 8*opts.Shards)
	p.shards = make([]*shard, opts.Shards)
	p.stats = make([]correlate.Stats, opts.Shards)
	restored := 0
	for i := range p.shards {
		c, n, err := p.restoreShard(ctx, i)
		if err != nil {
			return nil, err
		}
		restored += n
		p.stats[i] = c.Stats() // the restored counters from the start, not from the first barrier (no jump in the metrics)
		p.shards[i] = &shard{id: i, n: opts.Shards, c: c, in: make(chan shardMsg, opts.Queue)}
	}
	if restored > 0 {
		log.Info("Restored correlation state", "open_files", restored, "shards", opts.Shards)
	}
	p.linker = correlate.NewLinker(opts.RedirectWindow, opts.Correlate.OpenTTL, linkMaxBytes)
	if err := p.restoreLinker(ctx); err != nil {
		return nil, err
	}
	p.linkStats.Store(&correlate.LinkStats{})
	var err error
	if p.m, err = newMetrics(p, reg); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	return p, nil
}

func (p *Pipeline) stateKey(i int) string {
	return fmt.Sprintf("%s/%d-of-%d", p.opts.StateKey, i, p.opts.Shards)
}

// linkerKey is the store key of the redirect Linker's checkpoint.
func (p *Pipeline) linkerKey() string { return p.opts.StateKey + "/redirects" }

func (p *Pipeline) restoreLinker(ctx context.Context) error {
	if p.opts.StateKey == "" || p.store == nil {
		return nil
	}
	blob, err := p.store.GetState(ctx, p.linkerKey())
	if errors.Is(err, store.ErrNotFound) || (err == nil && len(blob) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read redirect checkpoint: %w", err)
	}
	packed := blob
	if blob, err = unpackLinkerState(packed); err != nil {
		p.log.Warn("Redirect checkpoint unreadable; redirects seen before the restart will not be linked", "err", err, "bytes", len(packed))
		return nil
	}
	blob, feed := splitLinkerState(blob)
	if p.feed != nil && feed != nil {
		if err := p.feed.RestoreRedirectFeed(feed); err != nil {
			p.log.Warn("Redirect feed position unreadable; reading the other shards' recent redirects again", "err", err)
		}
	}
	if err := p.linker.UnmarshalBinary(blob); err != nil {
		// Only redirection fields are at stake: start without it, loudly.
		p.log.Warn("Redirect checkpoint unreadable; redirects seen before the restart will not be linked", "err", err, "bytes", len(blob))
	}
	return nil
}

func (p *Pipeline) restoreShard(ctx context.Context, i int) (*correlate.Shard, int, error) {
	if p.opts.StateKey == "" || p.store == nil {
		return correlate.NewShard(p.opts.Correlate), 0, nil
	}
	key := p.stateKey(i)
	blob, err := p.store.GetState(ctx, key)
	if errors.Is(err, store.ErrNotFound) || (err == nil && len(blob) == 0) {
		// No checkpoint for this layout (first start, or the shard count
		// changed: then the old state cannot be split and is dropped).
		return correlate.NewShard(p.opts.Correlate), 0, nil
	}
	if err != nil {
		// Starting empty would silently turn every open transfer into a
		// partial record: refuse to start instead.
		return nil, 0, fmt.Errorf("read correlation checkpoint %s: %w", key, err)
	}
	c, err := correlate.RestoreShard(p.opts.Correlate, shardState(blob))
	if err != nil {
		return nil, 0, fmt.Errorf("correlation checkpoint %s is unreadable (%d bytes): %w", key, len(blob), err)
	}
	return c, c.Stats().OpenFiles, nil
}

// Ready reports whether the pipeline is running and its last commit
// succeeded, for /readyz.
func (p *Pipeline) Ready() error {
	if !p.ready.Load() {
		return errors.New("pipeline not committing")
	}
	return nil
}

// Stats returns the sum of the shards' counters as of their last barrier.
func (p *Pipeline) Stats() correlate.Stats {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	var sum correlate.Stats
	for i := range p.stats {
		sum.Add(&p.stats[i])
	}
	sum.InvalidEvents += p.invalidEvents.Load()
	return sum
}

// shardMsg is a batch to apply, a barrier, or (both nil) an expiry at tick.
type shardMsg struct {
	batch   *tracked
	barrier *barrier
	tick    time.Time
}

// tracked is a batch with a count of shards still applying it.
type tracked struct {
	b       *source.Batch
	pending atomic.Int32
}

func (t *tracked) done() {
	if t.pending.Add(-1) == 0 && t.b.Free != nil {
		t.b.Free()
	}
}

// barrier collects the shards' output at a commit point.
type barrier struct {
	now        time.Time
	tick       bool // expire state at now (correlate.Shard.Tick)
	checkpoint bool
	shed       bool // until the next barrier, no progress snapshots (ShedProgressWhile)
	flush      bool // end of input: flush open files as partial records
	wg         sync.WaitGroup
	mu         sync.Mutex
	// out is what the shards drained (correlate.Shard.Drain): record
	// chunks, each shard's in the order made; raw events, typed by the
	// writer; progress snapshots, appended with the first chunk; opens;
	// activity (for Options.Observe).
	out      correlate.Output
	nrecs    int
	hasBufs  bool // out's slices were taken from the free list (by the first shard to answer)
	appended int  // chunks of out.Records appended (the first with out.Events): where a retried commit goes on
	states   map[int][]byte
	err      error
	acks     []func() error // acks of batches dispatched before this barrier
}

type shard struct {
	id, n int
	c     *correlate.Shard
	in    chan shardMsg
	zw    *s2.Writer // compresses the snapshot as it is written
	last  int        // the length of the last checkpoint, for the room of the next
}

func (s *shard) run(p *Pipeline) {
	for msg := range s.in {
		if msg.batch != nil {
			b := msg.batch.b
			for i := range b.Packets {
				pk := &b.Packets[i]
				if correlate.ShardOf(pk.Sender.Addr(), s.n) == s.id {
					s.c.Handle(pk.Data, pk.Sender, pk.Received)
				}
			}
			msg.batch.done()
			continue
		}
		if msg.barrier == nil {
			s.c.Tick(msg.tick)
			continue
		}
		s.answer(p, msg.barrier)
	}
}

func (s *shard) answer(p *Pipeline, br *barrier) {
	defer br.wg.Done()
	if br.flush {
		s.c.Flush(br.now)
	} else if br.tick {
		s.c.Tick(br.now)
	}
	var state []byte
	var err error
	if br.checkpoint {
		state, err = s.checkpoint()
	}
	st := s.c.Stats()
	p.statsMu.Lock()
	p.stats[s.id] = st
	p.statsMu.Unlock()

	br.mu.Lock()
	// Straight into the barrier's slices (reused from earlier barriers):
	// a record is copied once on its way to the writer. Only the first shard
	// to answer takes the slices: a later one must append to what earlier
	// ones put there, even when that is only events (recs still nil).
	if !br.hasBufs {
		p.buffers(&br.out)
		br.hasBufs = true
	}
	s.c.Drain(&br.out) // events typed by the writer, off the packet path
	s.c.ShedProgress(br.shed)
	s.recycle(p)
	if state != nil {
		br.states[s.id] = state
	}
	if err != nil && br.err == nil {
		br.err = fmt.Errorf("snapshot shard %d: %w", s.id, err)
	}
	br.mu.Unlock()
}

// shardStateMagic starts a shard's checkpoint as stored: the snapshot
// (docs/checkpoint.md) compressed as an S2 stream. It is compressed as
// it is written, so that neither the shard nor the store holds the
// uncompressed bytes (24 MB for a shard of 235,000 sessions, 2.3
// times its compressed size), and it is written at every checkpoint, to
// PostgreSQL too in a cluster.
const shardStateMagic = "XRDMCSS2"

// checkpoint returns the shard's state as stored (shardStateMagic).
func (s *shard) checkpoint() ([]byte, error) {
	// A buffer of its own, handed over as it is: the barrier keeps it
	// until the store has it, and a buffer kept between checkpoints
	// would hold the shard's compressed state in memory for nothing.
	snap := bytes.NewBuffer(make([]byte, 0, len(shardStateMagic)+s.last+s.last/8))
	snap.WriteString(shardStateMagic)
	if s.zw == nil {
		// In the shard's goroutine: no goroutines of the compressor's own.
		s.zw = s2.NewWriter(nil, s2.WriterConcurrency(1))
	}
	s.zw.Reset(snap)
	err := s.c.Snapshot(s.zw)
	if err == nil {
		err = s.zw.Close()
		if err != nil {
			err = fmt.Errorf("compress: %w", err)
		}
	}
	s.zw.Reset(nil) // not to keep snap
	if err != nil {
		return nil, err
	}
	s.last = snap.Len()
	return snap.Bytes(), nil
}

// shardState returns the reader of a stored shard checkpoint: compressed
// (shardStateMagic), or a plain snapshot (written before compression).
func shardState(blob []byte) io.Reader {
	if z, ok := bytes.CutPrefix(blob, []byte(shardStateMagic)); ok {
		return s2.NewReader(bytes.NewReader(z))
	}
	return bytes.NewReader(blob)
}

// recycle gives the shard the record chunks that committed barriers gave
// back, for its next records.
func (s *shard) recycle(p *Pipeline) {
	for range 4 {
		select {
		case c := <-p.chunks:
			s.c.Recycle([][]record.Record{c}) // the argument stays on the stack
		default:
			return
		}
	}
}

// buffers gives o the slices a committed barrier gave back (release), if
// one waits: a barrier's opens and progress snapshots are copied into
// them (correlate.Shard.Drain), tens of thousands a second.
func (p *Pipeline) buffers(o *correlate.Output) {
	select {
	case b := <-p.free:
		o.Records, o.Events, o.Opens, o.Progress = b.recs, b.evs, b.opens, b.progress
	default:
	}
}

// release gives a committed barrier's slices back for reuse.
func (p *Pipeline) release(br *barrier) {
	for _, c := range br.out.Records {
		if cap(c) < correlate.RecordChunk {
			continue
		}
		clear(c)
		select {
		case p.chunks <- c[:0]:
		default: // enough chunks wait for reuse: leave this one to the GC
		}
	}
	o := &br.out
	clear(o.Records)
	clear(o.Events)
	clear(o.Opens)
	clear(o.Progress)
	select {
	case p.free <- barrierBuffers{o.Records[:0], o.Events[:0], o.Opens[:0], o.Progress[:0]}:
	default:
	}
	o.Records, o.Events, o.Opens, o.Progress = nil, nil, nil, nil
	br.hasBufs, br.nrecs, br.appended = false, 0, 0
}

// barrierBuffers are the slices of a committed barrier, kept for reuse:
// nothing a commit gives them to keeps them (the store, the linker and
// Options.Observe copy what they keep).
type barrierBuffers struct {
	recs     [][]record.Record
	evs      []record.Event
	opens    []correlate.Open
	progress []record.Record
}

// Run applies batches from in until in is closed (its owner closes it after
// every source has stopped), then commits everything and returns. Batches
// are acknowledged after the checkpoint that covers them is durable.
//
// Run returns an error when the store fails for good (store.Permanent), and
// when ctx is cancelled while a commit is still being retried: ctx bounds a
// shutdown against a store that keeps failing. Cancelling ctx does not stop
// a healthy pipeline early; closing in does. The input of a barrier that
// was not committed is never acknowledged.
func (p *Pipeline) Run(ctx context.Context, in <-chan *source.Batch) error {
	var wg sync.WaitGroup
	for _, s := range p.shards {
		wg.Add(1)
		go func() { defer wg.Done(); s.run(p) }()
	}
	commits := make(chan *barrier, 2)
	writerErr := make(chan error, 1)
	go func() { writerErr <- p.writer(ctx, commits) }()

	ticker := time.NewTicker(p.opts.FlushInterval)
	defer ticker.Stop()
	perCheckpoint := int((p.opts.CheckpointInterval + p.opts.FlushInterval - 1) / p.opts.FlushInterval)
	ticks := 0
	pending := 0 // packets dispatched since the last commit
	pendingBytes := 0
	unacked := 0 // packets of acknowledgeable batches since the last checkpoint
	// inputNow is the latest Received time dispatched, nextTick the input
	// time of the next expiry (InputClock only).
	var inputNow, nextTick time.Time
	var acks []func() error
	var err error
	p.ready.Store(true)

	send := func(br *barrier) {
		pending, pendingBytes = 0, 0
		br.shed = p.busy != nil && p.busy()
		br.states = make(map[int][]byte)
		br.wg.Add(len(p.shards))
		for _, s := range p.shards {
			s.in <- shardMsg{barrier: br}
		}
		if br.checkpoint || p.opts.StateKey == "" {
			br.acks, acks = acks, nil
			unacked = 0
		}
		select {
		case commits <- br:
		case err = <-writerErr:
		}
	}

loop:
	for err == nil {
		select {
		case b, ok := <-in:
			if !ok {
				break loop
			}
			// Read what the dispatcher needs of the batch before the
			// shards have it: the last of them releases it to its pool,
			// and its reader fills it again.
			n, ack := len(b.Packets), b.Ack
			if p.opts.CommitBytes > 0 {
				for i := range b.Packets {
					pendingBytes += len(b.Packets[i].Data)
				}
			}
			if p.opts.InputClock {
				inputNow = latest(b, inputNow)
			}
			t := &tracked{b: b}
			t.pending.Store(int32(len(p.shards)))
			for _, s := range p.shards {
				s.in <- shardMsg{batch: t}
			}
			if ack != nil {
				acks = append(acks, ack)
				unacked += n
			}
			if p.opts.InputClock {
				if !inputNow.Before(nextTick) {
					// In every shard's queue after the batch: the same
					// input expires the same state at the same point.
					nextTick = inputNow.Truncate(inputTick).Add(inputTick)
					for _, s := range p.shards {
						s.in <- shardMsg{tick: inputNow}
					}
				}
			}
			ackDue := p.opts.AckPackets > 0 && unacked >= p.opts.AckPackets
			bytesDue := p.opts.CommitBytes > 0 && pendingBytes >= p.opts.CommitBytes
			if pending += n; pending >= p.opts.CommitPackets || ackDue || bytesDue {
				send(p.commitBarrier(time.Now(), ackDue && p.opts.StateKey != "", inputNow))
			}
		case now := <-ticker.C:
			ticks++
			send(p.commitBarrier(now, p.opts.StateKey != "" && ticks%perCheckpoint == 0, inputNow))
		case err = <-writerErr:
		}
	}
	if err == nil {
		// Input ended: one last commit, with a checkpoint (daemon) or a flush
		// of everything still open (replay).
		now := time.Now()
		if p.opts.InputClock && !inputNow.IsZero() {
			now = inputNow
		}
		send(&barrier{now: now, tick: true, checkpoint: p.opts.StateKey != "" && !p.opts.FlushOnExit, flush: p.opts.FlushOnExit})
	}
	for _, s := range p.shards {
		close(s.in)
	}
	wg.Wait()
	close(commits)
	if werr := <-writerErr; err == nil {
		err = werr
	}
	p.ready.Store(false)
	return err
}

// ShedProgressWhile makes the shards take no progress snapshots while
// busy reports true (udp.UDP.Busy: the input is behind), from one commit
// to the next: the bytes of open files then count at their next snapshot
// or their close (in a later minute of the rollups, never lost), and the
// CPU the snapshots cost (the shard, the store, the rollups) goes to the
// packets. busy is asked once a commit. Call it before Run; nil (the
// default) never sheds.
func (p *Pipeline) ShedProgressWhile(busy func() bool) { p.busy = busy }

// commitBarrier returns the barrier of a commit at wall time now. It
// expires state at now, unless time follows the input: then expiry happens
// at input ticks, and the barrier only collects what the shards made.
func (p *Pipeline) commitBarrier(now time.Time, checkpoint bool, inputNow time.Time) *barrier {
	if p.opts.InputClock {
		return &barrier{now: inputNow, checkpoint: checkpoint}
	}
	return &barrier{now: now, tick: true, checkpoint: checkpoint}
}

// latest returns the latest of t and the Received times of b's packets.
func latest(b *source.Batch, t time.Time) time.Time {
	for i := range b.Packets {
		if r := b.Packets[i].Received; r.After(t) {
			t = r
		}
	}
	return t
}

// writer commits barriers in order until commits is closed.
func (p *Pipeline) writer(ctx context.Context, commits <-chan *barrier) error {
	var failed error
	for br := range commits {
		br.wg.Wait()
		if failed != nil {
			continue // drain so the dispatcher never blocks
		}
		if err := p.commit(ctx, br); err != nil {
			failed = err
			p.ready.Store(false)
		}
		p.release(br)
	}
	return failed
}

// commit enriches (enrich.go), stores and acknowledges one barrier's
// output: append and checkpoint (write), then acknowledge. Transient
// store errors (a full disk, a busy database) are retried with backoff:
// records are never dropped and input is not acknowledged until they are
// durable. A permanent error (store.Permanent), or ctx cancelled while
// retrying, ends the commit with an error and nothing acknowledged.
func (p *Pipeline) commit(ctx context.Context, br *barrier) error {
	start := time.Now()
	if br.err != nil {
		p.log.Error("Checkpoint failed; input stays unacknowledged", "err", br.err)
		br.acks = nil
	}
	if err := p.enrich(ctx, br); err != nil {
		p.m.commitFailures.Inc()
		return err
	}
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 0; ; attempt++ {
		err := p.write(ctx, br)
		if err == nil {
			break
		}
		p.ready.Store(false)
		p.m.commitErrors.Inc()
		if store.Permanent(err) {
			p.m.commitFailures.Inc()
			return fmt.Errorf("store refused the commit of %d records and %d events for good: %w", br.nrecs, len(br.out.Events), err)
		}
		if attempt%10 == 0 {
			p.log.Warn("Store commit failed; retrying", "err", err, "records", br.nrecs, "attempt", attempt+1)
		}
		t := time.NewTimer(retry.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			p.m.commitFailures.Inc()
			return fmt.Errorf("stopped while retrying a commit of %d records and %d events (input not acknowledged): %w", br.nrecs, len(br.out.Events), err)
		case <-t.C:
		}
	}
	p.ready.Store(true)
	if p.opts.Observe != nil {
		p.opts.Observe(br.out.Records, br.out.Events, br.out.Activity)
	}
	for _, ack := range br.acks {
		if err := ack(); err != nil {
			p.m.ackErrors.Inc()
		}
	}
	p.m.commitSeconds.Observe(time.Since(start).Seconds())
	p.m.recordsCommitted.Add(float64(br.nrecs))
	// Progress snapshots count as events, as when they were stored as
	// progress events.
	p.m.eventsCommitted.Add(float64(len(br.out.Events) + len(br.out.Progress)))
	return nil
}

func (p *Pipeline) write(ctx context.Context, br *barrier) error {
	if p.store == nil {
		return nil
	}
	// One Append per chunk, the events and progress snapshots with the
	// first: a drain of many
	// chunks is never gathered into one large slice. A retried commit
	// goes on from the first chunk not yet appended (br.appended): the
	// store drops again only what an earlier process appended, and a
	// chunk appended before a later one failed (a full disk) must not be
	// appended twice.
	for br.appended < max(len(br.out.Records), 1) {
		var recs []record.Record
		if br.appended < len(br.out.Records) {
			recs = br.out.Records[br.appended]
		}
		var evs []record.Event
		var progress []record.Record
		if br.appended == 0 {
			evs, progress = br.out.Events, br.out.Progress
		}
		if err := p.store.AppendWithProgress(ctx, recs, evs, progress); err != nil {
			return fmt.Errorf("append records: %w", err)
		}
		br.appended++
	}
	for id, blob := range br.states {
		if err := p.store.PutState(ctx, p.stateKey(id), blob); err != nil {
			return fmt.Errorf("checkpoint shard %d: %w", id, err)
		}
	}
	if len(br.states) > 0 && p.opts.StateKey != "" {
		blob, _ := p.linker.MarshalBinary()
		if p.feed != nil {
			blob = joinLinkerState(blob, p.feed.RedirectFeedState())
		}
		if err := p.store.PutState(ctx, p.linkerKey(), packLinkerState(blob)); err != nil {
			return fmt.Errorf("checkpoint redirect linker: %w", err)
		}
	}
	if len(br.states) == len(p.shards) && !p.pruned {
		p.pruneStates(ctx)
	}
	return nil
}

// linkerFeedMagic starts a redirect checkpoint that holds the linker's
// state and the redirect feed's position (a cluster's).
const linkerFeedMagic = "XRDMLKFD"

// joinLinkerState returns the redirect checkpoint of linker state l and
// feed position f: both are written at once, so a restart resumes reading
// the other shards' redirects where the restored linker left off.
func joinLinkerState(l, f []byte) []byte {
	b := make([]byte, 0, len(linkerFeedMagic)+binary.MaxVarintLen64+len(l)+len(f))
	b = append(b, linkerFeedMagic...)
	b = codec.AppendBytes(b, l)
	return append(b, f...)
}

// linkerPackedMagic starts a redirect checkpoint compressed with S2: with
// redirectors reporting, the linker holds the redirects and opens of a
// few windows (megabytes of host names, users and paths that repeat),
// written at every checkpoint, to PostgreSQL too in a cluster.
const linkerPackedMagic = "XRDMLKS2"

// packLinkerState compresses a redirect checkpoint.
func packLinkerState(b []byte) []byte {
	out := make([]byte, len(linkerPackedMagic), len(linkerPackedMagic)+s2.MaxEncodedLen(len(b)))
	copy(out, linkerPackedMagic)
	z := s2.Encode(out[len(out):cap(out)], b)
	return out[:len(out)+len(z)]
}

// unpackLinkerState undoes packLinkerState; a checkpoint written before
// compression is returned as it is.
func unpackLinkerState(b []byte) ([]byte, error) {
	if !bytes.HasPrefix(b, []byte(linkerPackedMagic)) {
		return b, nil
	}
	out, err := s2.Decode(nil, b[len(linkerPackedMagic):])
	if err != nil {
		return nil, fmt.Errorf("decompress redirect checkpoint: %w", err)
	}
	return out, nil
}

// splitLinkerState splits a redirect checkpoint into the linker's state
// and the feed's position (nil: none, a collector's outside a cluster).
func splitLinkerState(b []byte) (l, f []byte) {
	if !bytes.HasPrefix(b, []byte(linkerFeedMagic)) {
		return b, nil
	}
	rest := b[len(linkerFeedMagic):]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return nil, nil // unreadable: the linker says so
	}
	return rest[k : k+int(n)], rest[k+int(n):]
}

// statePruner is a Store that can drop the checkpoints of other shard
// layouts (store.Store.PruneStates).
type statePruner interface {
	PruneStates(ctx context.Context, prefix string, keep []string) (int, error)
}

// pruneStates deletes, once every shard of this layout has checkpointed,
// the checkpoints of earlier layouts (another shard count): they are never
// restored, and the store measures the window of entries a restart may
// replay from its oldest checkpoint. Failure is only logged; the next
// checkpoint tries again.
func (p *Pipeline) pruneStates(ctx context.Context) {
	sp, ok := p.store.(statePruner)
	if !ok {
		p.pruned = true
		return
	}
	keep := make([]string, len(p.shards), len(p.shards)+1)
	for i := range keep {
		keep[i] = p.stateKey(i)
	}
	keep = append(keep, p.linkerKey())
	n, err := sp.PruneStates(ctx, p.opts.StateKey+"/", keep)
	if err != nil {
		p.log.Warn("Dropping checkpoints of another shard layout failed", "err", err)
		return
	}
	if n > 0 {
		p.log.Info("Dropped checkpoints of another shard layout", "states", n)
	}
	p.pruned = true
}

// LinkStats returns the redirect linker's counters as of the last commit.
func (p *Pipeline) LinkStats() correlate.LinkStats { return *p.linkStats.Load() }
