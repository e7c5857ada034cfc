package postgres

// This file is the delivery loop shared in shape by every durable sink
// (the amqp package has the same file): read the store from the sink's
// cursor, deliver a batch all-or-nothing, move the cursor, retry failures
// with exponential backoff and jitter. It is kept per package until a
// common internal/sink package exists.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/store"
)

// loopOptions tune the delivery loop.
type loopOptions struct {
	name         string        // the sink's cursor name and metric label
	batchSize    int           // entries read and delivered per round
	pollInterval time.Duration // wait when the log has nothing new
	minBackoff   time.Duration // first retry delay
	maxBackoff   time.Duration // retry delay cap
	drainTimeout time.Duration // time allowed to deliver the backlog after ctx is cancelled
}

// loopMetrics are the per-sink delivery metrics. The backlog gauge
// (xrdmon_sink_backlog_records) is exported by the store itself.
type loopMetrics struct {
	delivered prometheus.Counter
	errors    prometheus.Counter
	duration  prometheus.Observer
}

// The metric vectors are shared by all sinks of all kinds: when one is
// already registered on reg the existing one is used.
func newLoopMetrics(reg prometheus.Registerer, name string) (*loopMetrics, error) {
	delivered := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xrdmon_sink_delivered_total",
		Help: "Entries (records and events) a sink has delivered and its destination has acknowledged.",
	}, []string{"sink"})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xrdmon_sink_errors_total",
		Help: "Failed delivery attempts of a sink (each is retried).",
	}, []string{"sink"})
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "xrdmon_sink_batch_duration_seconds",
		Help:    "Time to deliver one batch, from the first write to the destination's acknowledgement.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"sink"})
	if reg != nil {
		var err error
		if delivered, err = registerOrExisting(reg, delivered); err != nil {
			return nil, err
		}
		if errs, err = registerOrExisting(reg, errs); err != nil {
			return nil, err
		}
		if dur, err = registerOrExisting(reg, dur); err != nil {
			return nil, err
		}
	}
	return &loopMetrics{
		delivered: delivered.WithLabelValues(name),
		errors:    errs.WithLabelValues(name),
		duration:  dur.WithLabelValues(name),
	}, nil
}

func registerOrExisting[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if ex, ok := are.ExistingCollector.(C); ok {
				return ex, nil
			}
		}
		return c, fmt.Errorf("register metrics: %w", err)
	}
	return c, nil
}

// loop runs deliver over the store's log.
type loop struct {
	o       loopOptions
	st      *store.Store
	log     *slog.Logger
	m       *loopMetrics
	deliver func(ctx context.Context, batch []store.Entry) error

	// outage state, for one Warn per outage and one Info on recovery
	down      bool
	downSince time.Time
	attempts  int
}

type readResult struct {
	entries []store.Entry
	err     error
}

