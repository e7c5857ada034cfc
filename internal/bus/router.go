package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/backoff"
	"github.com/xrdmon/xrdmon/internal/metrics"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/units"
)

// RouterOptions tune a Router.
type RouterOptions struct {
	// Prefetch is how many of the shoveler's messages the broker sends
	// ahead, unacknowledged.
	Prefetch int
	// Batch is how many messages are republished before the Router waits
	// for their confirms and acknowledges them upstream (one multiple ack).
	Batch int
	// Wait is how long a batch that is not full waits for more messages.
	Wait time.Duration
	// ConfirmTimeout bounds the wait for the broker's confirms.
	ConfirmTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the wait between sessions.
	ReconnectMin, ReconnectMax time.Duration
}

// DefaultRouterOptions returns the defaults.
func DefaultRouterOptions() RouterOptions {
	return RouterOptions{Prefetch: 4000, Batch: 1000, Wait: 5 * time.Millisecond, ConfirmTimeout: 30 * time.Second,
		ReconnectMin: 500 * time.Millisecond, ReconnectMax: 30 * time.Second}
}

// Router republishes the shoveler's messages from the route queue to the
// consistent-hash exchange, keyed by XRootD server (see the package
// comment).
type Router struct {
	dialer *amqpconn.Dialer
	t      Topology
	opts   RouterOptions
	log    *slog.Logger

	routed     prometheus.Counter
	unkeyed    prometheus.Counter
	oversized  prometheus.Counter
	reconnects prometheus.Counter
}

