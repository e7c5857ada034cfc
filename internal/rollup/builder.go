package rollup

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// Store is what the builder needs of the store (store.Store).
type Store interface {
	PartReader
	Read(ctx context.Context, afterSeq int64, max int) ([]store.Entry, error)
	// AddRollupParts writes parts ahead of the CommitRollup that makes
	// them count; DropRollupPartsAfter removes those of a flush that
	// never committed (numbered above the committed state's last part).
	AddRollupParts(ctx context.Context, ps []store.RollupPart) error
	DropRollupPartsAfter(ctx context.Context, part int64) (int64, error)
	CommitRollup(ctx context.Context, c store.RollupCommit) error
}

// serverKey names a server incarnation.
type serverKey struct {
	ip   string
	stod int64
	sid  uint64
}

func serverOf(k *record.AccessKey) serverKey { return serverKey{k.ServerIP, k.ServerStod, k.ServerID} }

// bucketKey names a bucket: its width and start (Unix seconds).
type bucketKey struct{ step, start int64 }

// openAccess is what the builder counted of an access still open (from
// its progress snapshots), or, once closed, a tombstone that makes later
// progress snapshots of it count nothing.
type openAccess struct {
	read, readv, write int64
	last               int64 // Unix s of the last event
	closed             bool
}

// Parts of a bucket still open are compacted when they reach maxParts;
// a bucket over for sealGrace is compacted into one part.
const (
	maxParts  = 16
	sealGrace = 5 * time.Minute
	// A closed access's tombstone is kept this long (data time) for a
	// progress snapshot of the same commit or a replay; an open access's
	// count past the open-file TTL.
	tombstoneTTL = 10 * time.Minute
	openTTL      = 25 * time.Hour
	readBatch    = 4096
	pollInterval = 200 * time.Millisecond
	drainTimeout = 10 * time.Second
)

// Builder builds rollups from a store's log. Run it with Run; query it
// with Query and Top (safe while it runs).
//
// It is fed two ways, both through the same cursor: live, by the store's
// append listener (Feed: the entries a commit has just made durable, in
// the writer's goroutine, without reading them back), and by reading the
// log from its cursor (catching up after a start, or after a gap in what
// it was fed). An entry is applied once, in log order, either way.
type Builder struct {
	Querier // the queries, over the parts and the head
	st      Store
	log     *slog.Logger
	m       *metrics
	dims    [][]int // per spec, the indexes of its dimensions in vals
	used    []record.Dim
	copyVal []bool // per used dimension, its Dim.Part: its values are copied when kept

	// mu guards what Apply and Feed change: the head, the watermark, the
	// open accesses and the cursor. It is held for a batch of entries or
	// to swap the head out, never across I/O.
	mu        sync.Mutex
	head      head
	headBytes int64
	flushing  head  // the head being written by Flush (zero: none)
	watermark int64 // the latest data time seen (Unix s)
	cursor    int64
	restored  bool // Restore has run: Feed may apply
	// partsMu orders queries with Flush: a query reads the stored parts
	// and the heads under its read lock, Flush commits its parts and
	// forgets the flushed head under its write lock, so that a query
	// sees a flushed head either in memory or in the store, never both.
	partsMu sync.RWMutex

	open      map[record.AccessKey]openAccess
	openBytes int64
	// serverTime is the latest time seen per server incarnation: open
	// accesses expire by their own server's clock, as servers' streams
	// need not be in time order with each other in the log.
	serverTime map[serverKey]int64

	// Scratch of apply (under mu): a record read back and its dimension
	// values, and the minute and day last written.
	scratch    sample
	vals       []string
	lastMin    int64
	lastMinute *minute
	lastDay    int64
	lastDayMap map[string]*Agg
	sum        adder // sums the entries of dense minutes into their series
	dsum       adder // sums the entries kept into their days
	slab       slab  // the head's series and entries, allocated in chunks
	rawMax     int   // the most entries a minute keeps as they came (rawMax)

	// Of the flushing goroutine only.
	part   int64             // the last part number used
	ents   []byte            // a flush's encoded entries (headParts), kept for the next
	parts  map[bucketKey]int // parts stored per recent bucket
	feed   chan *feedBatch   // from Feed, to Run
	spent  chan *feedBatch   // from Run, back to Feed
	queued atomic.Int64      // bytes of the batches in feed (feedBatch.bytes)
	high   chan struct{}     // Feed to Run: the queue passed queueHigh
	busy   func() bool       // YieldTo's (nil: Run never pauses)
}

// New returns a builder over st; call Run to start it. reg registers its
// metrics (nil: not registered).
func New(cfg Config, st Store, log *slog.Logger, reg prometheus.Registerer) (*Builder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	specs, _ := cfg.specs()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	b := &Builder{Querier: Querier{cfg: cfg, specs: specs, parts: st}, st: st, log: log, m: m, head: newHead(),
		open: make(map[record.AccessKey]openAccess), parts: make(map[bucketKey]int), serverTime: make(map[serverKey]int64),
		feed: make(chan *feedBatch, feedSlots), spent: make(chan *feedBatch, feedPool), high: make(chan struct{}, 1)}
	for _, s := range specs {
		var idx []int
		for _, d := range s.Dims() {
			i := slices.Index(b.used, d)
			if i < 0 {
				i = len(b.used)
				b.used = append(b.used, d)
				b.copyVal = append(b.copyVal, d.Part())
			}
			idx = append(idx, i)
		}
		b.dims = append(b.dims, idx)
	}
	b.live = b
	b.vals = make([]string, len(b.used))
	b.sum, b.dsum = newAdder(b.specs, b.dims), newAdder(b.specs, b.dims)
	b.rawMax = rawMax
	return b, nil
}