// run delivers until ctx is cancelled, then delivers what it can within
// drainTimeout and returns. It returns an error only when the cursor cannot
// be read at the start.
func (l *loop) run(ctx context.Context) error {
	cursor, err := l.st.Cursor(ctx, l.o.name)
	if err != nil {
		return fmt.Errorf("read cursor: %w", err)
	}
	if _, ok := l.st.Sinks()[l.o.name]; !ok {
		// Register at once so retention keeps what this sink has not seen.
		if err := l.st.SetCursor(ctx, l.o.name, cursor); err != nil {
			return fmt.Errorf("register cursor: %w", err)
		}
	}
	l.log.Info("Sink started", "sink", l.o.name, "cursor", cursor)

	dctx := ctx // the context deliveries run under; replaced when draining
	draining := false
	var pending []store.Entry
	var next chan readResult // prefetch of the batch after pending
	defer func() {
		if next != nil {
			<-next
		}
	}()
	cancelDrain := context.CancelFunc(func() {})
	defer func() { cancelDrain() }()
	startDrain := func() {
		draining = true
		dctx, cancelDrain = context.WithTimeout(context.WithoutCancel(ctx), l.o.drainTimeout)
	}

	for {
		if !draining && ctx.Err() != nil {
			startDrain()
		}
		if draining && dctx.Err() != nil {
			l.stopped(cursor, "drain timeout")
			return nil
		}
		if pending == nil {
			var err error
			if next != nil {
				r := <-next
				next = nil
				pending, err = r.entries, r.err
			} else {
				pending, err = l.st.Read(dctx, cursor, l.o.batchSize)
			}
			if err != nil {
				pending = nil
				if ctx.Err() != nil && !draining {
					continue
				}
				l.m.errors.Inc()
				l.fail(fmt.Errorf("read store: %w", err))
				if draining {
					l.stopped(cursor, "store unreadable")
					return nil
				}
				l.sleep(ctx)
				continue
			}
			if len(pending) == 0 {
				pending = nil
				if draining {
					l.stopped(cursor, "backlog delivered")
					return nil
				}
				t := time.NewTimer(l.o.pollInterval)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
				continue
			}
			if len(pending) == l.o.batchSize {
				// More is likely waiting: read it while this batch is delivered.
				next = make(chan readResult, 1)
				go func(ctx context.Context, after int64) {
					e, err := l.st.Read(ctx, after, l.o.batchSize)
					next <- readResult{e, err}
				}(dctx, pending[len(pending)-1].Seq)
			}
		}

		start := time.Now()
		if err := l.deliver(dctx, pending); err != nil {
			if !draining && ctx.Err() != nil {
				continue // cancelled mid-batch: retry it while draining
			}
			l.m.errors.Inc()
			l.fail(err)
			if draining {
				l.stopped(cursor, "destination unavailable")
				return nil
			}
			l.sleep(ctx)
			continue
		}
		l.m.duration.Observe(time.Since(start).Seconds())
		l.m.delivered.Add(float64(len(pending)))
		l.recovered()
		last := pending[len(pending)-1].Seq
		if err := l.st.SetCursor(context.WithoutCancel(dctx), l.o.name, last); err != nil {
			// Delivered but not recorded: after a restart these entries
			// are delivered again (at least once), nothing is lost.
			l.m.errors.Inc()
			l.log.Warn("Sink cursor not saved", "sink", l.o.name, "seq", last, "err", err)
		}
		cursor = last
		pending = nil
	}
}

func (l *loop) stopped(cursor int64, why string) {
	last, _ := l.st.LastSeq(context.Background())
	l.log.Info("Sink stopped", "sink", l.o.name, "cursor", cursor, "backlog", max(last-cursor, 0), "why", why)
}

// fail records a failed attempt: Warn at the first of an outage, Debug after.
func (l *loop) fail(err error) {
	l.attempts++
	if !l.down {
		l.down, l.downSince = true, time.Now()
		l.log.Warn("Sink delivery failing, retrying with backoff; entries wait in the store",
			"sink", l.o.name, "err", err)
		return
	}
	l.log.Debug("Sink delivery still failing", "sink", l.o.name, "attempt", l.attempts, "err", err)
}

func (l *loop) recovered() {
	if l.down {
		l.log.Info("Sink delivering again", "sink", l.o.name,
			"outage", time.Since(l.downSince).Round(time.Millisecond), "failed_attempts", l.attempts)
	}
	l.down, l.attempts = false, 0
}

// sleep waits the backoff for the current attempt count, with full jitter
// over the upper half. It returns false when ctx ended first.
func (l *loop) sleep(ctx context.Context) bool {
	t := time.NewTimer(backoff(l.attempts, l.o.minBackoff, l.o.maxBackoff))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// backoff returns the delay before retry number attempt (1-based):
// min·2^(attempt-1), capped at max, jittered to [d/2, d).
func backoff(attempt int, minD, maxD time.Duration) time.Duration {
	d := minD
	for i := 1; i < attempt && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half)
}