// NewRouter returns a Router for t reaching the broker through d, with its
// metrics on reg (nil: none).
func NewRouter(d *amqpconn.Dialer, t Topology, opts RouterOptions, log *slog.Logger, reg prometheus.Registerer) (*Router, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if t.From == "" {
		return nil, errors.New("bus: a router needs the shoveler's exchange and a route queue")
	}
	def := DefaultRouterOptions()
	units.Default(&opts.Prefetch, def.Prefetch)
	if opts.Batch <= 0 || opts.Batch > opts.Prefetch {
		opts.Batch = min(def.Batch, opts.Prefetch)
	}
	units.Default(&opts.Wait, def.Wait)
	units.Default(&opts.ConfirmTimeout, def.ConfirmTimeout)
	if opts.ReconnectMin <= 0 || opts.ReconnectMax < opts.ReconnectMin {
		opts.ReconnectMin, opts.ReconnectMax = def.ReconnectMin, def.ReconnectMax
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ms := metrics.NewSet(reg)
	r := &Router{dialer: d, t: t, opts: opts, log: log.With("component", "router"),
		routed:     metrics.Counter(ms, "xrdmon_bus_routed_total", "Shoveler messages republished to the shard exchange and acknowledged upstream."),
		unkeyed:    metrics.Counter(ms, "xrdmon_bus_unkeyed_total", "Shoveler messages without a readable remote, routed with an empty key (their collector rejects them)."),
		oversized:  metrics.Counter(ms, "xrdmon_bus_oversized_total", "Messages larger than a shoveler message can be (the collector would reject them), acknowledged and dropped, not republished."),
		reconnects: metrics.Counter(ms, "xrdmon_bus_reconnects_total", "Router sessions that ended in an error and were started again."),
	}
	return r, ms.Err()
}

// Run routes until ctx ends, reconnecting after failures. Messages are
// acknowledged upstream only once republished and confirmed, so a failure
// loses nothing.
func (r *Router) Run(ctx context.Context) error {
	bo := backoff.Backoff{Min: r.opts.ReconnectMin, Max: r.opts.ReconnectMax}
	for {
		start := time.Now()
		err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > r.opts.ReconnectMax { // it had been working
			bo.Reset()
		}
		r.reconnects.Inc()
		wait := bo.Next()
		r.log.Warn("Router session ended; reconnecting", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (r *Router) session(ctx context.Context) error {
	conn, err := r.dialer.Dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	in, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := checkTopology(ctx, in, r.t); err != nil {
		return err
	}
	if err := in.Qos(r.opts.Prefetch, 0, false); err != nil {
		return fmt.Errorf("set prefetch: %w", err)
	}
	out, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := out.Confirm(false); err != nil {
		return fmt.Errorf("confirm mode: %w", err)
	}
	returns := out.NotifyReturn(make(chan amqp.Return, 1))
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	deliveries, err := in.ConsumeWithContext(ctx, r.t.RouteQueue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", r.t.RouteQueue, err)
	}
	r.log.Info("Routing", "from", r.t.RouteQueue, "to", r.t.Exchange, "shards", r.t.Shards, "broker", r.dialer.URL())

	var (
		key     []byte
		pending = make([]*amqp.DeferredConfirmation, 0, r.opts.Batch)
		wait    = time.NewTimer(time.Hour)
	)
	wait.Stop()
	for {
		// A batch: the first message when it comes, then what follows
		// within Wait, up to Batch.
		pending = pending[:0]
		var last uint64
		for len(pending) < r.opts.Batch {
			var d amqp.Delivery
			var ok bool
			if len(pending) == 0 {
				select {
				case d, ok = <-deliveries:
				case e := <-closed:
					return fmt.Errorf("connection closed: %v", e)
				case <-ctx.Done():
					return nil
				}
			} else {
				select {
				case d, ok = <-deliveries:
				case <-wait.C:
				}
			}
			if !ok && len(pending) == 0 {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("deliveries closed")
			}
			if !ok {
				break
			}
			if len(d.Body) > source.MaxShovelerMessage {
				// The collector would reject it as oversized: it is not
				// worth a shard queue's memory. Acknowledged with the
				// batch, or now when it is the batch's only message.
				r.oversized.Inc()
				if len(pending) > 0 {
					last = d.DeliveryTag
				} else if err := in.Ack(d.DeliveryTag, false); err != nil {
					return fmt.Errorf("ack upstream: %w", err)
				}
				continue
			}
			if len(pending) == 0 {
				wait.Reset(r.opts.Wait)
			}
			var routing string
			key, routing = routingKey(key, d.Body)
			if routing == "" {
				r.unkeyed.Inc()
			}
			dc, err := out.PublishWithDeferredConfirmWithContext(ctx, r.t.Exchange, routing, true, false, amqp.Publishing{
				ContentType: d.ContentType, DeliveryMode: amqp.Persistent, Body: d.Body,
			})
			if err != nil {
				return fmt.Errorf("publish to %s: %w", r.t.Exchange, err)
			}
			pending = append(pending, dc)
			last = d.DeliveryTag
		}
		wait.Stop()
		if err := r.confirm(ctx, pending, returns, closed); err != nil {
			return err
		}
		if err := in.Ack(last, true); err != nil {
			return fmt.Errorf("ack upstream: %w", err)
		}
		r.routed.Add(float64(len(pending)))
	}
}

// confirm waits for the broker's confirms of a batch; a nack, a returned
// message (no shard queue bound) or a timeout ends the session without
// acknowledging the batch upstream, so it is delivered again.
func (r *Router) confirm(ctx context.Context, pending []*amqp.DeferredConfirmation, returns <-chan amqp.Return, closed <-chan *amqp.Error) error {
	timeout := time.NewTimer(r.opts.ConfirmTimeout)
	defer timeout.Stop()
	for _, dc := range pending {
		select {
		case <-dc.Done():
			if !dc.Acked() {
				return errors.New("the broker refused a republished message (nack)")
			}
		case ret := <-returns:
			return fmt.Errorf("a message was returned unroutable by %s (%s): are its shard queues bound? (xrdmon bus setup)", ret.Exchange, ret.ReplyText)
		case e := <-closed:
			return fmt.Errorf("connection closed: %v", e)
		case <-timeout.C:
			return fmt.Errorf("confirms not received within %s", r.opts.ConfirmTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select { // a return comes before its ack: one may be waiting
	case ret := <-returns:
		return fmt.Errorf("a message was returned unroutable by %s (%s)", ret.Exchange, ret.ReplyText)
	default:
	}
	return nil
}

// routingKey returns the shard key of a shoveler message: the XRootD
// server's IP address (or host name, as the shoveler's map names it),
// without the port, so that every packet of a server hashes alike. A
// message that does not parse gets "". Only the envelope is read (the
// datagram stays base64); key is a reused buffer.
func routingKey(key, body []byte) ([]byte, string) {
	s, _, err := source.ParseShovelerEnvelope(body)
	key = key[:0]
	switch {
	case err != nil:
		return key, ""
	case s.Sender.Addr().IsValid():
		key = s.Sender.Addr().Unmap().AppendTo(key)
	default:
		key = append(key, s.Host...)
	}
	return key, string(key)
}
