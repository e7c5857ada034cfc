package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/busmsg"
	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/store"
)

// errNack is returned when the broker refused (nacked) a message.
var errNack = errors.New("broker nacked a message")

// publisher owns the connection. It is used by the loop goroutine only. It
// is a deliver.Pipeliner: the loop publishes the next batch while the
// previous batches' confirms are outstanding.
type publisher struct {
	cfg    Config
	opts   Options
	dialer *amqpconn.Dialer
	log    *slog.Logger
	pack   *busmsg.Packer[kind] // a message's routing key is its Key

	conn     *amqp.Connection
	ch       *amqp.Channel
	closed   chan *amqp.Error // the connection's close notification
	chClosed chan *amqp.Error // the channel's: the broker closes it to refuse a message

	// per-batch scratch, reused
	pending []*amqp.DeferredConfirmation   // the confirms of the batch being published
	free    [][]*amqp.DeferredConfirmation // pending slices of confirmed batches, for reuse
}

// newPublisher returns a publisher for cfg; opts must be filled.
func newPublisher(cfg Config, opts Options, log *slog.Logger) (*publisher, error) {
	dialer, err := amqpconn.NewDialer(cfg.Config, amqpconn.Options{
		Name: "output " + opts.Name, Timeout: opts.DialTimeout, Heartbeat: opts.Heartbeat,
		Wrap: func(c net.Conn) net.Conn { return newCoalescingConn(c) },
	})
	if err != nil {
		return nil, err
	}
	p := &publisher{cfg: cfg, opts: opts, dialer: dialer, log: log}
	e := cfg.Exchanges
	rt := busmsg.Routing[kind]{
		Names:     []string{kindRecords: e.Records, kindWLCG: e.WLCG, kindCache: e.Cache, kindTPC: e.TPC, kindEvents: e.Events},
		WLCG:      kindWLCG,
		Records:   kindRecords,
		RecordKey: RoutingKeyFileClose,
		Event:     eventRoute,
	}
	if p.pack, err = busmsg.NewPacker(rt, cfg.Format, opts.WLCG, p.publish); err != nil {
		return nil, err
	}
	return p, nil
}

// eventRoute returns the kind and routing key of an event's message: the
// OSG collector's cache and TPC exchanges, and the events exchange for the
// others, routed by their type.
func eventRoute(ev *record.Event) (kind, string) {
	switch ev.Type {
	case record.EventCacheFileClose:
		return kindCache, RoutingKeyFileClose
	case record.EventTPC:
		return kindTPC, RoutingKeyTPC
	}
	return kindEvents, string(ev.Type)
}

// kind indexes the message groups of a batch.
type kind int

const (
	kindRecords kind = iota
	kindWLCG
	kindCache
	kindTPC
	kindEvents
	numKinds
)

// connect dials the broker and opens a confirm-mode channel. The token
// file, when configured, is read again at each connect: the token is
// rotated by an external agent (and Send reconnects when it changes).
func (p *publisher) connect() error {
	conn, err := p.dialer.Dial(context.Background())
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return fmt.Errorf("enable confirms: %w", err)
	}
	if p.opts.DeclareExchanges {
		for k := range numKinds {
			name := p.pack.Name(k)
			if name == "" {
				continue
			}
			if err := ch.ExchangeDeclare(name, p.opts.ExchangeKind, true, false, false, false, nil); err != nil {
				conn.Close()
				return fmt.Errorf("declare exchange %s: %w", name, err)
			}
		}
	}
	p.conn, p.ch = conn, ch
	p.closed = conn.NotifyClose(make(chan *amqp.Error, 1))
	p.chClosed = ch.NotifyClose(make(chan *amqp.Error, 1))
	p.log.Debug("AMQP sink connected", "url", p.dialer.URL())
	return nil
}

func (p *publisher) close() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.ch, p.closed = nil, nil, nil
}

// Deliver publishes every message of batch and waits for all confirms.
// On any failure the connection is dropped; the next call reconnects.
func (p *publisher) Deliver(ctx context.Context, batch []store.Entry) error {
	return deliver.SendAndWait(ctx, p, batch)
}

