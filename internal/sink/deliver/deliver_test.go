package deliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// openStore opens a store in a temp dir holding n records (seq 1..n).
func openStore(t *testing.T, n int) *store.Store {
	t.Helper()
	st := sinktest.OpenStore(t)
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{
			RecordID: fmt.Sprintf("%032x", i), End: t0.Add(time.Duration(i) * time.Second),
			ServerIP: "192.0.2.1", User: "u", Path: fmt.Sprintf("/store/f%d", i),
		}
	}
	if n > 0 {
		if err := st.Append(context.Background(), recs, nil); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// call is what fake saw in one Deliver call.
type call struct {
	seqs      []int64
	cursor    int64 // the stored cursor when Deliver was called
	ctxDone   bool  // ctx was already done when Deliver was called
	delivered bool  // Deliver returned nil
}

// fake is a Deliverer whose answers come from answer (nil: always nil);
// it records every call.
type fake struct {
	st     *store.Store
	name   string
	answer func(ctx context.Context, n int) error // n: 0-based call number

	mu    sync.Mutex
	calls []call
}

func (f *fake) Deliver(ctx context.Context, batch []store.Entry) error {
	c := call{ctxDone: ctx.Err() != nil}
	for _, e := range batch {
		c.seqs = append(c.seqs, e.Seq)
	}
	c.cursor, _ = f.st.Cursor(context.Background(), f.name)
	f.mu.Lock()
	n := len(f.calls)
	f.mu.Unlock()
	var err error
	if f.answer != nil {
		err = f.answer(ctx, n)
	}
	c.delivered = err == nil
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	return err
}

func (f *fake) snapshot() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// logs is a slog.Handler that keeps every record.
type logs struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logs) Enabled(context.Context, slog.Level) bool { return true }
func (h *logs) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *logs) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logs) WithGroup(string) slog.Handler      { return h }

// count returns how many records of level lv have message msg, and the
// value of attribute key in each of them.
func (h *logs) count(lv slog.Level, msg, key string) (int, []slog.Value) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	var vals []slog.Value
	for _, r := range h.recs {
		if r.Level != lv || r.Message != msg {
			continue
		}
		n++
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				vals = append(vals, a.Value)
			}
			return true
		})
	}
	return n, vals
}

