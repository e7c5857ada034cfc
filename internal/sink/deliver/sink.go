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