// Restore loads the builder's state and cursor from the store and counts
// the parts of recent buckets. Run calls it; call it directly to use
// CatchUp without Run.
func (b *Builder) Restore(ctx context.Context) error {
	state, cursor, err := b.st.RollupState(ctx)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.unmarshalState(state); err != nil {
		return fmt.Errorf("rollup state: %w", err)
	}
	b.cursor = cursor
	// A flush writes its parts ahead of its commit: those of one that did
	// not commit are dropped, and the entries it held are summed again.
	if n, err := b.st.DropRollupPartsAfter(ctx, b.part); err != nil {
		return fmt.Errorf("drop rollup parts of an uncommitted flush: %w", err)
	} else if n > 0 {
		b.log.Info("Dropped the rollup parts of a flush that did not commit", "parts", n)
	}
	for _, step := range Resolutions {
		s := int64(step / time.Second)
		from := b.watermark - 2*s - int64(sealGrace/time.Second)
		n, err := b.st.RollupBuckets(ctx, s, from-from%s, b.watermark+s)
		if err != nil {
			return err
		}
		for start, k := range n {
			b.parts[bucketKey{s, start}] = k
		}
	}
	b.restored = true
	b.m.cursor.Set(float64(b.cursor))
	return nil
}

// Run builds rollups until ctx is cancelled, then flushes what it holds,
// even when ctx was cancelled before it started (a short file input can end
// before the rollups have restored): a stop waits for the restore, the
// catch-up with the log (drainTimeout at the most) and the flush. It
// catches up with the log from its cursor, then sums what the store's
// listener feeds it (Feed), reading from the log only the entries of the
// batches dropped before a fed one (fillGap), and the whole rest of it
// when that fails or no batch comes (one came before the restore, the
// input went quiet); it flushes every FlushInterval, and early when the head
// passes a third of MaxHeadBytes. While the input is behind (YieldTo) it
// pauses, for MaxYield at the most, then catches up.
func (b *Builder) Run(ctx context.Context) error {
	if err := b.Restore(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	b.log.Info("Rollups started", "cursor", b.cursor, "dimensions", len(b.specs)-1)
	lastFlush := time.Now()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	// A flush (encoding, merging the hours and days, the store's
	// transaction) runs beside the summing: the fed batches keep being
	// taken meanwhile, so that a long flush does not fill the queue.
	var flushDone chan error
	flushed := func(err error) {
		flushDone = nil
		if err != nil && ctx.Err() == nil {
			b.m.errors.Inc()
			b.log.Warn("Rollup flush failed; retrying", "err", err)
		}
	}
	behind := true
	fed := false // a batch came since the last tick
	var y yielder
	for {
		// The head is bounded: a flush starts when it passes a third of
		// MaxHeadBytes, and while that flush runs the new head may grow to
		// two thirds (a flush of a stream whose time runs fast takes longer
		// than summing a head's worth), so that both stay within
		// MaxHeadBytes. Past it nothing more is summed: the fed queue
		// fills, then drops, and those entries are read from the log later.
		full := flushDone != nil && b.headOver(2)
		// While the input is behind, nothing is read or flushed, and
		// nothing summed until the fed queue passes three quarters of its
		// bound (below).
		paused := ctx.Err() == nil && y.pause(b, time.Now())
		behind = behind || y.catching // after a pause of MaxYield: read the log to its end
		if behind && !full && !paused {
			n, err := b.readLog(ctx)
			if err != nil && ctx.Err() == nil {
				b.m.errors.Inc()
				b.log.Warn("Rollup step failed; retrying", "err", err)
			}
			behind = n == readBatch && err == nil
			if n < readBatch && err == nil {
				y.catching = false // caught up
			}
		}
		// A full head is flushed even while paused (the queue is summed
		// past three quarters of its bound): the head stays bounded, and
		// the flush costs now what it would cost later.
		if flushDone == nil && ctx.Err() == nil && (!paused && time.Since(lastFlush) >= b.cfg.FlushInterval.D() || b.headFull()) {
			lastFlush = time.Now()
			flushDone = make(chan error, 1)
			go func(done chan<- error) { done <- b.Flush(ctx) }(flushDone)
		}
		if ctx.Err() != nil {
			if flushDone != nil {
				<-flushDone
			}
			// Sum what was fed, then what reached the log before the stop
			// and was not, then flush.
			b.drainFeed()
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTimeout)
			err := b.CatchUp(fctx)
			cancel()
			return err
		}
		if behind && !full && !paused {
			continue
		}
		// While paused the fed batches wait in the queue, but a pause
		// never makes it drop: past three quarters of its bound they are
		// summed anyway (Feed wakes Run), which costs half what reading
		// them back later would.
		feed := b.feed
		if full || paused && !b.queueHigh() {
			feed = nil
		}
		select {
		case <-ctx.Done():
		case <-b.high:
		case err := <-flushDone:
			flushed(err)
		case fb := <-feed:
			behind = !b.applyFeed(fb) && !b.fillGap(ctx, fb)
			b.spend(fb)
			fed = true
		case <-t.C:
			// A fallback for a dropped batch that no later one reveals
			// (the input went quiet): read the log when nothing came or
			// waits. Not while batches come: each reveals a gap before
			// it, and the log would be read ahead of batches on their
			// way (committed, not yet fed), then skipped when they come.
			behind = behind || len(b.feed) == 0 && !fed
			fed = false
		}
	}
}

