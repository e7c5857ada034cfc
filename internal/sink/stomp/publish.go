package stomp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/busmsg"
	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/stompconn"
	"github.com/xrdmon/xrdmon/internal/store"
)

// publisher owns the connection. It is used by the loop goroutine only. It
// is a deliver.Pipeliner: the loop sends the next batch's transaction
// while earlier COMMITs await their receipts.
type publisher struct {
	cfg    Config
	opts   Options
	dialer *stompconn.Dialer
	log    *slog.Logger
	pack   *busmsg.Packer[kind] // an event message's Key is its Type

	conn *stomp.Conn
	tx   *stomp.Transaction // the transaction of the batch being sent
}

// kind indexes the message groups of a batch.
type kind int

const (
	kindWLCG kind = iota
	kindRecords
	kindEvents
	numKinds
)

func newPublisher(cfg Config, opts Options, log *slog.Logger) (*publisher, error) {
	d, err := stompconn.NewDialer(cfg.Config, stompconn.Options{Timeout: opts.DialTimeout})
	if err != nil {
		return nil, err
	}
	p := &publisher{cfg: cfg, opts: opts, dialer: d, log: log}
	ds := cfg.Destinations
	rt := busmsg.Routing[kind]{
		Names:   []string{kindWLCG: ds.WLCG, kindRecords: ds.Records, kindEvents: ds.Events},
		WLCG:    kindWLCG,
		Records: kindRecords,
		Event:   func(ev *record.Event) (kind, string) { return kindEvents, string(ev.Type) },
	}
	if p.pack, err = busmsg.NewPacker(rt, cfg.Format, opts.WLCG, p.send); err != nil {
		return nil, err
	}
	return p, nil
}

// connect dials the broker. The library queues the frames to write on a
// channel, and a write blocked on a full channel when the connection dies
// never returns: the channel has room for every frame of the transactions
// that may be open at once (two messages per entry, BEGIN and COMMIT).
//
// The sink asks for the broker's heart-beats only, and sends none: the
// library bounds the wait for a COMMIT's receipt by its own heart-beat
// interval (5 s at 10 s), so a broker slow to store a transaction would
// fail it and have it sent again, and the receipt that comes late then
// stalls the connection. The wait is bounded by Options.AckTimeout instead; a
// dead broker is still noticed by its missing heart-beats.
func (p *publisher) connect(ctx context.Context) error {
	frames := p.opts.InFlight*(2*p.opts.BatchSize+2) + 64
	hb := p.cfg.Heartbeat.D()
	conn, err := p.dialer.Dial(ctx, stomp.ConnOpt.WriteChannelCapacity(frames), stomp.ConnOpt.HeartBeat(0, hb))
	if err != nil {
		return err
	}
	p.conn = conn
	p.log.Debug("STOMP sink connected", "url", p.dialer.URL(), "server", conn.Server())
	return nil
}

func (p *publisher) close() {
	if p.conn != nil {
		_ = p.conn.MustDisconnect()
	}
	p.conn, p.tx = nil, nil
}

// Deliver sends batch and waits for its receipt.
func (p *publisher) Deliver(ctx context.Context, batch []store.Entry) error {
	return deliver.SendAndWait(ctx, p, batch)
}

// Send sends batch in a transaction and returns without waiting for the
// COMMIT's receipt; wait waits for it. On any failure (Send's or wait's)
// the connection is dropped; the next Send reconnects, and receipts still
// awaited on the old connection are abandoned.
func (p *publisher) Send(ctx context.Context, batch []store.Entry) (wait func(context.Context) error, err error) {
	if p.conn == nil {
		if err := p.connect(ctx); err != nil {
			return nil, err
		}
	}
	tx, err := p.conn.BeginWithError()
	if err != nil {
		p.close()
		return nil, fmt.Errorf("begin: %w", err)
	}
	p.tx = tx
	if err := p.pack.Pack(ctx, batch); err != nil {
		// Also after a refusal: the delivery loop abandons the batches
		// still in flight and starts afresh (deliver.Pipeliner), so the
		// connection they are on goes, and the open transaction with it.
		p.close()
		return nil, err
	}
	p.tx = nil
	done := make(chan error, 1)
	go func() { done <- tx.CommitWithReceipt() }()
	return func(ctx context.Context) error {
		t := time.NewTimer(p.opts.AckTimeout)
		defer t.Stop()
		var err error
		select {
		case err = <-done:
			if err != nil {
				err = commitFailed(err)
			}
		case <-t.C:
			err = fmt.Errorf("commit: no receipt within %s", p.opts.AckTimeout)
		case <-ctx.Done():
			err = fmt.Errorf("commit: %w", ctx.Err())
		}
		if err != nil {
			p.close()
		}
		return err
	}, nil
}

// commitFailed is the error of a COMMIT that got no receipt. An ERROR
// frame about a message's size (ActiveMQ's maxFrameSize, RabbitMQ's
// max_frame_size) is a refusal of what the batch holds (deliver.ErrRefused):
// sending it again fails again.
func commitFailed(err error) error {
	var se stomp.Error
	if errors.As(err, &se) && se.Frame != nil && se.Frame.Command == frame.ERROR && refusedMessage(se.Message) {
		return fmt.Errorf("%w: commit: %w", deliver.ErrRefused, err)
	}
	return fmt.Errorf("commit: %w", err)
}

// refusedMessage reports whether an ERROR frame's message is about what a
// message is (its size), not about the moment.
func refusedMessage(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "size") && (strings.Contains(m, "max") || strings.Contains(m, "large") || strings.Contains(m, "exceed"))
}

// send sends m, a message of kind k holding n documents, in the open
// transaction. The library keeps the body until the frame is written, so
// each message gets a copy.
func (p *publisher) send(_ context.Context, k kind, m *busmsg.Message, n int) error {
	if len(m.Body) > int(p.cfg.MaxMessageBytes) {
		return fmt.Errorf("%w: a %s message of %d bytes, over max_message_bytes (%d)", deliver.ErrRefused, m.Type, len(m.Body), p.cfg.MaxMessageBytes)
	}
	opts := []func(*frame.Frame) error{
		stomp.SendOpt.Header("persistent", "true"),
		stomp.SendOpt.Header("xrdmon-type", m.Type),
		stomp.SendOpt.Header("xrdmon-id", m.FirstID),
	}
	if p.pack.PerMessage() > 1 {
		opts = append(opts, stomp.SendOpt.Header("xrdmon-count", strconv.Itoa(n)))
	}
	body := append([]byte(nil), m.Body...)
	if err := p.tx.Send(p.pack.Name(k), p.cfg.ContentType, body, opts...); err != nil {
		return fmt.Errorf("send to %s: %w", p.pack.Name(k), err)
	}
	return nil
}
