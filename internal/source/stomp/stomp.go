// Package stomp is the relayed source of the WLCG side of the bus: it
// consumes the messages an xrootd-monitoring-shoveler sends over STOMP
// (SHOVELER_MQ=stomp: one JSON envelope per UDP datagram, to the topic
// /topic/xrootd.shoveler by default) from ActiveMQ or RabbitMQ's STOMP
// plugin, and hands the datagrams over in batches that the pipeline
// acknowledges once what they produced is durable.
//
// A message is acknowledged only after the pipeline called its batch's
// Ack, that is after the checkpoint that covers it is in the store. The
// subscription acknowledges cumulatively (ack mode client), in delivery
// order, one ACK per batch: the ACK of a batch's last message goes out
// once that batch and every earlier one are durable. (With an ACK per
// message, ack mode client-individual, ActiveMQ 5.17 stops dispatching to
// the subscription for up to 30 s at a time once several thousand ACKs
// have come in; see docs/stomp.md.) A message not acknowledged when the
// connection ends is redelivered, and
// the records it makes again carry the same record_id, which the store
// drops as duplicates. The broker sends at most Prefetch unacknowledged
// messages (activemq.prefetchSize for ActiveMQ, prefetch-count for
// RabbitMQ).
package stomp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/metrics"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/stompconn"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Config configures the STOMP source: the stomp_input section of the
// configuration. The fields tagged yaml:"-" are not configurable; tests
// and benchmarks tune them.
type Config struct {
	Enabled bool `yaml:"enabled" help:"consume shoveled packets from a STOMP broker (ActiveMQ; the WLCG bus)"`
	// Config is the broker.
	stompconn.Config `yaml:",inline"`
	// Destination is what to subscribe to: the shoveler's topic by
	// default, or a queue (/queue/NAME).
	Destination string `yaml:"destination" help:"destination to subscribe to: the shoveler's topic /topic/xrootd.shoveler by default, or /queue/NAME"`
	// Subscription names the durable subscription of a /topic/
	// destination (empty: not durable, and what is sent while xrdmon is
	// away is lost). ActiveMQ keys it by the client-id (this name) and
	// activemq.subscriptionName; RabbitMQ by the subscription id.
	Subscription string `yaml:"subscription" help:"name of the durable subscription to a /topic/ destination (the broker keeps messages while xrdmon is away); empty: not durable"`
	// Prefetch is how many unacknowledged messages the broker sends ahead.
	Prefetch int `yaml:"prefetch" help:"unacknowledged messages the broker may send ahead (activemq.prefetchSize, prefetch-count)"`

	// RelayOptions are the batching (BatchSize at most Prefetch), the
	// reconnect backoff and the drain after cancellation.
	source.RelayOptions `yaml:"-"`
	// Filter is the allow-list and address map applied to the shoveler's
	// "remote" (the listen section's).
	Filter source.FilterConfig `yaml:"-"`
}

// DefaultDestination is where the shoveler sends (its STOMP topic
// xrootd.shoveler, which it prefixes with /topic/).
const DefaultDestination = "/topic/xrootd.shoveler"

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Config:       stompconn.Config{Heartbeat: units.Duration(stompconn.DefaultHeartbeat)},
		Destination:  DefaultDestination,
		Subscription: "xrdmon",
		Prefetch:     20000,
		RelayOptions: source.DefaultRelayOptions(),
	}
}

// ErrStaleAck is returned by Batch.Ack when the connection the batch came
// from is gone: the broker will redeliver its messages.
var ErrStaleAck = errors.New("stomp ack: connection closed since delivery; messages will be redelivered")

// STOMP is the STOMP source.
type STOMP struct {
	cfg    Config
	log    *slog.Logger
	dec    source.ShovelerDecoder
	pool   *source.BatchPool
	dialer *stompconn.Dialer

	conn source.LastConn // the current connection's socket, for tests

	m source.RelayMetrics // xrdmon_stomp_*
}

// New checks cfg and registers the metrics on reg (nil: none). It does not
// connect; Run does.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*STOMP, error) {
	def := DefaultConfig()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.URL == "" {
		return nil, errors.New("stomp source: url is required")
	}
	if cfg.Destination == "" {
		cfg.Destination = def.Destination
	}
	units.Default(&cfg.Prefetch, def.Prefetch)
	cfg.Fill(cfg.Prefetch)
	filter, err := source.NewFilter(cfg.Filter, "stomp", reg)
	if err != nil {
		return nil, fmt.Errorf("stomp source: %w", err)
	}
	s := &STOMP{cfg: cfg, log: log, pool: source.NewBatchPool(cfg.BatchSize, cfg.BatchSize*source.BatchBytesPerPacket)}
	opts := stompconn.Options{Wrap: s.conn.Keep}
	if s.durable() {
		opts.ClientID = cfg.Subscription
	}
	s.dialer, err = stompconn.NewDialer(cfg.Config, opts)
	if err != nil {
		return nil, fmt.Errorf("stomp source: %w", err)
	}
	ms := metrics.NewSet(reg)
	s.m = source.NewRelayMetrics(ms, "stomp", "the STOMP broker")
	if err := ms.Err(); err != nil {
		return nil, fmt.Errorf("stomp source: %w", err)
	}
	s.dec = source.ShovelerDecoder{Filter: filter, Invalid: s.m.Invalid, Log: log, QuoteBody: true}
	return s, nil
}