// YieldTo makes Run pause while busy reports true (udp.UDP.Busy: the
// kernel's queue of datagrams is filling), for Config.MaxYield at the most
// at a time: the CPU the rollups take goes to the input, which would
// otherwise lose datagrams, and the rollups catch up from the log after.
// After a pause of MaxYield they do not pause again until they have caught
// up, so that under an input they can never keep up with they fall behind
// by a bounded time. Call it before Run; nil: never pause.
func (b *Builder) YieldTo(busy func() bool) { b.busy = busy }

// yielder is Run's state of pausing for a busy input.
type yielder struct {
	since    time.Time // the current pause began (zero: none)
	catching bool      // a pause lasted MaxYield: no other until the log is read to its end
}

// pause reports whether Run pauses now.
func (y *yielder) pause(b *Builder, now time.Time) bool {
	if b.busy == nil || b.cfg.MaxYield <= 0 || y.catching || !b.busy() {
		y.end(b, now)
		return false
	}
	if y.since.IsZero() {
		y.since = now
		b.m.yields.Inc()
	}
	if now.Sub(y.since) >= b.cfg.MaxYield.D() {
		y.end(b, now)
		y.catching = true
		b.log.Info("Rollups paused for the input as long as they may; catching up", "max_yield", b.cfg.MaxYield)
		return false
	}
	return true
}

// end ends a pause, counting its time.
func (y *yielder) end(b *Builder, now time.Time) {
	if !y.since.IsZero() {
		b.m.yieldSeconds.Add(now.Sub(y.since).Seconds())
		y.since = time.Time{}
	}
}

