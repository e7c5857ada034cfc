package source

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/backoff"
	"github.com/xrdmon/xrdmon/internal/metrics"
	"github.com/xrdmon/xrdmon/internal/signal"
	"github.com/xrdmon/xrdmon/internal/units"
)

// RelayMetrics are the metrics every relayed (bus) source keeps, named
// xrdmon_<source>_...: the messages received, those that are not valid
// shoveler envelopes (by reason), reconnects, failed acknowledgements and
// whether it is connected.
type RelayMetrics struct {
	Received   prometheus.Counter
	Invalid    *prometheus.CounterVec // by ShovelerReasons
	Reconnects prometheus.Counter
	AckFailed  prometheus.Counter
	Connected  prometheus.Gauge
}

// NewRelayMetrics makes and registers on ms the metrics of the relayed
// source name ("amqp", "stomp"), whose broker their help calls broker
// ("RabbitMQ"), with every reason of Invalid present from the start.
func NewRelayMetrics(ms *metrics.Set, name, broker string) RelayMetrics {
	p := "xrdmon_" + name + "_"
	m := RelayMetrics{
		Received:   metrics.Counter(ms, p+"messages_received_total", "Messages consumed from "+broker+"."),
		Reconnects: metrics.Counter(ms, p+"reconnects_total", "Connections to "+broker+" lost or abandoned and made again."),
		AckFailed:  metrics.Counter(ms, p+"acks_failed_total", "Batch acknowledgements that could not be sent to "+broker+" (the messages are redelivered)."),
		Invalid:    metrics.CounterVec(ms, p+"messages_invalid_total", "Messages that are not valid shoveler envelopes, acknowledged and dropped, by reason (oversized: more than a UDP datagram can carry).", "reason"),
		Connected:  metrics.Gauge(ms, p+"connected", "1 while the "+strings.ToUpper(name)+" source is connected and consuming."),
	}
	for _, r := range ShovelerReasons {
		m.Invalid.WithLabelValues(r)
	}
	return m
}

// LastConn keeps the socket of a relayed source's current connection, so
// that tests can close it under the client library, as a network failure
// would.
type LastConn struct{ p atomic.Pointer[net.Conn] }

// Keep records c as the current connection and returns it: a dialer's
// Wrap.
func (l *LastConn) Keep(c net.Conn) net.Conn { l.p.Store(&c); return c }

// Break closes the current connection's socket, if there is one.
func (l *LastConn) Break() {
	if c := l.p.Load(); c != nil {
		(*c).Close()
	}
}

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
	return signal.Closed(r.Stop)
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

// RelayOptions are the batching, reconnecting and draining of a relayed
// source (AMQP, STOMP): not configurable (yaml:"-"); tests and benchmarks
// tune them. Start from DefaultRelayOptions.
type RelayOptions struct {
	// BatchSize is the largest number of messages per batch (at most the
	// source's prefetch).
	BatchSize int
	// BatchWait is how long a batch waits for more messages after its first.
	BatchWait time.Duration
	// ReconnectMin and ReconnectMax bound the exponential reconnect backoff;
	// each wait has random jitter of up to 50%.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// DrainTimeout is how long Run, once cancelled, keeps the connection
	// open for the pipeline to acknowledge the batches it holds.
	DrainTimeout time.Duration
}

// DefaultRelayOptions returns the defaults: batches of 256 messages or
// 5 ms, reconnects after 500 ms to 30 s, a drain of 10 s.
func DefaultRelayOptions() RelayOptions {
	return RelayOptions{
		BatchSize:    256,
		BatchWait:    5 * time.Millisecond,
		ReconnectMin: 500 * time.Millisecond,
		ReconnectMax: 30 * time.Second,
		DrainTimeout: 10 * time.Second,
	}
}

// Fill sets the unset options to their defaults, and BatchSize to at
// most prefetch.
func (o *RelayOptions) Fill(prefetch int) {
	d := DefaultRelayOptions()
	units.Default(&o.BatchSize, d.BatchSize)
	o.BatchSize = min(o.BatchSize, prefetch)
	units.Default(&o.BatchWait, d.BatchWait)
	units.Default(&o.ReconnectMin, d.ReconnectMin)
	if o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = max(d.ReconnectMax, o.ReconnectMin)
	}
	units.Default(&o.DrainTimeout, d.DrainTimeout)
}

// ErrAbandoned is returned by Batcher.Hand when its Stop channel closed
// before the pipeline took the batch.
var ErrAbandoned = errors.New("abandoned")

// Batcher is the batching of a relayed source's session: the batch being
// filled from the messages, handed to the pipeline when full (the pool's
// bound, or BatchSize messages) or when Timer fires, BatchWait after its
// first message. Only the session's goroutine may use it.
type Batcher struct {
	Timer *time.Timer // BatchWait after the batch's first message

	opts      *RelayOptions
	pool      *BatchPool
	out       chan<- *Batch
	stop      <-chan struct{}
	ackFailed prometheus.Counter

	b *PooledBatch // nil when no batch is being filled
	n int          // messages in b
}

// NewBatcher returns a batcher handing batches from pool to out. Hand
// gives up when stop (nil: never) is closed, and counts the failed Acks
// on ackFailed.
func NewBatcher(o *RelayOptions, pool *BatchPool, out chan<- *Batch, stop <-chan struct{}, ackFailed prometheus.Counter) *Batcher {
	t := &Batcher{Timer: time.NewTimer(time.Hour), opts: o, pool: pool, out: out, stop: stop, ackFailed: ackFailed}
	t.Timer.Stop()
	return t
}

// Batch returns the batch to add the next message to, starting one (and
// the timer) when none is being filled.
func (t *Batcher) Batch() *PooledBatch {
	if t.b == nil {
		t.b = t.pool.Get()
		t.n = 0
		t.Timer.Reset(t.opts.BatchWait)
	}
	return t.b
}

// Added counts a message added to the batch and reports whether the
// batch is to be handed over now.
func (t *Batcher) Added() bool {
	t.n++
	return t.b.Full() || t.n >= t.opts.BatchSize
}

// Take returns the batch being filled, nil when there is none, and
// stops the timer: the caller hands it over (Hand).
func (t *Batcher) Take() *PooledBatch {
	pb := t.b
	if pb != nil {
		t.b = nil
		t.Timer.Stop()
	}
	return pb
}

// Drop frees the batch being filled, if any: it is never handed over
// (the broker redelivers its messages).
func (t *Batcher) Drop() {
	if t.b != nil {
		t.b.Free()
		t.b = nil
	}
}

// Hand gives pb to the pipeline with an Ack that calls ack and counts its
// failures; a batch of invalid messages only (no packet) is acknowledged
// at once instead, with ack's error. When ctx is cancelled or stop closed
// first, pb is freed, unsent (when not nil) is called, and Hand returns
// ctx's error or ErrAbandoned.
func (t *Batcher) Hand(ctx context.Context, pb *PooledBatch, ack func() error, unsent func()) error {
	if pb.Len() == 0 { // only invalid messages: acknowledge them at once
		pb.Free()
		return ack()
	}
	pb.Ack = func() error {
		if err := ack(); err != nil {
			t.ackFailed.Inc()
			return err
		}
		return nil
	}
	var err error
	select {
	case t.out <- &pb.Batch:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.stop:
		err = ErrAbandoned
	}
	pb.Free()
	if unsent != nil {
		unsent()
	}
	return err
}
