// Package deliver is the delivery loop every durable sink runs: it reads the
// store's log from the sink's cursor, hands each batch to a Deliverer (the
// destination: a broker, a database, a file), and moves the cursor only
// after the Deliverer has returned nil, that is after the destination has
// confirmed the whole batch. Failures are retried forever with exponential
// backoff and jitter, so an outage delays delivery and loses nothing; each
// outage is logged once (Warn) and its end once (Info). When Run's context
// is cancelled, the loop keeps delivering the backlog for up to
// Options.DrainTimeout before it returns.
//
// Delivery is at least once: a batch that failed part-way, or whose cursor
// update was lost, is delivered again, so a Deliverer (or its destination)
// must tolerate duplicates.
//
// # Refused entries
//
// An outage is retried; a refusal is not. When a Deliverer says the
// destination refused the batch for what is in it (an error wrapping
// ErrRefused: a PostgreSQL data error, a message the broker rejected), the
// loop isolates the culprits by splitting the batch in halves and
// delivering each alone, down to single entries. The good entries go
// through; each refused one is set aside in the store's dead letters with
// the destination's reason (store.PutDeadLetter), counted in
// xrdmon_sink_dead_letters_total and logged (at most once a minute per
// sink), and the cursor moves past it. A bad row costs about 2·log2(batch)
// extra deliveries and never stops the sink.
package deliver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/backoff"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/units"
)

// ErrRefused marks a Deliverer's error as a refusal: the destination
// rejected something in the batch and will reject it again, whatever the
// moment. Wrap it (fmt.Errorf("...: %w: %w", deliver.ErrRefused, err)) so
// the loop isolates and sets aside the refused entries instead of retrying.
var ErrRefused = errors.New("refused by the destination")

// Deliverer writes batches to a sink's destination.
type Deliverer interface {
	// Deliver writes batch, all or nothing as far as the caller knows: it
	// returns nil only when the destination has durably accepted every
	// entry, and otherwise an error, after which the whole batch is
	// delivered again. It is called by one goroutine at a time and must
	// not keep batch after it returns. It should return soon after ctx is
	// cancelled.
	Deliver(ctx context.Context, batch []store.Entry) error
}

// Pipeliner is a Deliverer that can have several batches in flight: Send
// hands batch to the destination without waiting for its confirmation,
// and the returned wait blocks until the destination has durably accepted
// every entry of it (nil) or not (an error). The Loop calls the waits in
// the order of the Sends, keeps batch untouched until its wait has
// returned, and, after any Send or wait failed, abandons the waits still
// pending (never calls them) and sends again from the last confirmed
// batch: a Pipeliner must start afresh (e.g. on a new connection) after
// it reported a failure. Send and the waits are called by one goroutine.
type Pipeliner interface {
	Deliverer
	Send(ctx context.Context, batch []store.Entry) (wait func(context.Context) error, err error)
}

// Options tune a Loop. Start from DefaultOptions, or fill the zero fields
// with WithDefaults.
type Options struct {
	// Name is the sink's cursor name in the store and its metric label.
	Name string
	// BatchSize is the most log entries handed to one Deliver call.
	BatchSize int
	// InFlight is the most batches sent to a Pipeliner and not yet
	// confirmed (1: each batch is confirmed before the next is sent).
	// Plain Deliverers always have one.
	InFlight int
	// PollInterval is how often the store is read when nothing is new and
	// no append was signalled (store.Appended wakes the loop at once; the
	// interval is a fallback).
	PollInterval time.Duration
	// MinBackoff and MaxBackoff bound the exponential retry delay.
	MinBackoff, MaxBackoff time.Duration
	// DrainTimeout bounds the delivery of the backlog after Run's context
	// is cancelled.
	DrainTimeout time.Duration
}