// drainFeed sums the batches queued, as long as they follow the cursor.
func (b *Builder) drainFeed() {
	for {
		select {
		case fb := <-b.feed:
			ok := b.applyFeed(fb)
			b.spend(fb)
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// fillGap sums, after a fed batch was dropped, the entries between the
// cursor and fb from the log (those of the dropped batches, not more),
// then fb itself. It reports whether it did; false (fb came before the
// restore, the head is full, the log unreadable): Run reads the log
// instead, and fb's entries with it.
func (b *Builder) fillGap(ctx context.Context, fb *feedBatch) bool {
	for {
		b.mu.Lock()
		cursor, ok := b.cursor, b.restored && b.headBytes < 2*b.flushAt()
		b.mu.Unlock()
		if !ok {
			return false
		}
		gap := fb.first - 1 - cursor
		if gap <= 0 {
			return b.applyFeed(fb)
		}
		entries, err := b.st.Read(ctx, cursor, int(min(gap, readBatch)))
		if err != nil || len(entries) == 0 {
			return false
		}
		b.Apply(entries)
		b.m.readBack.Add(float64(len(entries)))
	}
}

// readLog reads and applies one batch of the log after the cursor.
func (b *Builder) readLog(ctx context.Context) (int, error) {
	b.mu.Lock()
	cursor := b.cursor
	b.mu.Unlock()
	entries, err := b.st.Read(ctx, cursor, readBatch)
	if err != nil {
		return 0, fmt.Errorf("read store: %w", err)
	}
	b.Apply(entries)
	b.m.readBack.Add(float64(len(entries)))
	return len(entries), nil
}

// headFull reports whether the head has passed flushAt: time to flush.
func (b *Builder) headFull() bool { return b.headOver(1) }

// headOver reports whether the head holds n times flushAt or more.
func (b *Builder) headOver(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.headBytes >= n*b.flushAt()
}

// flushAt is the head's size that makes a flush due: a third of
// MaxHeadBytes (see Run).
func (b *Builder) flushAt() int64 { return max(int64(b.cfg.MaxHeadBytes)/3, 1) }

// CatchUp applies the whole log after the cursor and flushes: what a
// stopped builder does to be current (tests, replay, xrdmon report on a
// store no collector runs).
func (b *Builder) CatchUp(ctx context.Context) error {
	for {
		n, err := b.readLog(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return b.Flush(ctx)
		}
		if b.headFull() {
			if err := b.Flush(ctx); err != nil {
				return err
			}
		}
	}
}

// Feed takes entries the store has just appended (store.Listener) for
// Run to sum, without their being read back: it takes of the records and
// progress snapshots (store.Entry.Progress, as they are: no decoding;
// the entries are the appender's) what the sums need (sample) and queues
// that, in the appender's goroutine, never blocking it. The queue holds
// Config.MaxQueueBytes of samples (about a second of 150,000 packets/s
// by default), and a pause never lets it overflow (Run). When it is full
// (the builder is behind: starved of CPU, or a flush outran its head),
// the batch is dropped and counted, and Run reads those entries from the
// log instead: nothing is summed twice or missed.
func (b *Builder) Feed(entries []store.Entry) {
	if len(entries) == 0 {
		return
	}
	n := 0
	for i := range entries {
		if e := &entries[i]; e.Record != nil || e.Progress != nil {
			n++
		}
	}
	nu := len(b.used)
	// The appender is the only sender: what is full stays so until Feed returns.
	if len(b.feed) == cap(b.feed) || b.queued.Load()+int64(n)*(sampleBytes+int64(nu)*stringBytes) > int64(b.cfg.MaxQueueBytes) {
		b.m.feedDropped.Inc()
		return
	}
	var fb *feedBatch
	select {
	case fb = <-b.spent:
		// A batch keeps the room it grew to: one that a large append
		// grew, taken for a small one, would hold far more bytes than
		// its entries.
		if cap(fb.items) > 2*max(n, feedRoomMin) {
			fb = &feedBatch{}
		}
	default:
		fb = &feedBatch{}
	}
	bytes := fb.grow(n, nu)
	if b.queued.Load()+bytes > int64(b.cfg.MaxQueueBytes) {
		b.m.feedDropped.Inc()
		b.spend(fb)
		return
	}
	fb.first, fb.last, fb.bytes = entries[0].Seq, entries[len(entries)-1].Seq, bytes
	if b.queued.Add(bytes); b.queueHigh() {
		select {
		case b.high <- struct{}{}:
		default:
		}
	}
	vals := fb.vals
	for i := range entries {
		e := &entries[i]
		r, progress := e.Record, false
		if r == nil {
			r, progress = e.Progress, true
		}
		if r == nil {
			continue
		}
		k := len(fb.items)
		fb.items = fb.items[:k+1]
		b.sample(&fb.items[k], r, progress, vals[k*nu:(k+1)*nu:(k+1)*nu])
		fb.items[k].seq = e.Seq
	}
	select {
	case b.feed <- fb:
	default:
		b.m.feedDropped.Inc()
		b.spend(fb)
	}
}

// feedBatch is what one append gave the rollups: entries first..last of
// the log, of which items are the records and progress snapshots (their
// dimension values in vals). Once summed (nothing keeps a sample: a kept
// entry holds its values in a slice of its own), a batch goes back to
// Feed to be filled again (spend): batches were a fifth of the bytes the
// collector allocated.
type feedBatch struct {
	first, last int64
	bytes       int64 // counted in Builder.queued: the samples and their values
	items       []sample
	vals        []string
}

// grow empties fb with room for n samples of nu values each, and returns
// the bytes it counts in the queue: the room it holds, not only what it
// will hold.
func (fb *feedBatch) grow(n, nu int) int64 {
	fb.items = slices.Grow(fb.items[:0], n)
	fb.vals = slices.Grow(fb.vals[:0], n*nu)[:n*nu]
	return fb.room()
}

// room returns the bytes of the samples and value headers fb has room for.
func (fb *feedBatch) room() int64 {
	return int64(cap(fb.items))*sampleBytes + int64(cap(fb.vals))*stringBytes
}

// queueHigh reports whether the fed queue holds three quarters of
// Config.MaxQueueBytes or more: Run sums it even while paused.
func (b *Builder) queueHigh() bool {
	return b.queued.Load() >= int64(b.cfg.MaxQueueBytes)/4*3
}

// spend gives fb, summed or not needed, back to Feed. Its values are
// cleared: they would keep their records' strings.
func (b *Builder) spend(fb *feedBatch) {
	b.queued.Add(-fb.bytes)
	fb.bytes = 0
	clear(fb.vals)
	select {
	case b.spent <- fb:
	default:
	}
}

// sample is what the sums take of a record or a progress snapshot: its
// time, access and bytes, and the values of the builder's dimensions
// (strings of the record, shared, not copied); of a record also its
// duration, reason and identity. A fed batch holds these, not whole
// records: about a third of their bytes.
type sample struct {
	seq                int64 // the entry's, in a fed batch
	progress           bool
	end                int64 // Unix seconds
	key                record.AccessKey
	read, readv, write int64
	ms                 int64 // the record's duration, 0 without a start
	reason             int   // reasonIndex
	identity           string
	vals               []string // by Builder.used
}

// sample sets s from r, a record or (progress) a progress snapshot, with
// vals (len(b.used)) to hold its dimension values. It reads only what New
// set: Feed calls it in the appender's goroutine.
func (b *Builder) sample(s *sample, r *record.Record, progress bool, vals []string) {
	*s = sample{progress: progress, end: r.End.Unix(), key: r.Access(),
		read: r.ReadBytes, readv: r.ReadvBytes, write: r.WriteBytes, vals: vals}
	r.DimsInto(vals, b.used)
	if progress {
		return
	}
	if !r.Start.IsZero() { // a record without an open has no duration
		s.ms = max(r.End.Sub(r.Start).Milliseconds(), 0)
	}
	s.reason = reasonIndex(r.Reason)
	s.identity = r.Dim(record.DimIdentity)
}

// The fed queue is bounded in bytes (Config.MaxQueueBytes): a batch
// counts the room it holds, sampleBytes a sample and a string header per
// dimension value (~300 bytes with the default dimensions; the strings
// are the records', shared), and a summed batch with room for more than
// 2 × feedRoomMin samples is filled again only by an append that needs
// at least half its room. A batch is at most a record chunk (1,024
// records). feedSlots bounds the
// batches queued however small (a few records each when the input is
// slow); feedPool bounds the summed batches kept to be filled again.
const (
	sampleBytes = int64(unsafe.Sizeof(sample{}))
	stringBytes = int64(unsafe.Sizeof(""))
	feedSlots   = 1024
	feedPool    = 32
	feedRoomMin = 64 // a batch with room for twice this is reused for any append
)

// applyFeed sums fb if it follows the cursor and reports whether it did
// (false: entries before it are missing, read the log).
func (b *Builder) applyFeed(fb *feedBatch) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.restored || fb.first > b.cursor+1 {
		return false
	}
	for i := range fb.items {
		if it := &fb.items[i]; it.seq > b.cursor {
			b.applySample(it)
		}
	}
	b.cursor = max(b.cursor, fb.last)
	b.m.cursor.Set(float64(b.cursor))
	b.m.headBytes.Set(float64(b.headBytes))
	return true
}

// Apply adds log entries to the head and moves the cursor past them;
// entries at or before the cursor are skipped (already applied).
func (b *Builder) Apply(entries []store.Entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.applyLocked(entries)
}

func (b *Builder) applyLocked(entries []store.Entry) {
	for i := range entries {
		e := &entries[i]
		if e.Seq <= b.cursor {
			continue
		}
		switch {
		case e.Record != nil:
			b.applyRecord(e.Record)
		case e.Progress != nil:
			b.sample(&b.scratch, e.Progress, true, b.vals)
			b.applySample(&b.scratch)
		}
		b.cursor = e.Seq
	}
	b.m.cursor.Set(float64(b.cursor))
	b.m.headBytes.Set(float64(b.headBytes))
}

// delta is what one record or progress snapshot adds to each of its series.
type delta struct {
	read, readv, write int64
	closed             bool // a record: counts a transfer, a user, its duration and size
	reason             int  // reasonIndex (-1: complete)
	user               uint32
	ms                 int64
	dur, size          int16
}

// applySample sums s, a record or a progress snapshot.
func (b *Builder) applySample(s *sample) {
	if s.progress {
		b.applyProgress(s)
	} else {
		b.applyClosed(s)
	}
}

func (b *Builder) applyProgress(p *sample) {
	t := p.end
	k := p.key
	b.seen(&k, t)
	o, ok := b.open[k]
	if !ok {
		if b.openBytes >= int64(b.cfg.MaxOpenBytes) {
			b.m.openEvicted.Inc() // its bytes count at its close
			return
		}
		b.openBytes += openSize(&k)
	}
	if o.closed {
		return
	}
	d := delta{read: max(0, p.read-o.read), readv: max(0, p.readv-o.readv), write: max(0, p.write-o.write)}
	o.read, o.readv, o.write = max(o.read, p.read), max(o.readv, p.readv), max(o.write, p.write)
	o.last = max(o.last, t)
	b.open[k] = o
	if d.read+d.readv+d.write == 0 {
		return
	}
	b.add(t, p, &d)
	b.m.progress.Inc()
}

// applyRecord sums record r (the log's, read back).
func (b *Builder) applyRecord(r *record.Record) {
	b.sample(&b.scratch, r, false, b.vals)
	b.applyClosed(&b.scratch)
}

// applyClosed sums r, a record's sample.
func (b *Builder) applyClosed(r *sample) {
	t := r.end
	k := r.key
	b.seen(&k, t)
	counted, ok := b.open[k]
	if counted.closed {
		return // the same access twice (the store drops duplicates; be safe)
	}
	if ok {
		// Its progress snapshots counted bytes: a tombstone makes any
		// that a replayed log repeats count nothing. An access without
		// one needs none: the log holds a file's snapshots before its
		// record, never after (correlate.Output.Progress), so most
		// records cost the table nothing.
		b.open[k] = openAccess{closed: true, last: t}
	}
	d := delta{
		read: max(0, r.read-counted.read), readv: max(0, r.readv-counted.readv), write: max(0, r.write-counted.write),
		closed: true, reason: r.reason, user: hashIdentity(r.identity), ms: r.ms,
	}
	d.dur = histIndex(float64(d.ms))
	d.size = histIndex(float64(r.read + r.readv + r.write))
	b.add(t, r, &d)
	b.m.records.Inc()
}

// seen notes that k's server was at time t.
func (b *Builder) seen(k *record.AccessKey, t int64) {
	sk := serverOf(k)
	if cur, ok := b.serverTime[sk]; !ok || t > cur {
		b.serverTime[sk] = t
	}
}

func openSize(k *record.AccessKey) int64 { return int64(96 + len(k.ServerIP)) }

// slab allocates the head's series in chunks: a record of a busy minute
// (or of a stream whose time runs fast) makes several new series, and an
// allocation each for the key, the sums, the users and the two
// distributions would cost more than summing the record. A key chunk is
// never reused: a query's copy of a series keeps its key. The chunks of
// sums, users and buckets are, once nothing uses their series (recycle:
// a flushed head, the hours a flush merged), so that a stream whose time
// runs fast, which fills a head at every flush, does not make the GC
// collect a head's worth of chunks each time.
type slab struct {
	aggs  []Agg
	keys  []byte
	users []uint32 // room not yet given out
	hists []hbucket
	mins  []minute
	raws  []rawEntry
	strs  []string
	// used lists the chunks given out so far, free those of a flushed
	// head, to be filled before new ones are made.
	used, free chunks
}

// chunks are the chunks of a slab but its keys.
type chunks struct {
	aggs  [][]Agg
	users [][]uint32
	hists [][]hbucket
	mins  [][]minute
	raws  [][]rawEntry
	strs  [][]string
}

const (
	slabAggs  = 256
	slabBytes = 64 << 10
	// A new series has room for slabUsers users and slabBuckets buckets
	// of each distribution: most series of a minute hold a record or two
	// (a user's, a directory's), and room is head bytes that a flush
	// writes early for. A series that outgrows its room gets twice as
	// much, from the slab too (room).
	slabUsers   = 4
	slabBuckets = 2
	slabRoom    = 4096 // users or buckets of a chunk of room
	// A sparse minute has room for slabRaw entries, then twice as many.
	slabRaw = 8
)

// agg returns a new series' sums with room for nu users and nb buckets of
// each distribution.
func (s *slab) agg(nu, nb int) *Agg {
	if len(s.aggs) == cap(s.aggs) {
		s.aggs = newChunk(&s.used.aggs, &s.free.aggs, slabAggs)
	}
	s.aggs = s.aggs[:len(s.aggs)+1]
	a := &s.aggs[len(s.aggs)-1]
	a.Users.small = s.userRoom(nu)
	a.Duration.b = s.histRoom(nb)
	a.Size.b = s.histRoom(nb)
	return a
}

func (s *slab) userRoom(n int) []uint32  { return cut(&s.users, &s.used.users, &s.free.users, n) }
func (s *slab) histRoom(n int) []hbucket { return cut(&s.hists, &s.used.hists, &s.free.hists, n) }
func (s *slab) rawRoom(n int) []rawEntry { return cut(&s.raws, &s.used.raws, &s.free.raws, n) }

// minute returns a new minute of the head.
func (s *slab) minute() *minute {
	if len(s.mins) == cap(s.mins) {
		s.mins = newChunk(&s.used.mins, &s.free.mins, slabAggs)
	}
	s.mins = s.mins[:len(s.mins)+1]
	return &s.mins[len(s.mins)-1]
}

// strings returns a slice of the slab holding vals, and the bytes they
// take. The values of the dimensions part marks (record.Dim.Part: a
// directory of its record's path) are copied into the slab, not to keep
// the whole string of their record alive; the others are their records'
// own strings, shared, and counted as the copies are (the head keeps
// them alive).
func (s *slab) strings(vals []string, part []bool) ([]string, int64) {
	out := cut(&s.strs, &s.used.strs, &s.free.strs, len(vals))[:len(vals)]
	n := int64(len(vals)) * int64(unsafe.Sizeof(""))
	for i, v := range vals {
		if v == "" {
			continue
		}
		if part[i] {
			v = s.str(v)
		}
		out[i] = v
		n += int64(len(v))
	}
	return out, n
}

// recycle gives s the chunks of olds, whose series nothing uses any more,
// to fill before making new ones. The chunks s was given before and has
// not used are let go: s keeps at most what olds took.
func (s *slab) recycle(olds ...*slab) {
	var f chunks
	for _, o := range olds {
		f.aggs = append(f.aggs, o.used.aggs...)
		f.users = append(f.users, o.used.users...)
		f.hists = append(f.hists, o.used.hists...)
		f.mins = append(f.mins, o.used.mins...)
		f.raws = append(f.raws, o.used.raws...)
		f.strs = append(f.strs, o.used.strs...)
		o.used = chunks{}
	}
	s.free = f
}

// newChunk returns an empty chunk of n items, noted in used: the last of
// free (cleared, as a new one is), else a new one.
func newChunk[T any](used, free *[][]T, n int) []T {
	var c []T
	if k := len(*free); k > 0 {
		c = (*free)[k-1][:0]
		(*free)[k-1] = nil
		*free = (*free)[:k-1]
		clear(c[:cap(c)])
	} else {
		c = make([]T, 0, n)
	}
	*used = append(*used, c)
	return c
}

// cut returns an empty slice with room for n items, cut from *chunk (a
// new chunk of slabRoom, noted in used, when it has not that much left;
// more than an eighth of a chunk gets an array of its own): a full slice
// grows by copying (room), never into its neighbour.
func cut[T any](chunk *[]T, used, free *[][]T, n int) []T {
	if n > slabRoom/8 {
		return make([]T, 0, n)
	}
	if cap(*chunk)-len(*chunk) < n {
		*chunk = newChunk(used, free, slabRoom)
	}
	k := len(*chunk)
	*chunk = (*chunk)[:k+n]
	return (*chunk)[k : k : k+n]
}

// room makes sure that a can count one more user and one more bucket of
// each distribution without allocating: a full set gets twice the room,
// from the slab.
func (s *slab) room(a *Agg) {
	if u := a.Users.small; len(u) == cap(u) && a.Users.hll == nil && len(u) < smallUsers {
		a.Users.small = append(s.userRoom(min(max(2*len(u), slabUsers), smallUsers)), u...)
	}
	if h := a.Duration.b; len(h) == cap(h) {
		a.Duration.b = append(s.histRoom(max(2*len(h), slabBuckets)), h...)
	}
	if h := a.Size.b; len(h) == cap(h) {
		a.Size.b = append(s.histRoom(max(2*len(h), slabBuckets)), h...)
	}
}

// merge adds src to dst, first giving dst from the slab the room the sum
// may need (twice what it holds, as append grows), so that merging the
// minutes of a flush into its hours allocates chunks, not sets.
func (s *slab) merge(dst, src *Agg) {
	if u := dst.Users.small; dst.Users.hll == nil && src.Users.hll == nil {
		if n := len(u) + len(src.Users.small); n > cap(u) && n <= smallUsers {
			dst.Users.small = append(s.userRoom(min(max(n, 2*len(u)), smallUsers)), u...)
		}
	}
	s.fit(&dst.Duration, len(src.Duration.b))
	s.fit(&dst.Size, len(src.Size.b))
	dst.Merge(src)
}

// fit makes sure that h has room for n more buckets (twice what it holds
// at least), from the slab.
func (s *slab) fit(h *Hist, n int) {
	if need := len(h.b) + n; need > cap(h.b) {
		h.b = append(s.histRoom(max(need, 2*len(h.b))), h.b...)
	}
}

// clone returns a copy of a in the slab.
func (s *slab) clone(a *Agg) *Agg {
	c := s.agg(max(len(a.Users.small), slabUsers), max(len(a.Duration.b), len(a.Size.b), slabBuckets))
	users := c.Users.small
	dur, size := c.Duration.b, c.Size.b
	*c = Agg{ReadBytes: a.ReadBytes, ReadvBytes: a.ReadvBytes, WriteBytes: a.WriteBytes, Transfers: a.Transfers,
		Partial: a.Partial, PartialBy: a.PartialBy, DurationMS: a.DurationMS}
	c.Users.small = append(users, a.Users.small...)
	if a.Users.hll != nil {
		c.Users.small = nil
		c.Users.hll = a.Users.hll.Clone()
	}
	c.Duration.b, c.Duration.has = append(dur, a.Duration.b...), a.Duration.has
	c.Size.b, c.Size.has = append(size, a.Size.b...), a.Size.has
	return c
}

// key returns k as a string in the slab's bytes.
func (s *slab) key(k []byte) string { return s.str(unsafe.String(unsafe.SliceData(k), len(k))) }

// str returns a copy of v in the slab's bytes.
func (s *slab) str(v string) string {
	if len(v) > slabBytes/8 {
		return strings.Clone(v)
	}
	if len(s.keys)+len(v) > cap(s.keys) {
		s.keys = make([]byte, 0, slabBytes)
	}
	n := len(s.keys)
	s.keys = append(s.keys, v...)
	return unsafe.String(&s.keys[n], len(v)) // bytes never written again
}

// mod is t mod s, non-negative for times before 1970 too.
func mod(t, s int64) int64 {
	m := t % s
	if m < 0 {
		m += s
	}
	return m
}

// Flush writes the head as parts, compacts the buckets that are over or
// hold too many parts, expires old buckets, and saves the state and cursor,
// all in one transaction. The head is swapped out at once: what is fed
// meanwhile goes to a new head, and queries see the flushed one until its
// parts are committed.
func (b *Builder) Flush(ctx context.Context) error {
	start := time.Now()
	b.mu.Lock()
	h, wm := b.head, b.watermark
	b.head, b.headBytes, b.flushing = newHead(), 0, h
	b.forget()
	flushed := b.slab // the flushed head keeps its chunks until it is written
	b.slab = slab{free: flushed.free}
	b.expireOpen(wm)
	cursor, open := b.cursor, b.marshalOpen()
	b.mu.Unlock()

	// Off the lock: encoding (and merging the minutes of a stream whose
	// time runs fast) is the flush's work.
	var hours slab
	add, added := b.headParts(h, b.part, &hours, wm)
	part := b.part
	for _, n := range added {
		part += int64(n)
	}
	c := store.RollupCommit{Cursor: cursor, Expire: make(map[int64]int64), State: stateWith(part, wm, open), Add: add}
	c.Meta = b.marshalMeta(wm)
	compacted, err := b.compactions(ctx, added, wm)
	if err == nil {
		c.Compacted = compacted
		for _, step := range Resolutions {
			if s := int64(step / time.Second); b.cfg.retention(step) > 0 {
				c.Expire[s] = b.expiredBefore(s, wm)
			}
		}
		b.partsMu.Lock()
		err = b.writeParts(ctx, c.Add)
		if err == nil {
			c.Add = nil
			err = b.st.CommitRollup(ctx, c)
		}
		if err != nil { // parts written ahead would count twice with the next flush's
			if _, derr := b.st.DropRollupPartsAfter(context.WithoutCancel(ctx), b.part); derr != nil {
				b.log.Warn("Dropping the parts of a failed rollup flush failed; a restart drops them", "err", derr)
			}
		}
		b.mu.Lock()
		if err != nil {
			b.mergeBack(h) // written by a later flush, with its cursor
		} else {
			b.slab.recycle(&flushed, &hours) // written, and queries read the store now
		}
		b.flushing = head{}
		b.mu.Unlock()
		b.partsMu.Unlock()
	} else {
		b.mu.Lock()
		b.mergeBack(h)
		b.flushing = head{}
		b.mu.Unlock()
	}
	if err != nil {
		return err
	}
	b.part = part
	for bk, n := range added {
		b.parts[bk] += n
	}
	for _, p := range compacted {
		b.parts[bucketKey{p.Step, p.Start}] = 1
	}
	for bk, n := range b.parts {
		if bk.start+bk.step+int64(sealGrace/time.Second) < wm && n <= 1 || bk.start < b.expiredBefore(bk.step, wm) {
			delete(b.parts, bk)
		}
	}
	b.m.flushes.Inc()
	b.m.flushSeconds.Observe(time.Since(start).Seconds())
	b.m.headBytes.Set(0)
	return nil
}

// partsPerTx bounds the parts of one of a flush's transactions: the
// store's appends wait for each, not for the whole flush.
const partsPerTx = 2048

// writeParts writes ps ahead of the flush's commit, partsPerTx a
// transaction.
func (b *Builder) writeParts(ctx context.Context, ps []store.RollupPart) error {
	for len(ps) > 0 {
		n := min(len(ps), partsPerTx)
		if err := b.st.AddRollupParts(ctx, ps[:n]); err != nil {
			return err
		}
		ps = ps[n:]
	}
	return nil
}

// sortedBuckets returns the keys of m by width, then start.
func sortedBuckets[V any](m map[bucketKey]V) []bucketKey {
	out := make([]bucketKey, 0, len(m))
	for bk := range m {
		out = append(out, bk)
	}
	slices.SortFunc(out, func(a, b bucketKey) int {
		return cmp.Or(cmp.Compare(a.step, b.step), cmp.Compare(a.start, b.start))
	})
	return out
}

// compactions merges the parts of the buckets that are over (sealGrace
// past their end) or that reach maxParts with this flush's, but not those
// the flush's commit deletes (expiredBefore).
func (b *Builder) compactions(ctx context.Context, added map[bucketKey]int, wm int64) ([]store.RollupPart, error) {
	var out []store.RollupPart
	for _, bk := range sortedBuckets(b.parts) {
		n := b.parts[bk] + added[bk]
		sealed := bk.start+bk.step+int64(sealGrace/time.Second) < wm
		if added[bk] > 0 || n <= 1 || (!sealed && n < maxParts) || bk.start < b.expiredBefore(bk.step, wm) {
			continue // a bucket written by this flush is compacted by a later one
		}
		m := make(map[string]*Agg)
		var last int64
		err := b.st.RollupParts(ctx, bk.step, bk.start, bk.start+1, store.AllSpecs, func(p store.RollupPart) error {
			last = max(last, p.Part)
			return mergePart(m, p.Data, "")
		})
		if err != nil {
			return nil, fmt.Errorf("compact rollup bucket %d/%d: %w", bk.step, bk.start, err)
		}
		out = append(out, rows(bk.step, bk.start, last, encodeParts(m))...)
		b.m.compactions.Inc()
	}
	return out, nil
}

// expiredBefore returns the start before which retention deletes the
// buckets of width step (seconds) at watermark wm; math.MinInt64 when they
// are kept forever.
func (b *Builder) expiredBefore(step, wm int64) int64 {
	if ret := b.cfg.retention(time.Duration(step) * time.Second); ret > 0 {
		return wm - int64(ret/time.Second)
	}
	return math.MinInt64
}

// expireOpen forgets tombstones and open accesses long past by their
// server's clock, and servers not heard of for the open TTL.
func (b *Builder) expireOpen(wm int64) {
	for k, o := range b.open {
		ttl := openTTL
		if o.closed {
			ttl = tombstoneTTL
		}
		if o.last+int64(ttl/time.Second) < b.serverTime[serverOf(&k)] {
			delete(b.open, k)
			b.openBytes -= openSize(&k)
		}
	}
	for sk, t := range b.serverTime {
		if t+int64(openTTL/time.Second) < wm {
			delete(b.serverTime, sk)
		}
	}
	b.m.openBytes.Set(float64(b.openBytes))
}

// State encoding: byte version (1), varint part, varint watermark,
// uvarint n, n × (uvarint len, server ip, varint stod, uvarint sid,
// uvarint file id, varint start, varint read, readv, write, last, byte closed).

// stateWith returns the state of part and wm with the open accesses
// marshalled by marshalOpen.
func stateWith(part, wm int64, open []byte) []byte {
	out := []byte{1}
	out = binary.AppendVarint(out, part)
	out = binary.AppendVarint(out, wm)
	return append(out, open...)
}

// marshalOpen returns the open accesses of the state. Call with mu held.
func (b *Builder) marshalOpen() []byte {
	var out []byte
	out = binary.AppendUvarint(out, uint64(len(b.open)))
	for k, o := range b.open {
		out = codec.AppendString(out, k.ServerIP)
		out = binary.AppendVarint(out, k.ServerStod)
		out = binary.AppendUvarint(out, k.ServerID)
		out = binary.AppendUvarint(out, uint64(k.FileID))
		out = binary.AppendVarint(out, k.Start)
		for _, v := range []int64{o.read, o.readv, o.write, o.last} {
			out = binary.AppendVarint(out, v)
		}
		closed := byte(0)
		if o.closed {
			closed = 1
		}
		out = append(out, closed)
	}
	return out
}

func (b *Builder) unmarshalState(state []byte) error {
	if len(state) == 0 {
		return nil
	}
	d := decoder{Dec: codec.NewDec(state)}
	if v := d.Byte(); v != 1 {
		return fmt.Errorf("%w: state version %d", errCorrupt, v)
	}
	b.part = d.Varint()
	b.watermark = d.Varint()
	n := d.Count(10)
	for range n {
		var k record.AccessKey
		k.ServerIP = string(d.Bytes(d.Count(1)))
		k.ServerStod = d.Varint()
		k.ServerID = d.Uvarint()
		k.FileID = uint32(d.Uvarint())
		k.Start = d.Varint()
		o := openAccess{read: d.Varint(), readv: d.Varint(), write: d.Varint(), last: d.Varint()}
		o.closed = d.Byte() == 1
		if d.Err() != nil {
			return d.Err()
		}
		b.open[k] = o
		b.openBytes += openSize(&k)
		b.seen(&k, o.last)
	}
	return d.Err()
}
