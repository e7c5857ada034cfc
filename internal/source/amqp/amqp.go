// Package amqp is the relayed source: it consumes the messages an OSG
// xrootd-monitoring-shoveler publishes to RabbitMQ (one JSON envelope per UDP
// datagram) and hands the datagrams over in batches that the pipeline
// acknowledges once what they produced is durable.
package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/metrics"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Config configures the AMQP source: the amqp_input section of the
// configuration. The fields tagged yaml:"-" are not configurable; tests
// and benchmarks tune them.
type Config struct {
	Enabled bool `yaml:"enabled" help:"consume shoveled packets from AMQP"`
	// Config is the broker. With a token file, the user is the URL's, or
	// "shoveler" when the URL names none.
	amqpconn.Config `yaml:",inline"`
	// Queue is the durable queue to declare and consume (required).
	Queue string `yaml:"queue" help:"queue to consume from (declared durable if absent)"`
	// Exchange is the exchange the queue is bound to; empty means
	// "shoveled-xrd", where the shoveler publishes with an empty routing
	// key. "-" binds nothing.
	Exchange string `yaml:"exchange" help:"exchange to bind the queue to; empty means the shoveler's \"shoveled-xrd\", \"-\" binds nothing (a binding that already exists)"`
	// BindingKey of the binding ("#": everything on a topic exchange; a
	// fanout exchange ignores it).
	BindingKey string `yaml:"binding_key" help:"routing key of the binding; \"#\" for everything on a topic exchange"`
	// Prefetch is the QoS prefetch count: how many unacknowledged
	// messages the broker sends ahead.
	Prefetch int `yaml:"prefetch" help:"unacknowledged deliveries the broker may send ahead"`
	// SingleActiveConsumer declares the queue with single active consumer:
	// of the collectors consuming it, the broker delivers to one, and to
	// another when that one goes (the shard queues of `xrdmon bus setup`
	// have it, and must be declared with it).
	SingleActiveConsumer bool `yaml:"single_active_consumer" help:"declare the queue with single active consumer (one collector at a time; the shard queues of xrdmon bus setup)"`

	// ExchangeType, when set ("fanout", "topic", "direct"), declares the
	// exchange (durable) before binding. Empty: the exchange must exist.
	ExchangeType string `yaml:"-"`
	// RelayOptions are the batching (BatchSize at most Prefetch), the
	// reconnect backoff and the drain after cancellation.
	source.RelayOptions `yaml:"-"`
	// TokenCheck is how often the token file's modification time is checked.
	TokenCheck time.Duration `yaml:"-"`
	// HandoverWait, when positive, makes each session wait (up to that
	// long) until the queue has no consumer before it consumes: a
	// collector taking a shard over (cluster mode) then starts only after
	// the previous holder's channel is closed and its unacknowledged
	// deliveries are back in the queue, ahead of the newer messages, so a
	// server's messages keep their order across the handover. After the
	// wait it consumes all the same (with single active consumer the
	// broker still keeps the order), and says so.
	HandoverWait time.Duration `yaml:"-"`
	// Filter is the allow-list and address map applied to the shoveler's
	// "remote" (the listen section's).
	Filter source.FilterConfig `yaml:"-"`
}

// DefaultExchange is where the shoveler publishes.
const DefaultExchange = "shoveled-xrd"

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Queue:        "xrdmon",
		BindingKey:   "#",
		Prefetch:     20000,
		RelayOptions: source.DefaultRelayOptions(),
		TokenCheck:   10 * time.Second,
	}
}

// ErrStaleAck is returned by Batch.Ack when the connection the batch came
// from is gone: the broker will redeliver its messages.
var ErrStaleAck = errors.New("amqp ack: channel closed since delivery; messages will be redelivered")

var errTokenChanged = errors.New("token file changed")

// AMQP is the AMQP source.
type AMQP struct {
	cfg    Config
	log    *slog.Logger
	dec    source.ShovelerDecoder
	pool   *source.BatchPool
	dialer *amqpconn.Dialer

	conn source.LastConn // the current connection's socket, for tests

	abandon     chan struct{} // closed by Abandon
	waiting     atomic.Bool   // in awaitHandover, the queue having a consumer (tests)
	abandonOnce sync.Once

	m source.RelayMetrics // xrdmon_amqp_*
}