// DefaultOptions returns the defaults: no name (New requires one), 1000
// entries per batch, 2 batches in flight (for a Pipeliner), a read every
// second at most when no append wakes the loop, backoff from 200 ms to 30 s,
// 10 s drain.
func DefaultOptions() Options {
	return Options{
		BatchSize:    1000,
		InFlight:     2,
		PollInterval: time.Second,
		MinBackoff:   200 * time.Millisecond,
		MaxBackoff:   30 * time.Second,
		DrainTimeout: 10 * time.Second,
	}
}

// WithDefaults returns o with every unset or invalid field taken from d: an
// empty name, non-positive sizes and durations, and a MaxBackoff below
// MinBackoff (which becomes the larger of d.MaxBackoff and MinBackoff).
func (o Options) WithDefaults(d Options) Options {
	if o.Name == "" {
		o.Name = d.Name
	}
	units.Default(&o.BatchSize, d.BatchSize)
	units.Default(&o.InFlight, max(d.InFlight, 1))
	units.Default(&o.PollInterval, d.PollInterval)
	units.Default(&o.MinBackoff, d.MinBackoff)
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(d.MaxBackoff, o.MinBackoff)
	}
	units.Default(&o.DrainTimeout, d.DrainTimeout)
	return o
}

// Loop delivers a store's log to one Deliverer. Create it with New and call
// Run once.
type Loop struct {
	o   Options
	st  *store.Store
	d   Deliverer
	log *slog.Logger
	m   *metrics

	// outage state, for one Warn per outage and one Info on recovery
	down      bool
	downSince time.Time
	attempts  int
	backoff   backoff.Backoff // delays between the attempts of an outage

	lastDeadLog  time.Time // dead letters are logged at most once a minute
	deadUnlogged int       // set aside since the last log
}