// fastOptions retry at once, so tests do not wait on backoff.
func fastOptions(name string) Options {
	return Options{
		Name: name, BatchSize: 4, PollInterval: time.Millisecond,
		MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, DrainTimeout: 10 * time.Second,
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

var errDown = errors.New("destination down")

// TestCursorMovesOnlyAfterSuccess: failed batches leave the cursor where it
// was and are delivered again whole; every entry is delivered exactly once
// successfully, in order.
func TestCursorMovesOnlyAfterSuccess(t *testing.T) {
	const n = 10
	st := openStore(t, n)
	failing := map[int]bool{0: true, 1: true, 3: true} // call numbers that fail
	f := &fake{st: st, name: "s", answer: func(_ context.Context, i int) error {
		if failing[i] {
			return errDown
		}
		return nil
	}}
	reg := prometheus.NewRegistry()
	l, err := New(st, f, fastOptions("s"), nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	stop := sinktest.Start(t, l)
	waitFor(t, "cursor at end", func() bool { return sinktest.Cursor(t, st, "s") == n })
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}

	var delivered []int64
	calls := f.snapshot()
	for i, c := range calls {
		if c.cursor != c.seqs[0]-1 {
			t.Errorf("call %d: batch %v with the cursor at %d", i, c.seqs, c.cursor)
		}
		if i > 0 && !calls[i-1].delivered && !slices.Equal(c.seqs, calls[i-1].seqs) {
			t.Errorf("call %d: batch %v after batch %v failed, want it again", i, c.seqs, calls[i-1].seqs)
		}
		if c.delivered {
			delivered = append(delivered, c.seqs...)
		}
	}
	want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if !slices.Equal(delivered, want) {
		t.Fatalf("delivered %v, want %v", delivered, want)
	}
	if len(calls) != 3+len(failing) {
		t.Fatalf("%d calls, want 3 batches and %d retries", len(calls), len(failing))
	}
	if got := testutil.ToFloat64(l.m.errors); got != float64(len(failing)) {
		t.Errorf("errors_total = %v, want %d", got, len(failing))
	}
	if got := testutil.ToFloat64(l.m.delivered); got != n {
		t.Errorf("delivered_total = %v, want %d", got, n)
	}
	if got := testutil.CollectAndCount(reg, "xrdmon_sink_batch_duration_seconds"); got != 1 {
		t.Errorf("%d batch duration series, want 1", got)
	}
}

// TestRetryWithBackoff: an outage of several attempts is retried with a
// growing attempt count, logged once as a Warn when it starts and once as
// an Info when it ends.
func TestRetryWithBackoff(t *testing.T) {
	const fails = 5
	st := openStore(t, 3)
	f := &fake{st: st, name: "s", answer: func(_ context.Context, i int) error {
		if i < fails {
			return fmt.Errorf("attempt %d: %w", i+1, errDown)
		}
		return nil
	}}
	h := &logs{}
	l, err := New(st, f, fastOptions("s"), slog.New(h), nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := sinktest.Start(t, l)
	waitFor(t, "cursor at end", func() bool { return sinktest.Cursor(t, st, "s") == 3 })
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}

	if got := len(f.snapshot()); got != fails+1 {
		t.Fatalf("%d calls, want %d", got, fails+1)
	}
	if n, _ := h.count(slog.LevelWarn, "Sink delivery failing, retrying with backoff; entries wait in the store", "err"); n != 1 {
		t.Errorf("%d Warns for one outage, want 1", n)
	}
	_, attempts := h.count(slog.LevelDebug, "Sink delivery still failing", "attempt")
	var got []int64
	for _, v := range attempts {
		got = append(got, v.Int64())
	}
	if want := []int64{2, 3, 4, 5}; !slices.Equal(got, want) {
		t.Errorf("retries logged with attempts %v, want %v", got, want)
	}
	n, failed := h.count(slog.LevelInfo, "Sink delivering again", "failed_attempts")
	if n != 1 || failed[0].Int64() != fails {
		t.Errorf("%d recovery Infos (failed_attempts %v), want 1 with %d", n, failed, fails)
	}
	if got := testutil.ToFloat64(l.m.errors); got != fails {
		t.Errorf("errors_total = %v, want %d", got, fails)
	}
	// The next outage is a new one: its attempts count from 1 again.
	if l.down || l.attempts != 0 {
		t.Errorf("after recovery: down %v, attempts %d", l.down, l.attempts)
	}
}

// TestDrainOnCancel: a batch interrupted by the cancellation is delivered
// again, under a live context, and so is the rest of the backlog, before
// Run returns.
func TestDrainOnCancel(t *testing.T) {
	const n = 10
	st := openStore(t, n)
	started := make(chan struct{})
	f := &fake{st: st, name: "s", answer: func(ctx context.Context, i int) error {
		if i == 0 {
			close(started)
			<-ctx.Done() // the destination hangs until the sink is stopped
			return ctx.Err()
		}
		return nil
	}}
	h := &logs{}
	l, err := New(st, f, fastOptions("s"), slog.New(h), nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := sinktest.Start(t, l)
	<-started
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if c := sinktest.Cursor(t, st, "s"); c != n {
		t.Fatalf("cursor %d after the drain, want %d", c, n)
	}
	calls := f.snapshot()
	for i, c := range calls[1:] {
		if c.ctxDone {
			t.Errorf("drain call %d got a done context", i+1)
		}
	}
	if !slices.Equal(calls[1].seqs, calls[0].seqs) {
		t.Errorf("first drain batch %v, want the interrupted %v", calls[1].seqs, calls[0].seqs)
	}
	if got := testutil.ToFloat64(l.m.errors); got != 0 {
		t.Errorf("errors_total = %v: a cancellation is not a failure", got)
	}
	if _, why := h.count(slog.LevelInfo, "Sink stopped", "why"); len(why) != 1 || why[0].String() != "backlog delivered" {
		t.Errorf("stop reasons %v, want [backlog delivered]", why)
	}
}

// TestStoppedBeforeStart: a sink stopped before it has even read its
// cursor (collect of a short file, whose input ends first) still delivers
// the backlog.
func TestStoppedBeforeStart(t *testing.T) {
	const n = 10
	st := openStore(t, n)
	f := &fake{st: st, name: "s"}
	l, err := New(st, f, fastOptions("s"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RunStopped(t, l)
	if c := sinktest.Cursor(t, st, "s"); c != n {
		t.Fatalf("cursor %d, want %d: the backlog was not delivered", c, n)
	}
}

// TestDrainTimeout: a destination that does not answer while draining is
// given up on after DrainTimeout; the cursor stays where it was.
func TestDrainTimeout(t *testing.T) {
	st := openStore(t, 5)
	started := make(chan struct{})
	var once sync.Once
	f := &fake{st: st, name: "s", answer: func(ctx context.Context, _ int) error {
		once.Do(func() { close(started) })
		<-ctx.Done()
		return ctx.Err()
	}}
	h := &logs{}
	o := fastOptions("s")
	o.DrainTimeout = 20 * time.Millisecond
	l, err := New(st, f, o, slog.New(h), nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := sinktest.Start(t, l)
	<-started
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if c := sinktest.Cursor(t, st, "s"); c != 0 {
		t.Fatalf("cursor %d, nothing was delivered", c)
	}
	if _, why := h.count(slog.LevelInfo, "Sink stopped", "why"); len(why) != 1 ||
		(why[0].String() != "destination unavailable" && why[0].String() != "drain timeout") {
		t.Errorf("stop reasons %v, want the destination or the drain timeout", why)
	}
}

// TestRegistersCursor: a new sink is registered in the store at start, so
// retention keeps what it has not delivered, even before its first batch.
func TestRegistersCursor(t *testing.T) {
	st := openStore(t, 0)
	l, err := New(st, &fake{st: st, name: "new"}, fastOptions("new"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := sinktest.Start(t, l)
	waitFor(t, "registration", func() bool { _, ok := st.Sinks()["new"]; return ok })
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestNew(t *testing.T) {
	st := openStore(t, 0)
	d := &fake{st: st}
	for name, tc := range map[string]struct {
		st   *store.Store
		d    Deliverer
		opts Options
	}{
		"nil store":     {nil, d, Options{Name: "s"}},
		"nil deliverer": {st, nil, Options{Name: "s"}},
		"no name":       {st, d, Options{}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(tc.st, tc.d, tc.opts, nil, nil); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
	// The metric vectors are shared by every loop on a registry.
	reg := prometheus.NewRegistry()
	for _, name := range []string{"a", "b"} {
		if _, err := New(st, d, Options{Name: name}, nil, reg); err != nil {
			t.Fatalf("loop %s: %v", name, err)
		}
	}
	if got := testutil.CollectAndCount(reg, "xrdmon_sink_delivered_total"); got != 2 {
		t.Fatalf("%d delivered_total series, want 2", got)
	}
}

func TestWithDefaults(t *testing.T) {
	d := DefaultOptions()
	d.Name = "def"
	for name, tc := range map[string]struct {
		in, want Options
	}{
		"zero": {Options{}, d},
		"set": {
			Options{Name: "x", BatchSize: 7, InFlight: 5, PollInterval: 1, MinBackoff: 2, MaxBackoff: 3, DrainTimeout: 4},
			Options{Name: "x", BatchSize: 7, InFlight: 5, PollInterval: 1, MinBackoff: 2, MaxBackoff: 3, DrainTimeout: 4},
		},
		"max below min": {
			Options{Name: "x", MinBackoff: time.Minute, MaxBackoff: time.Second},
			Options{Name: "x", BatchSize: d.BatchSize, InFlight: d.InFlight, PollInterval: d.PollInterval, MinBackoff: time.Minute,
				MaxBackoff: time.Minute, DrainTimeout: d.DrainTimeout},
		},
		"negative": {
			Options{BatchSize: -1, InFlight: -1, PollInterval: -1, MinBackoff: -1, DrainTimeout: -1},
			d,
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tc.in.WithDefaults(d); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// pipe is a Pipeliner: it records each Send, and each batch's wait blocks
// until the test confirms (nil) or fails it.
type pipe struct {
	fake
	mu      sync.Mutex
	sent    [][]int64            // seqs of every Send, in order
	waiting map[int64]chan error // by first seq of the batch
}

func (p *pipe) Send(_ context.Context, batch []store.Entry) (func(context.Context) error, error) {
	var seqs []int64
	for _, e := range batch {
		seqs = append(seqs, e.Seq)
	}
	ch := make(chan error, 1)
	p.mu.Lock()
	p.sent = append(p.sent, seqs)
	p.waiting[seqs[0]] = ch
	p.mu.Unlock()
	return func(ctx context.Context) error {
		select {
		case err := <-ch:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil
}

// answer answers the wait of the batch starting at first, once it is sent.
func (p *pipe) answer(t *testing.T, first int64, err error) {
	t.Helper()
	waitFor(t, fmt.Sprintf("batch %d sent", first), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.waiting[first] != nil
	})
	p.mu.Lock()
	ch := p.waiting[first]
	delete(p.waiting, first)
	p.mu.Unlock()
	ch <- err
}

func (p *pipe) sends() [][]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sent)
}

func TestPipelinedCursor(t *testing.T) {
	st := openStore(t, 50)
	o := fastOptions("pipe")
	o.BatchSize, o.InFlight = 10, 3
	p := &pipe{waiting: map[int64]chan error{}}
	l, err := New(st, p, o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := sinktest.Start(t, l)

	// Three batches go out before any is confirmed; no fourth.
	waitFor(t, "3 batches in flight", func() bool { return len(p.sends()) == 3 })
	time.Sleep(50 * time.Millisecond)
	if n := len(p.sends()); n != 3 {
		t.Fatalf("%d batches sent with none confirmed, want 3 (InFlight)", n)
	}
	if c := sinktest.Cursor(t, st, "pipe"); c != 0 {
		t.Fatalf("cursor %d before any confirm, want 0", c)
	}
	// Confirm batch 1: cursor 10, a fourth batch (31..40) is sent.
	p.answer(t, 1, nil)
	waitFor(t, "cursor 10", func() bool { return sinktest.Cursor(t, st, "pipe") == 10 })
	waitFor(t, "4th batch", func() bool { return len(p.sends()) == 4 })
	// Batch 2 fails: batches 3 and 4 are abandoned (their confirms never
	// awaited), the cursor stays at 10, and delivery resumes at 11.
	p.answer(t, 11, errors.New("nack"))
	waitFor(t, "resend of 11..40", func() bool { return len(p.sends()) >= 7 })
	if s := p.sends()[4]; s[0] != 11 {
		t.Fatalf("after a failure, sent from %d, want 11", s[0])
	}
	if c := sinktest.Cursor(t, st, "pipe"); c != 10 {
		t.Fatalf("cursor %d after a failed batch, want 10", c)
	}
	// Confirm everything from now on, in order: the cursor reaches 50.
	for _, first := range []int64{11, 21, 31, 41} {
		p.answer(t, first, nil)
	}
	waitFor(t, "cursor 50", func() bool { return sinktest.Cursor(t, st, "pipe") == 50 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var firsts []int64
	for _, s := range p.sends() {
		firsts = append(firsts, s[0])
	}
	if want := []int64{1, 11, 21, 31, 11, 21, 31, 41}; !slices.Equal(firsts, want) {
		t.Fatalf("batches sent from %v, want %v", firsts, want)
	}
}

// refuser is a Deliverer refusing every batch that holds one of the bad
// sequence numbers, and taking the rest (by sequence number: a redelivered
// entry is taken again, as destinations deduplicate).
type refuser struct {
	bad map[int64]bool
	// outages fails that many calls with an outage after the first
	// refusal of each single entry, as a broker lost while the loop
	// isolates.
	outages int

	down   int
	downed map[int64]bool

	mu    sync.Mutex
	taken map[int64]int
	calls int
}

func (r *refuser) Deliver(_ context.Context, batch []store.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.down > 0 {
		r.down--
		return errors.New("connection reset by peer")
	}
	for _, e := range batch {
		if r.bad[e.Seq] {
			if len(batch) == 1 && !r.downed[e.Seq] {
				r.down = r.outages
				r.downed[e.Seq] = true
			}
			return fmt.Errorf("%w: value overflows numeric format (entry %d)", ErrRefused, e.Seq)
		}
	}
	for _, e := range batch {
		r.taken[e.Seq]++
	}
	return nil
}

// TestRefusedEntriesSetAside: entries the destination refuses are found by
// splitting their batch, set aside in the store's dead letters with the
// reason and counted; every other entry is delivered, and the cursor
// reaches the end (no endless retry).
func TestRefusedEntriesSetAside(t *testing.T) {
	t.Run("Isolated", func(t *testing.T) { testRefusedEntriesSetAside(t, 0) })
	// An outage right after each refused entry interrupts the isolation:
	// the retry refuses the same entries again, and each is still set
	// aside (and counted) once.
	t.Run("OutageWhileIsolating", func(t *testing.T) { testRefusedEntriesSetAside(t, 2) })
}

func testRefusedEntriesSetAside(t *testing.T, outages int) {
	const n = 40
	st := openStore(t, n)
	r := &refuser{bad: map[int64]bool{3: true, 17: true, 18: true, 40: true}, taken: map[int64]int{}, outages: outages, downed: map[int64]bool{}}
	o := fastOptions("s")
	o.BatchSize = 16
	l, err := New(st, r, o, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	stop := sinktest.Start(t, l)
	waitFor(t, "cursor at end", func() bool { return sinktest.Cursor(t, st, "s") == n })
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	for seq := int64(1); seq <= n; seq++ {
		if got := r.taken[seq]; r.bad[seq] != (got == 0) {
			t.Errorf("entry %d taken %d times (bad %v)", seq, got, r.bad[seq])
		}
	}
	dl, err := st.DeadLetters(context.Background(), "s", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, d := range dl {
		seqs = append(seqs, d.Seq)
		if d.Kind != "record" || !strings.Contains(d.Error, "overflows") || !strings.Contains(string(d.Data), d.EntryID) {
			t.Errorf("dead letter %+v", d)
		}
	}
	if !slices.Equal(seqs, []int64{3, 17, 18, 40}) {
		t.Errorf("dead letters %v, want 3 17 18 40", seqs)
	}
	if got := testutil.ToFloat64(l.m.dead); got != 4 {
		t.Errorf("dead_letters_total = %v, want 4", got)
	}
}

// TestAppendWakesTheLoop: a loop that found nothing new waits for the
// store's append signal, not its poll interval: with an hour between
// polls, an entry appended later is delivered at once.
func TestAppendWakesTheLoop(t *testing.T) {
	st := openStore(t, 2)
	f := &fake{st: st, name: "s"}
	o := fastOptions("s")
	o.PollInterval = time.Hour
	l, err := New(st, f, o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := sinktest.Start(t, l)
	waitFor(t, "the first entries", func() bool { return sinktest.Cursor(t, st, "s") == 2 })
	time.Sleep(20 * time.Millisecond) // the loop is waiting now
	if err := st.Append(context.Background(), []record.Record{{RecordID: "later", End: t0, ServerIP: "192.0.2.1"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the later entry (a poll interval is an hour)", func() bool { return sinktest.Cursor(t, st, "s") == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestProgressNotDelivered: progress snapshots (the store's progress
// entries) are internal: no sink gets them, and the cursor moves past
// them.
func TestProgressNotDelivered(t *testing.T) {
	st := openStore(t, 2)
	ctx := context.Background()
	snap := record.Record{Start: t0, End: t0.Add(time.Minute), ServerIP: "192.0.2.1", FileID: 3, ReadBytes: 10}
	if err := st.AppendWithProgress(ctx, nil, nil, []record.Record{snap}); err != nil {
		t.Fatal(err)
	}
	snap.End, snap.ReadBytes = snap.End.Add(time.Minute), 20
	if err := st.AppendWithProgress(ctx, []record.Record{{RecordID: "later", End: t0, ServerIP: "192.0.2.1"}}, nil,
		[]record.Record{snap}); err != nil {
		t.Fatal(err)
	}
	f := &fake{st: st, name: "s"}
	l, err := New(st, f, fastOptions("s"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := sinktest.Start(t, l)
	waitFor(t, "cursor at end", func() bool { return sinktest.Cursor(t, st, "s") == 5 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var delivered []int64
	for _, c := range f.snapshot() {
		delivered = append(delivered, c.seqs...)
	}
	if want := []int64{1, 2, 4}; !slices.Equal(delivered, want) {
		t.Fatalf("delivered %v, want %v", delivered, want)
	}
}