// New checks cfg and registers the metrics on reg (nil: none). It does not
// connect; Run does.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*AMQP, error) {
	def := DefaultConfig()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.URL == "" || cfg.Queue == "" {
		return nil, errors.New("amqp source: url and queue are required")
	}
	if cfg.Exchange == "" {
		cfg.Exchange = DefaultExchange
	}
	if cfg.BindingKey == "" {
		cfg.BindingKey = def.BindingKey
	}
	units.Default(&cfg.Prefetch, def.Prefetch)
	cfg.Fill(cfg.Prefetch)
	units.Default(&cfg.TokenCheck, def.TokenCheck)
	filter, err := source.NewFilter(cfg.Filter, "amqp", reg)
	if err != nil {
		return nil, fmt.Errorf("amqp source: %w", err)
	}
	a := &AMQP{cfg: cfg, log: log, abandon: make(chan struct{}), pool: source.NewBatchPool(cfg.BatchSize, cfg.BatchSize*source.BatchBytesPerPacket)}
	a.dialer, err = amqpconn.NewDialer(cfg.Config, amqpconn.Options{
		Name: "input",
		Wrap: a.conn.Keep,
	})
	if err != nil {
		return nil, fmt.Errorf("amqp source: %w", err)
	}
	ms := metrics.NewSet(reg)
	a.m = source.NewRelayMetrics(ms, "amqp", "RabbitMQ")
	if err := ms.Err(); err != nil {
		return nil, fmt.Errorf("amqp source: %w", err)
	}
	a.dec = source.ShovelerDecoder{Filter: filter, Invalid: a.m.Invalid, Log: log}
	return a, nil
}

// Run consumes until ctx is cancelled, reconnecting with backoff whenever
// the connection or channel is lost, and returns nil. After cancellation it
// stops reading deliveries and waits up to DrainTimeout for the batches it
// handed out to be acknowledged before it closes the connection (or until
// Abandon). Batches sent before a reconnect can no longer be acknowledged
// (Ack returns ErrStaleAck); the broker redelivers their messages, so the
// pipeline may see them twice.
//
// The consumer is never cancelled while the channel stays open: what the
// source holds unacknowledged goes back to the queue when the channel
// closes, and with single active consumer the broker activates the next
// consumer only then, so the next one gets those messages first, in their
// order, before any newer one. (A cancelled consumer whose channel stayed
// open would let the next consumer start on newer messages while the older
// ones wait for the channel to close.)
func (a *AMQP) Run(ctx context.Context, out chan<- *source.Batch) error {
	r := source.Reconnect{Min: a.cfg.ReconnectMin, Max: a.cfg.ReconnectMax, Reconnects: a.m.Reconnects, Connected: a.m.Connected,
		Stop: a.abandon,
		Again: func(err error) bool {
			if errors.Is(err, errTokenChanged) {
				a.log.Info("AMQP token file changed; reconnecting")
				return true
			}
			return false
		},
		Lost: func(err error, wait time.Duration) {
			a.log.Warn("AMQP connection lost; reconnecting", "err", err, "wait", wait)
		}}
	r.Run(ctx, func() error { return a.session(ctx, out) })
	return nil
}

// Abandon makes Run give back at once every delivery it holds: it closes
// the connection without waiting for the batches handed out (their Acks
// fail, the broker requeues their messages) and returns. A collector that
// lost its shard's lease, or whose pipeline ended, abandons its input, so
// that the next holder of the shard gets those messages, first and in
// order, without waiting for DrainTimeout.
func (a *AMQP) Abandon() { a.abandonOnce.Do(func() { close(a.abandon) }) }