// New returns a loop delivering the log of st to d from the cursor named
// opts.Name; unset options take DefaultOptions. It registers the metrics
// xrdmon_sink_delivered_total, xrdmon_sink_errors_total and
// xrdmon_sink_batch_duration_seconds, labelled sink=opts.Name, on reg (nil:
// not registered); the vectors are shared by all loops registered on the
// same reg. A nil log discards. The backlog gauge
// (xrdmon_sink_backlog_records) is the store's.
func New(st *store.Store, d Deliverer, opts Options, log *slog.Logger, reg prometheus.Registerer) (*Loop, error) {
	if st == nil {
		return nil, errors.New("new delivery loop: nil store")
	}
	if d == nil {
		return nil, errors.New("new delivery loop: nil deliverer")
	}
	opts = opts.WithDefaults(DefaultOptions())
	if opts.Name == "" {
		return nil, errors.New("new delivery loop: empty name")
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := newMetrics(reg, opts.Name)
	if err != nil {
		return nil, fmt.Errorf("new delivery loop %s: %w", opts.Name, err)
	}
	return &Loop{o: opts, st: st, d: d, log: log, m: m,
		backoff: backoff.Backoff{Min: opts.MinBackoff, Max: opts.MaxBackoff}}, nil
}

// Name returns the loop's cursor name.
func (l *Loop) Name() string { return l.o.Name }

type readResult struct {
	after   int64 // the Seq the read started after
	entries []store.Entry
	err     error
}

// flight is a batch sent and not yet confirmed.
type flight struct {
	last  int64 // Seq of its last entry
	n     int
	start time.Time
	wait  func(context.Context) error
}

// Run delivers until ctx is cancelled, then delivers what it can of the
// backlog within Options.DrainTimeout and returns nil, even when ctx was
// cancelled before it started (a short file input can end first). Outages
// are retried forever, refusals set aside (see the package comment); Run
// returns an error only when it cannot start (the cursor cannot be read or
// registered). A sink whose cursor is not yet in the store is registered
// at once, so that retention keeps what it has not delivered.
//
// With a Pipeliner, up to Options.InFlight batches are sent before the
// oldest is awaited; the cursor moves batch by batch, in order, and only
// past batches whose wait returned nil. A failure abandons every batch in
// flight and resumes, after the backoff, from the cursor.
func (l *Loop) Run(ctx context.Context) error {
	cursor, err := l.register(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	l.log.Info("Sink started", "sink", l.o.Name, "cursor", cursor)
	r := l.newRun(ctx, cursor)
	defer r.close()
	for {
		if !r.draining && ctx.Err() != nil {
			r.startDrain()
		}
		if r.draining && r.dctx.Err() != nil {
			l.stopped(r.cursor, "drain timeout")
			return nil
		}
		if len(r.inflight) < r.depth {
			switch r.sendNext() {
			case stepStop:
				return nil
			case stepAgain:
				continue
			}
		}
		if r.completeOldest() {
			return nil
		}
	}
}

// register reads the sink's cursor, and registers it in the store if it
// is not there yet.
func (l *Loop) register(ctx context.Context) (int64, error) {
	cursor, err := l.st.Cursor(ctx, l.o.Name)
	if err != nil {
		return 0, fmt.Errorf("read cursor: %w", err)
	}
	if _, ok := l.st.Sinks()[l.o.Name]; !ok {
		if err := l.st.SetCursor(ctx, l.o.Name, cursor); err != nil {
			return 0, fmt.Errorf("register cursor: %w", err)
		}
	}
	return cursor, nil
}

// runState is the state of one Run: where delivery stands and what is in
// flight.
type runState struct {
	l     *Loop
	pl    Pipeliner // l.d, if it is one
	depth int       // the most batches in flight

	ctx         context.Context // Run's
	dctx        context.Context // the context deliveries run under; replaced when draining
	cancelDrain context.CancelFunc
	draining    bool

	cursor   int64 // the Seq confirmed and saved
	readPos  int64 // the Seq the next batch is read after
	inflight []flight
	next     chan readResult // prefetch of the batch after readPos
}

// What the delivery loop does after sendNext.
type stepResult int

const (
	stepOn    stepResult = iota // complete the oldest batch in flight
	stepAgain                   // start the next round
	stepStop                    // Run returns
)

func (l *Loop) newRun(ctx context.Context, cursor int64) *runState {
	r := &runState{l: l, depth: 1, ctx: ctx, dctx: ctx, cancelDrain: func() {}, cursor: cursor, readPos: cursor}
	if pl, ok := l.d.(Pipeliner); ok {
		r.pl, r.depth = pl, l.o.InFlight
	}
	return r
}

// close ends the drain's context and waits for the prefetch, if any.
func (r *runState) close() {
	r.cancelDrain()
	if r.next != nil {
		<-r.next
	}
}

// startDrain gives the deliveries DrainTimeout from now, whatever Run's
// context.
func (r *runState) startDrain() {
	r.draining = true
	r.dctx, r.cancelDrain = context.WithTimeout(context.WithoutCancel(r.ctx), r.l.o.DrainTimeout)
}

// sendNext reads the batch after readPos and sends it. With nothing new
// and nothing in flight it waits a poll interval, or ends Run when
// draining.
func (r *runState) sendNext() stepResult {
	wake := r.l.st.Appended() // before the read: an append after it wakes the wait
	batch, err := r.read()
	if err != nil {
		return r.failedStep(fmt.Errorf("read store: %w", err), "store unreadable")
	}
	if len(batch) == 0 {
		switch {
		case len(r.inflight) > 0:
			return stepOn
		case r.draining:
			r.l.stopped(r.cursor, "backlog delivered")
			return stepStop
		}
		r.poll(wake)
		return stepAgain
	}
	last := batch[len(batch)-1].Seq
	if len(batch) == r.l.o.BatchSize {
		// More is likely waiting: read it while this batch is delivered.
		r.prefetch(last)
	}
	if err := r.send(external(batch), last); err != nil {
		return r.failedStep(err, "destination unavailable")
	}
	if len(r.inflight) < r.depth {
		return stepAgain
	}
	return stepOn
}

// read returns the batch after readPos: the prefetched one if it is that
// batch and was read without error, else one read now.
func (r *runState) read() ([]store.Entry, error) {
	if r.next != nil {
		res := <-r.next
		r.next = nil
		if res.after == r.readPos && res.err == nil {
			return res.entries, nil
		}
	}
	// A failed or stale prefetch may have run under the context cancelled
	// since: read again under dctx.
	return r.l.st.Read(r.dctx, r.readPos, r.l.o.BatchSize)
}

// prefetch starts reading the batch after Seq after.
func (r *runState) prefetch(after int64) {
	next := make(chan readResult, 1)
	r.next = next
	go func(ctx context.Context) {
		e, err := r.l.st.Read(ctx, after, r.l.o.BatchSize)
		next <- readResult{after, e, err}
	}(r.dctx)
}

// send sends batch, whose last log entry is last (a batch of internal
// entries only is empty: nothing is sent), and puts it in flight.
func (r *runState) send(batch []store.Entry, last int64) error {
	f := flight{last: last, n: len(batch), start: time.Now()}
	var err error
	switch {
	case len(batch) == 0: // only internal entries: nothing to send
	case r.pl != nil:
		f.wait, err = r.pl.Send(r.dctx, batch)
	default:
		err = r.l.d.Deliver(r.dctx, batch)
	}
	if err != nil {
		return err
	}
	r.inflight = append(r.inflight, f)
	r.readPos = last
	return nil
}

// poll waits for an append (wake), a poll interval at most, or until
// Run's context ends.
func (r *runState) poll(wake <-chan struct{}) {
	t := time.NewTimer(r.l.o.PollInterval)
	select {
	case <-r.ctx.Done():
	case <-wake:
	case <-t.C:
	}
	t.Stop()
}

// completeOldest waits for the confirmation of the oldest batch in flight
// and moves the cursor past it. It reports whether Run must return.
func (r *runState) completeOldest() bool {
	l, f := r.l, r.inflight[0]
	if f.wait != nil {
		if err := f.wait(r.dctx); err != nil {
			return r.failed(err, "destination unavailable")
		}
	}
	r.inflight = append(r.inflight[:0], r.inflight[1:]...)
	l.m.duration.Observe(time.Since(f.start).Seconds())
	l.m.delivered.Add(float64(f.n))
	l.recovered()
	if err := l.st.SetCursor(context.WithoutCancel(r.dctx), l.o.Name, f.last); err != nil {
		// Delivered but not recorded: after a restart these entries
		// are delivered again (at least once), nothing is lost.
		l.m.errors.Inc()
		l.log.Warn("Sink cursor not saved", "sink", l.o.Name, "seq", f.last, "err", err)
	}
	r.cursor = f.last
	return false
}

// failedStep is failed as sendNext's result.
func (r *runState) failedStep(err error, why string) stepResult {
	if r.failed(err, why) {
		return stepStop
	}
	return stepAgain
}

// failed handles a failed read, send or wait: what is in flight is
// abandoned and delivery resumes from the cursor, after isolating what
// the destination refuses or after the backoff of an outage. It reports
// whether Run must return.
func (r *runState) failed(err error, why string) bool {
	l := r.l
	r.inflight = r.inflight[:0]
	r.readPos = r.cursor
	if errors.Is(err, ErrRefused) {
		// Something in the batches from the cursor on is refused:
		// deliver them one batch at a time, isolating what is refused.
		last, ierr := l.isolate(r.dctx, r.cursor)
		if ierr == nil {
			l.recovered()
			r.cursor, r.readPos = last, last
			return false
		}
		err = ierr
	}
	if !r.draining && r.ctx.Err() != nil {
		return false // cancelled mid-batch: retry while draining
	}
	l.m.errors.Inc()
	l.fail(err)
	if r.draining {
		l.stopped(r.cursor, why)
		return true
	}
	l.sleep(r.ctx)
	return false
}

// isolate delivers the batch after cursor without pipelining, splitting it
// to find and set aside the entries the destination refuses, then saves
// the cursor past it. It returns the new cursor, or the error of an outage
// (or of the store) met on the way, after which the caller retries.
func (l *Loop) isolate(ctx context.Context, cursor int64) (int64, error) {
	batch, err := l.st.Read(ctx, cursor, l.o.BatchSize)
	if err != nil {
		return cursor, fmt.Errorf("read store: %w", err)
	}
	if len(batch) == 0 {
		return cursor, nil
	}
	last := batch[len(batch)-1].Seq
	if batch = external(batch); len(batch) > 0 {
		if err := l.split(ctx, batch); err != nil {
			return cursor, err
		}
	}
	if err := l.st.SetCursor(context.WithoutCancel(ctx), l.o.Name, last); err != nil {
		l.m.errors.Inc()
		l.log.Warn("Sink cursor not saved", "sink", l.o.Name, "seq", last, "err", err)
	}
	return last, nil
}

// split delivers batch, and when the destination refuses it, each half
// alone, down to single entries, which go to the dead letters.
func (l *Loop) split(ctx context.Context, batch []store.Entry) error {
	start := time.Now()
	err := l.d.Deliver(ctx, batch)
	if err == nil {
		l.m.duration.Observe(time.Since(start).Seconds())
		l.m.delivered.Add(float64(len(batch)))
		return nil
	}
	if !errors.Is(err, ErrRefused) {
		return err
	}
	if len(batch) > 1 {
		h := len(batch) / 2
		if err := l.split(ctx, batch[:h]); err != nil {
			return err
		}
		return l.split(ctx, batch[h:])
	}
	added, derr := l.st.PutDeadLetter(context.WithoutCancel(ctx), l.o.Name, batch[0], err)
	if derr != nil {
		return fmt.Errorf("set aside entry %d: %w", batch[0].Seq, derr)
	}
	if !added {
		return nil // set aside by an isolation an outage interrupted
	}
	l.m.dead.Inc()
	l.deadUnlogged++
	if time.Since(l.lastDeadLog) >= time.Minute {
		l.log.Warn("Sink destination refused entries; set aside as dead letters (see xrdmon deadletters)",
			"sink", l.o.Name, "entries", l.deadUnlogged, "last_seq", batch[0].Seq, "err", err)
		l.lastDeadLog, l.deadUnlogged = time.Now(), 0
	}
	return nil
}

func (l *Loop) stopped(cursor int64, why string) {
	last, _ := l.st.LastSeq(context.Background())
	l.log.Info("Sink stopped", "sink", l.o.Name, "cursor", cursor, "backlog", max(last-cursor, 0), "why", why)
}

// fail records a failed attempt: Warn at the first of an outage, Debug after.
func (l *Loop) fail(err error) {
	l.attempts++
	if !l.down {
		l.down, l.downSince = true, time.Now()
		l.log.Warn("Sink delivery failing, retrying with backoff; entries wait in the store",
			"sink", l.o.Name, "err", err)
		return
	}
	l.log.Debug("Sink delivery still failing", "sink", l.o.Name, "attempt", l.attempts, "err", err)
}

// recovered ends an outage, if there was one, with one Info.
func (l *Loop) recovered() {
	if l.down {
		l.log.Info("Sink delivering again", "sink", l.o.Name,
			"outage", time.Since(l.downSince).Round(time.Millisecond), "failed_attempts", l.attempts)
	}
	l.down, l.attempts = false, 0
	l.backoff.Reset()
}

// sleep waits the next backoff delay of the outage, or until ctx ends.
func (l *Loop) sleep(ctx context.Context) {
	t := time.NewTimer(l.backoff.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// external drops, in place, the entries kept for xrdmon's own use
// (store.Entry.Internal: progress snapshots, and the progress events of
// older logs, for rollups), which no sink delivers.
func external(batch []store.Entry) []store.Entry {
	return slices.DeleteFunc(batch, func(e store.Entry) bool { return e.Internal() })
}
