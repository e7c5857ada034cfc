package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	amqp "github.com/rabbitmq/amqp091-go"
)

// AMQPConfig configures the RabbitMQ output.
type AMQPConfig struct {
	// URL is the broker, amqp://user:pass@host:port/vhost.
	URL string
	// Exchange receives the messages; it is declared (durable, of kind
	// ExchangeKind, default fanout) unless it already exists. Empty
	// publishes to the default exchange with RoutingKey = Queue.
	Exchange     string
	ExchangeKind string
	// RoutingKey of every message.
	RoutingKey string
	// Queue, when set, is declared durable and bound to Exchange, so that
	// messages published before a consumer starts are kept.
	Queue string
	// Batch is how many messages are published before waiting for their
	// confirms (default 256).
	Batch int
}

// AMQP is an Output publishing every datagram as a shoveler message
// ({"remote","version","data"}), persistent, with publisher confirms, as
// the shoveler does.
type AMQP struct {
	cfg     AMQPConfig
	conn    *amqp.Connection
	ch      *amqp.Channel
	pending []*amqp.DeferredConfirmation
	body    []byte
	// Published counts the messages the broker confirmed.
	Published int64
}

// NewAMQP connects, declares what cfg asks for and enables confirms.
func NewAMQP(cfg AMQPConfig) (*AMQP, error) {
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.ExchangeKind == "" {
		cfg.ExchangeKind = amqp.ExchangeFanout
	}
	if cfg.Exchange == "" && cfg.Queue == "" {
		return nil, errors.New("amqp output: need an exchange or a queue")
	}
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("amqp dial: %w", err)
	}
	a := &AMQP{cfg: cfg, conn: conn}
	if err := a.setup(); err != nil {
		conn.Close()
		return nil, err
	}
	return a, nil
}

func (a *AMQP) setup() error {
	ch, err := a.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp channel: %w", err)
	}
	if a.cfg.Exchange != "" {
		if err := ch.ExchangeDeclarePassive(a.cfg.Exchange, a.cfg.ExchangeKind, true, false, false, false, nil); err != nil {
			// The failed passive declare closed the channel.
			if ch, err = a.conn.Channel(); err != nil {
				return fmt.Errorf("amqp channel: %w", err)
			}
			if err := ch.ExchangeDeclare(a.cfg.Exchange, a.cfg.ExchangeKind, true, false, false, false, nil); err != nil {
				return fmt.Errorf("declare exchange %q: %w", a.cfg.Exchange, err)
			}
		}
	}
	if a.cfg.Queue != "" {
		if _, err := ch.QueueDeclare(a.cfg.Queue, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare queue %q: %w", a.cfg.Queue, err)
		}
		if a.cfg.Exchange != "" {
			key := a.cfg.RoutingKey
			if key == "" {
				key = "#"
			}
			if err := ch.QueueBind(a.cfg.Queue, key, a.cfg.Exchange, false, nil); err != nil {
				return fmt.Errorf("bind queue %q: %w", a.cfg.Queue, err)
			}
		} else if a.cfg.RoutingKey == "" {
			a.cfg.RoutingKey = a.cfg.Queue
		}
	}
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("amqp confirm mode: %w", err)
	}
	a.ch = ch
	return nil
}

// Bind implements Output.
func (a *AMQP) Bind(s []netip.AddrPort) ([]netip.AddrPort, error) { return s, nil }

// Write implements Output. It returns once every message of the batch is
// confirmed by the broker.
func (a *AMQP) Write(ctx context.Context, b []Packet) error {
	for i := range b {
		// The body is written to the connection before Publish returns, so
		// one buffer serves every message.
		a.body = AppendShoveler(a.body[:0], b[i].Sender, b[i].Data)
		dc, err := a.ch.PublishWithDeferredConfirmWithContext(ctx, a.cfg.Exchange, a.cfg.RoutingKey, false, false, amqp.Publishing{
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			Body:         a.body,
		})
		if err != nil {
			return fmt.Errorf("amqp publish: %w", err)
		}
		a.pending = append(a.pending, dc)
		if len(a.pending) >= a.cfg.Batch {
			if err := a.wait(ctx); err != nil {
				return err
			}
		}
	}
	return a.wait(ctx)
}

func (a *AMQP) wait(ctx context.Context) error {
	for i, dc := range a.pending {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("amqp confirm: %w", err)
		}
		if !ok {
			return fmt.Errorf("amqp confirm: message %d of batch nacked", i)
		}
		a.Published++
	}
	clear(a.pending)
	a.pending = a.pending[:0]
	return nil
}

// Close implements Output.
func (a *AMQP) Close() error {
	var errs []error
	if a.ch != nil {
		errs = append(errs, a.ch.Close())
	}
	errs = append(errs, a.conn.Close())
	return errors.Join(errs...)
}