// session connects, consumes until the connection ends, and closes it.
func (a *AMQP) session(ctx context.Context, out chan<- *source.Batch) error {
	conn, err := a.dialer.Dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, deliveries, err := a.consume(ctx, conn)
	if err != nil {
		return err
	}
	a.m.Connected.Set(1)
	a.log.Info("Consuming from RabbitMQ", "queue", a.cfg.Queue, "exchange", a.cfg.Exchange)

	c := a.newConsumer(ctx, out, ch, conn)
	defer c.tr.close()
	var tokenTick <-chan time.Time
	if a.cfg.TokenFile != "" {
		t := time.NewTicker(a.cfg.TokenCheck)
		defer t.Stop()
		tokenTick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			c.stop()
			return nil
		case <-a.abandon:
			c.bt.Drop()
			a.log.Info("AMQP input abandoned: unacknowledged deliveries go back to the queue", "batches", c.tr.outstanding())
			return nil
		case err := <-c.closed:
			if err == nil {
				return errors.New("connection closed")
			}
			return fmt.Errorf("connection closed: %w", err)
		case <-tokenTick:
			if a.dialer.TokenChanged() {
				if err := c.flush(); err != nil {
					return err
				}
				return errTokenChanged
			}
		case <-c.bt.Timer.C:
			if err := c.flush(); err != nil {
				return err
			}
		case d, ok := <-deliveries:
			if !ok {
				return c.deliveriesClosed()
			}
			if err := c.receive(&d); err != nil {
				return err
			}
		}
	}
}

// consumer is a session's batching (source.Batcher) and the tracker that
// acknowledges what it hands over.
type consumer struct {
	a      *AMQP
	ctx    context.Context
	bt     *source.Batcher
	tr     *tracker
	closed chan *amqp.Error // the connection's close notification

	last uint64 // the last delivery tag of the batch being filled
}

func (a *AMQP) newConsumer(ctx context.Context, out chan<- *source.Batch, ch *amqp.Channel, conn *amqp.Connection) *consumer {
	return &consumer{a: a, ctx: ctx, tr: &tracker{ch: ch},
		bt:     source.NewBatcher(&a.cfg.RelayOptions, a.pool, out, a.abandon, a.m.AckFailed),
		closed: conn.NotifyClose(make(chan *amqp.Error, 1))}
}

// receive adds a delivery to the batch, starting one if needed, and hands
// the batch over when it is full.
func (c *consumer) receive(d *amqp.Delivery) error {
	c.a.m.Received.Inc()
	b := c.bt.Batch()
	c.last = d.DeliveryTag
	c.a.dec.Add(b, d.Body)
	if c.bt.Added() {
		return c.flush()
	}
	return nil
}

// flush hands the batch, if any, to the pipeline, with an Ack that
// acknowledges its deliveries; a batch of invalid messages only is
// acknowledged at once.
func (c *consumer) flush() error {
	pb := c.bt.Take()
	if pb == nil {
		return nil
	}
	p := c.tr.add(c.last)
	return c.bt.Hand(c.ctx, pb, func() error { return c.tr.done(p) }, nil)
}

// stop ends the session after a cancellation: the batch being filled was
// never handed over (the broker redelivers it later); those handed over
// are waited for.
func (c *consumer) stop() {
	c.bt.Drop()
	c.a.drain(c.tr, c.closed)
}

// deliveriesClosed ends a session whose delivery channel closed: a stop
// when the library cancelled the consumer for the cancellation, else an
// error.
func (c *consumer) deliveriesClosed() error {
	if c.ctx.Err() != nil { // the library cancelled the consumer
		c.stop()
		return nil
	}
	_ = c.flush() // cannot be acknowledged any more, but let the pipeline count them
	return errors.New("delivery channel closed")
}

// consume opens a channel on conn, declares and binds the queue as
// configured and starts consuming it.
func (a *AMQP) consume(ctx context.Context, conn *amqp.Connection) (*amqp.Channel, <-chan amqp.Delivery, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Qos(a.cfg.Prefetch, 0, false); err != nil {
		return nil, nil, fmt.Errorf("set prefetch: %w", err)
	}
	var args amqp.Table
	if a.cfg.SingleActiveConsumer {
		args = amqp.Table{"x-single-active-consumer": true}
	}
	if _, err := ch.QueueDeclare(a.cfg.Queue, true, false, false, false, args); err != nil {
		return nil, nil, fmt.Errorf("declare queue %s: %w", a.cfg.Queue, err)
	}
	if a.cfg.Exchange != "-" {
		if a.cfg.ExchangeType != "" {
			if err := ch.ExchangeDeclare(a.cfg.Exchange, a.cfg.ExchangeType, true, false, false, false, nil); err != nil {
				return nil, nil, fmt.Errorf("declare exchange %s: %w", a.cfg.Exchange, err)
			}
		}
		if err := ch.QueueBind(a.cfg.Queue, a.cfg.BindingKey, a.cfg.Exchange, false, nil); err != nil {
			if ae, ok := errors.AsType[*amqp.Error](err); ok && ae.Code == amqp.NotFound {
				return nil, nil, fmt.Errorf("bind queue %s: exchange %q does not exist (create it, or set amqp_input.exchange \"-\" to use a binding that exists): %w",
					a.cfg.Queue, a.cfg.Exchange, err)
			}
			return nil, nil, fmt.Errorf("bind queue %s to %s: %w", a.cfg.Queue, a.cfg.Exchange, err)
		}
	}
	if err := a.awaitHandover(ctx, ch); err != nil {
		return nil, nil, err
	}
	// Not ConsumeWithContext: a cancelled context would cancel the
	// consumer while the channel stays open for the drain (Run).
	deliveries, err := ch.Consume(a.cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("consume %s: %w", a.cfg.Queue, err)
	}
	return ch, deliveries, nil
}

