package source

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/backoff"
)

// Reconnect is the reconnect loop of the relayed (bus) sources: it runs
// session until ctx is cancelled or Stop is closed, again after each end,
// with exponential backoff between Min and Max (reset after a session
// that lasted more than 2*Max).
type Reconnect struct {
	Min, Max   time.Duration
	Reconnects prometheus.Counter // counts every session after the first
	Connected  prometheus.Gauge   // set to 0 when a session ends
	// Stop, when closed, ends the loop as ctx's cancellation does (nil:
	// never).
	Stop <-chan struct{}
	// Again, when not nil, reports whether a session's error asks for a
	// new session at once, with the backoff reset.
	Again func(err error) bool
	// Lost is called with a session's error and the wait before the next.
	Lost func(err error, wait time.Duration)
}

// Run runs the loop; it returns when ctx is cancelled or Stop is closed.
func (r *Reconnect) Run(ctx context.Context, session func() error) {
	bo := backoff.Backoff{Min: r.Min, Max: r.Max}
	for first := true; ; first = false {
		if !first {
			r.Reconnects.Inc()
		}
		start := time.Now()
		err := session()
		r.Connected.Set(0)
		if ctx.Err() != nil || r.stopped() {
			return
		}
		if r.Again != nil && r.Again(err) {
			bo.Reset()
			continue
		}
		if time.Since(start) > 2*r.Max {
			bo.Reset() // it worked for a while: start over
		}
		wait := bo.Next()
		r.Lost(err, wait)
		select {
		case <-ctx.Done():
			return
		case <-r.Stop:
			return
		case <-time.After(wait):
		}
	}
}

func (r *Reconnect) stopped() bool {
	select {
	case <-r.Stop:
		return true
	default:
		return false
	}
}

// ShovelerDecoder adds shoveler messages to batches for a relayed
// source, counting (and logging at most once a minute) the invalid ones.
// Only one goroutine may use it.
type ShovelerDecoder struct {
	Filter  *Filter
	Invalid *prometheus.CounterVec // by ShovelerReason
	Log     *slog.Logger
	// QuoteBody logs an invalid message's beginning Go-quoted.
	QuoteBody bool

	logged time.Time // when an invalid message was last logged
}

// Add decodes a shoveler message into b; an invalid one is counted (and
// logged at most once a minute).
func (d *ShovelerDecoder) Add(b *PooledBatch, body []byte) {
	buf, env, err := AppendShoveler(b.Buf(), body)
	if err != nil {
		d.Invalid.WithLabelValues(ShovelerReason(err)).Inc()
		if time.Since(d.logged) > time.Minute {
			d.logged = time.Now()
			d.Log.Warn("Dropping invalid shoveler messages (logged at most once a minute)", "err", err,
				"body", d.truncate(body, 120))
		}
		return
	}
	if sender, ok := d.Filter.AcceptShoveled(&env); ok {
		b.Add(buf, env.Data, sender, time.Now())
	}
}

func (d *ShovelerDecoder) truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	if d.QuoteBody {
		return strconv.Quote(string(b))
	}
	return string(b)
}