// Send publishes every message of batch and returns without waiting for
// the confirms; wait waits for them. Several batches may be in flight on
// the channel: the deliver loop awaits them in order. On any failure
// (Send's or wait's) the connection is dropped; the next Send reconnects,
// and confirms still pending on the old connection are abandoned.
func (p *publisher) Send(ctx context.Context, batch []store.Entry) (wait func(context.Context) error, err error) {
	if p.conn == nil || p.conn.IsClosed() || p.dialer.TokenChanged() {
		p.close()
		if err := p.connect(); err != nil {
			return nil, err
		}
	}
	if n := len(p.free); n > 0 {
		p.pending, p.free = p.free[n-1][:0], p.free[:n-1]
	} else {
		p.pending = nil
	}
	if err := p.pack.Pack(ctx, batch); err != nil {
		p.close()
		return nil, err
	}
	pending, closed, chClosed := p.pending, p.closed, p.chClosed
	p.pending = nil
	return func(ctx context.Context) error {
		if err := p.wait(ctx, pending, closed, chClosed); err != nil {
			p.close()
			return err
		}
		clear(pending)
		p.free = append(p.free, pending[:0])
		return nil
	}, nil
}

// publish publishes m, a message of kind k holding n documents. The body
// buffer is reused at once: Publish has written it to the connection when
// it returns.
func (p *publisher) publish(ctx context.Context, k kind, m *busmsg.Message, n int) error {
	msg := amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    m.FirstID,
		Type:         m.Type,
		AppId:        "xrdmon",
		Body:         m.Body,
	}
	if p.pack.PerMessage() > 1 {
		msg.Headers = amqp.Table{"x-xrdmon-count": int32(n)}
	}
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.pack.Name(k), m.Key, false, false, msg)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", p.pack.Name(k), err)
	}
	p.pending = append(p.pending, dc)
	return nil
}

// wait waits for the confirms of one batch; closed and chClosed are the
// close notifications of the connection and channel it was published on.
func (p *publisher) wait(ctx context.Context, pending []*amqp.DeferredConfirmation, closed, chClosed chan *amqp.Error) error {
	if len(pending) == 0 {
		return nil
	}
	t := time.NewTimer(p.opts.AckTimeout)
	defer t.Stop()
	for _, dc := range pending {
		select {
		case <-dc.Done():
			if !dc.Acked() {
				if ch := p.ch; ch == nil || ch.IsClosed() {
					return channelClosed(chClosed)
				}
				return errNack
			}
		case err, ok := <-chClosed:
			if ok && err != nil {
				return channelClosed(singleErr(err))
			}
			return errors.New("channel closed before all confirms arrived")
		case err, ok := <-closed:
			if ok && err != nil {
				return fmt.Errorf("connection closed awaiting confirms: %w", err)
			}
			return errors.New("connection closed awaiting confirms")
		case <-t.C:
			return fmt.Errorf("confirms not received within %s", p.opts.AckTimeout)
		case <-ctx.Done():
			return fmt.Errorf("await confirms: %w", ctx.Err())
		}
	}
	return nil
}

// channelClosed is the error of a channel the broker closed while confirms
// were awaited. A 406 PRECONDITION_FAILED about the message size (a message
// over the broker's max_message_size) is a refusal of that message
// (deliver.ErrRefused): publishing it again fails again. A nack is not:
// RabbitMQ nacks for its own reasons (a full queue with reject-publish, an
// internal error), and the same message may be taken later.
func channelClosed(ch chan *amqp.Error) error {
	var err *amqp.Error
	select {
	case err = <-ch:
	default:
	}
	if err == nil {
		return errors.New("channel closed before all confirms arrived")
	}
	if refusedMessage(err) {
		return fmt.Errorf("%w: channel closed: %w", deliver.ErrRefused, err)
	}
	return fmt.Errorf("channel closed before all confirms arrived: %w", err)
}

// refusedMessage reports whether the broker closed the channel because of
// what a message is (its size), not because of the moment.
func refusedMessage(err *amqp.Error) bool {
	return err.Code == amqp.PreconditionFailed && strings.Contains(err.Reason, "max size")
}

// singleErr returns a closed channel holding err, for channelClosed.
func singleErr(err *amqp.Error) chan *amqp.Error {
	c := make(chan *amqp.Error, 1)
	c <- err
	return c
}