// durable reports whether the subscription is a durable topic
// subscription.
func (s *STOMP) durable() bool {
	return s.cfg.Subscription != "" && strings.HasPrefix(s.cfg.Destination, "/topic/")
}

// Run consumes until ctx is cancelled, reconnecting with backoff whenever
// the connection is lost, and returns nil. After cancellation it stops
// consuming and waits up to DrainTimeout for the batches it handed out to
// be acknowledged before it disconnects. Batches handed out before a
// reconnect can no longer be acknowledged (Ack returns ErrStaleAck); the
// broker redelivers their messages, so the pipeline may see them twice.
func (s *STOMP) Run(ctx context.Context, out chan<- *source.Batch) error {
	r := source.Reconnect{Min: s.cfg.ReconnectMin, Max: s.cfg.ReconnectMax, Reconnects: s.m.Reconnects, Connected: s.m.Connected,
		Lost: func(err error, wait time.Duration) {
			s.log.Warn("STOMP connection lost; reconnecting", "url", s.dialer.URL(), "err", err, "wait", wait)
		}}
	r.Run(ctx, func() error { return s.session(ctx, out) })
	return nil
}

// session connects, subscribes, consumes until the connection ends, and
// closes it.
func (s *STOMP) session(ctx context.Context, out chan<- *source.Batch) error {
	// The library queues the frames to write on a channel, and a write
	// blocked on a full channel when the connection dies never returns:
	// the channel has room for an ACK of every message the broker may
	// have sent unacknowledged (there is one per batch).
	conn, err := s.dialer.Dial(ctx, stomp.ConnOpt.WriteChannelCapacity(s.cfg.Prefetch+64))
	if err != nil {
		return err
	}
	ak := newAcker(conn)
	defer ak.close()
	sub, err := conn.Subscribe(s.cfg.Destination, stomp.AckClient, s.subscribeOpts()...)
	if err != nil {
		_ = conn.MustDisconnect()
		return fmt.Errorf("subscribe %s: %w", s.cfg.Destination, err)
	}
	s.m.Connected.Set(1)
	s.log.Info("Consuming from STOMP", "url", s.dialer.URL(), "destination", s.cfg.Destination,
		"durable", s.durable(), "server", conn.Server())

	// The library hands messages over on a small channel and stops reading
	// the socket (heart-beats too) while it is full: a pump keeps it
	// drained. The broker sends at most Prefetch unacknowledged messages,
	// which bounds the pump's queue.
	msgs := make(chan *stomp.Message, s.cfg.Prefetch+1)
	go func() {
		defer close(msgs)
		for m := range sub.C {
			msgs <- m
		}
	}()

	c := &consumer{s: s, ctx: ctx, ak: ak, bt: source.NewBatcher(&s.cfg.RelayOptions, s.pool, out, nil, s.m.AckFailed)}
	for {
		select {
		case <-ctx.Done():
			c.stop()
			return nil
		case <-c.bt.Timer.C:
			if err := c.flush(); err != nil {
				return err
			}
		case m, ok := <-msgs:
			if !ok {
				_ = c.flush() // cannot be acknowledged any more, but let the pipeline count them
				return errors.New("subscription closed")
			}
			if m.Err != nil {
				_ = c.flush()
				_ = conn.MustDisconnect()
				return m.Err
			}
			if err := c.receive(m); err != nil {
				return err
			}
		}
	}
}

// subscribeOpts returns the SUBSCRIBE frame's headers: the prefetch in
// both brokers' spellings and, for a durable topic subscription, its name
// in both brokers' spellings (each broker ignores the other's headers).
func (s *STOMP) subscribeOpts() []func(*frame.Frame) error {
	p := strconv.Itoa(s.cfg.Prefetch)
	opts := []func(*frame.Frame) error{
		stomp.SubscribeOpt.Header("activemq.prefetchSize", p),
		stomp.SubscribeOpt.Header("prefetch-count", p),
	}
	if s.durable() {
		opts = append(opts,
			stomp.SubscribeOpt.Id(s.cfg.Subscription),
			stomp.SubscribeOpt.Header("activemq.subscriptionName", s.cfg.Subscription),
			stomp.SubscribeOpt.Header("durable", "true"),
			stomp.SubscribeOpt.Header("auto-delete", "false"),
		)
	}
	return opts
}

