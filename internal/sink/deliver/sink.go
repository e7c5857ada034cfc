package deliver

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/store"
)

// CheckSink is the first check of a broker or database sink's
// constructor: a store to read and a URL to deliver to. Its errors begin
// "new <kind> sink: ".
func CheckSink(kind string, st *store.Store, url string) error {
	if st == nil {
		return fmt.Errorf("new %s sink: nil store", kind)
	}
	if url == "" {
		return fmt.Errorf("new %s sink: empty url", kind)
	}
	return nil
}

// Discard returns log, or a logger that discards when log is nil.
func Discard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return log
}

// NewSink is the rest of a sink's constructor: it makes the sink's
// Deliverer with mk, which gets log (Discard) tagged with the sink's name
// (opts.Name), and the loop delivering st to it (New). Its errors begin
// "new <kind> sink: ".
func NewSink[D Deliverer](kind string, st *store.Store, opts Options, log *slog.Logger, reg prometheus.Registerer,
	mk func(log *slog.Logger) (D, error)) (*Loop, D, error) {
	log = Discard(log)
	d, err := mk(log.With("sink", opts.Name))
	if err != nil {
		return nil, d, fmt.Errorf("new %s sink: %w", kind, err)
	}
	l, err := New(st, d, opts, log, reg)
	if err != nil {
		return nil, d, fmt.Errorf("new %s sink: %w", kind, err)
	}
	return l, d, nil
}

// Sink is a broker sink (amqp, stomp): its Loop, and the close of its
// Deliverer's connection once the loop has ended. Make it with
// NewBrokerSink and call Run once.
type Sink struct {
	loop  *Loop
	kind  string
	close func()
}

// NewBrokerSink is the constructor of a broker sink of kind: CheckSink of
// st and url, then NewSink with mk. It does not connect: the Deliverer does
// when the loop runs, and keeps retrying while the broker is down. Run
// calls close on the Deliverer when the loop ends.
func NewBrokerSink[D Deliverer](kind string, st *store.Store, url string, opts Options, log *slog.Logger, reg prometheus.Registerer,
	mk func(log *slog.Logger) (D, error), close func(D)) (*Sink, error) {
	if err := CheckSink(kind, st, url); err != nil {
		return nil, err
	}
	l, d, err := NewSink(kind, st, opts, log, reg, mk)
	if err != nil {
		return nil, err
	}
	return &Sink{loop: l, kind: kind, close: func() { close(d) }}, nil
}

// Run delivers until ctx is cancelled, then delivers what is left of the
// backlog within Options.DrainTimeout, closes the connection and returns.
// Failures are retried forever; Run returns an error only when it cannot
// start (the cursor cannot be read).
func (s *Sink) Run(ctx context.Context) error { return s.loop.RunSink(ctx, s.kind, s.close) }

// RunSink runs the loop (Run), then calls close (when not nil). Its error
// begins "<kind> sink <name>: ".
func (l *Loop) RunSink(ctx context.Context, kind string, close func()) error {
	if close != nil {
		defer close()
	}
	if err := l.Run(ctx); err != nil {
		return fmt.Errorf("%s sink %s: %w", kind, l.Name(), err)
	}
	return nil
}

// SendAndWait is the Deliver of a Pipeliner: Send, then its wait.
func SendAndWait(ctx context.Context, p Pipeliner, batch []store.Entry) error {
	wait, err := p.Send(ctx, batch)
	if err != nil {
		return err
	}
	return wait(ctx)
}