// awaitHandover waits, when HandoverWait is set, until the queue has no
// consumer (the previous holder's channel is closed and what it held is
// back in the queue), at most HandoverWait.
func (a *AMQP) awaitHandover(ctx context.Context, ch *amqp.Channel) error {
	if a.cfg.HandoverWait <= 0 {
		return nil
	}
	start := time.Now()
	deadline := start.Add(a.cfg.HandoverWait)
	logged := false
	defer a.waiting.Store(false)
	for {
		q, err := ch.QueueDeclarePassive(a.cfg.Queue, true, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("inspect queue %s: %w", a.cfg.Queue, err)
		}
		if q.Consumers == 0 {
			if logged {
				a.log.Info("The queue's previous consumer is gone; consuming", "queue", a.cfg.Queue, "waited", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if time.Now().After(deadline) {
			a.log.Warn("The queue still has a consumer; consuming all the same (single active consumer keeps the order)",
				"queue", a.cfg.Queue, "consumers", q.Consumers, "waited", time.Since(start).Round(time.Millisecond))
			return nil
		}
		a.waiting.Store(true)
		if !logged {
			a.log.Info("Waiting for the queue's previous consumer to go, so that what it held is delivered first", "queue", a.cfg.Queue, "consumers", q.Consumers)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.abandon:
			return errors.New("abandoned")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// drain waits, after a cancellation, until the pipeline has acknowledged
// every batch handed over (or DrainTimeout passes, or the connection dies),
// so a clean shutdown does not cause redeliveries.
func (a *AMQP) drain(tr *tracker, closed <-chan *amqp.Error) {
	deadline := time.NewTimer(a.cfg.DrainTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for tr.outstanding() > 0 {
		select {
		case <-deadline.C:
			a.log.Warn("AMQP batches not acknowledged before shutdown; they will be redelivered", "batches", tr.outstanding())
			return
		case <-closed:
			return
		case <-a.abandon:
			a.log.Info("AMQP input abandoned while draining: unacknowledged deliveries go back to the queue", "batches", tr.outstanding())
			return
		case <-tick.C:
		}
	}
}

// tracker acknowledges batches of one channel in delivery order. Batches may
// be acked by the pipeline in any order; the channel ack (multiple, up to
// the last tag) is sent once every earlier batch is acked too, so a multiple
// ack never covers a batch that is not yet durable.
type tracker struct {
	mu sync.Mutex
	ch interface {
		Ack(tag uint64, multiple bool) error
	}
	order  source.AckOrder[uint64] // by each batch's last delivery tag
	closed bool
}

// add places a batch, whose last delivery tag is last, in the order.
func (t *tracker) add(last uint64) *source.Pending[uint64] {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.order.Add(last)
}

func (t *tracker) done(p *source.Pending[uint64]) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrStaleAck
	}
	upTo, ok := t.order.Done(p)
	if !ok {
		return nil // an earlier batch is still in flight; acked with it later
	}
	if err := t.ch.Ack(upTo, true); err != nil {
		t.closed = true
		return fmt.Errorf("%w: %w", ErrStaleAck, err)
	}
	return nil
}

func (t *tracker) outstanding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.order.Len()
}

func (t *tracker) close() {
	t.mu.Lock()
	t.closed = true
	t.order.Reset()
	t.mu.Unlock()
}