// consumer is a session's batching (source.Batcher), with an Ack that
// acknowledges its messages.
type consumer struct {
	s   *STOMP
	ctx context.Context
	bt  *source.Batcher
	ak  *acker

	last *stomp.Message // the batch's last message, whose ACK covers the batch
}

// receive adds a message to the batch, starting one if needed, and hands
// the batch over when it is full.
func (c *consumer) receive(m *stomp.Message) error {
	c.s.m.Received.Inc()
	b := c.bt.Batch()
	c.s.dec.Add(b, m.Body)
	m.Body = nil // copied into the batch; only the headers are kept, to acknowledge
	c.last = m
	if c.bt.Added() {
		return c.flush()
	}
	return nil
}

// flush hands the batch, if any, to the pipeline, with an Ack that
// acknowledges its messages; a batch of invalid messages only is
// acknowledged at once.
func (c *consumer) flush() error {
	pb, last := c.bt.Take(), c.last
	if pb == nil {
		return nil
	}
	c.last = nil
	b := c.ak.add(last)
	return c.bt.Hand(c.ctx, pb, func() error { return c.ak.ack(b) }, func() { c.ak.forget(b) })
}

// stop ends the session after a cancellation: the batch being filled was
// never handed over (the broker redelivers it later); those handed over
// are waited for, then the connection is closed with a DISCONNECT whose
// receipt says the broker has processed every acknowledgement.
func (c *consumer) stop() {
	c.bt.Drop()
	if !c.ak.drain(c.s.cfg.DrainTimeout) {
		c.s.log.Warn("STOMP batches not acknowledged before shutdown; they will be redelivered", "batches", c.ak.outstanding())
	}
	if err := c.ak.conn.Disconnect(); err != nil {
		c.s.log.Debug("STOMP disconnect", "err", err)
	}
}

// acker acknowledges a session's batches in delivery order, from a
// goroutine of its own. The subscription acknowledges cumulatively (ack
// mode client: an ACK covers its message and every earlier one of the
// subscription); batches may be acknowledged by the pipeline in any order,
// and the ACK of a batch's last message is sent once every earlier batch
// is acknowledged too, so an ACK never covers a message that is not yet
// durable. The goroutine keeps the pipeline from ever waiting on the
// connection: the library's writes queue behind its reads, and its reads
// wait for the consumer, which may wait for the pipeline.
type acker struct {
	conn *stomp.Conn

	mu     sync.Mutex
	order  source.AckOrder[*stomp.Message] // by each batch's last message
	latest *stomp.Message                  // the ACK to send next, nil when none
	closed bool                            // the session ended: acknowledgements are stale
	wake   chan struct{}                   // latest was set; closed by close
	done   chan struct{}                   // run has returned
}

func newAcker(conn *stomp.Conn) *acker {
	a := &acker{conn: conn, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go a.run(a.wake)
	return a
}

// add places a batch, whose last message is last, in the order.
func (a *acker) add(last *stomp.Message) *source.Pending[*stomp.Message] {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.order.Add(last)
}

// forget removes b, the batch added last, which was not handed over after
// all (its messages are redelivered).
func (a *acker) forget(b *source.Pending[*stomp.Message]) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.order.Forget(b)
}

// ack marks b acknowledged and queues the ACK of the longest run of
// acknowledged batches at the head of the order.
func (a *acker) ack(b *source.Pending[*stomp.Message]) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrStaleAck
	}
	last, ok := a.order.Done(b)
	if !ok {
		return nil // an earlier batch is still in flight; acknowledged with it later
	}
	a.latest = last
	select {
	case a.wake <- struct{}{}:
	default:
	}
	return nil
}

// run sends the ACKs until wake is closed (close sets a.wake to nil, so
// run gets its own copy).
func (a *acker) run(wake <-chan struct{}) {
	defer close(a.done)
	for range wake {
		a.mu.Lock()
		m := a.latest
		a.latest = nil
		a.mu.Unlock()
		if m == nil {
			continue
		}
		if err := a.conn.Ack(m); err != nil {
			a.mu.Lock()
			a.closed = true // the connection is gone: the broker redelivers
			a.mu.Unlock()
			return
		}
	}
}

// drain waits until every batch handed out is acknowledged and the ACK
// written, or timeout passes; it reports whether all were.
func (a *acker) drain(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		a.mu.Lock()
		idle := a.order.Len() == 0 && a.latest == nil
		closed := a.closed
		a.mu.Unlock()
		if idle {
			a.close()
			<-a.done
			return true
		}
		if closed || time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (a *acker) outstanding() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.order.Len()
}

// close ends the acker; later acknowledgements are stale.
func (a *acker) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.wake != nil {
		close(a.wake)
		a.wake = nil
	}
}
