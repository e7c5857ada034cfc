package busmsg

import (
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Options tune a bus sink beyond its configuration section. Start from
// DefaultOptions.
type Options struct {
	// Options tune the delivery loop: the cursor name, the log entries
	// of a batch (BatchSize: an AMQP confirm round, a STOMP transaction),
	// the batches in flight at once (InFlight), polling, backoff and the
	// drain after Run's context is cancelled.
	deliver.Options
	// AckTimeout bounds the wait for the broker's acknowledgement of a
	// batch (AMQP's confirms, the receipt of a STOMP COMMIT); on expiry the
	// connection is dropped and the batch sent again.
	AckTimeout time.Duration
	// DialTimeout bounds the TCP connect and the TLS and protocol
	// handshakes.
	DialTimeout time.Duration
	// WLCG selects the records sent in the WLCG format (nil:
	// record.DefaultWLCGMatcher).
	WLCG *record.WLCGMatcher
}

// DefaultOptions returns the defaults of the sink whose cursor is name:
// 1000 entries a batch and up to 3 batches in flight, 100 ms polling,
// backoff from 200 ms to 30 s, 10 s drain, 30 s for an acknowledgement,
// 10 s to connect.
func DefaultOptions(name string) Options {
	o := deliver.DefaultOptions()
	o.Name, o.InFlight, o.PollInterval = name, 3, 100*time.Millisecond
	return Options{Options: o, AckTimeout: 30 * time.Second, DialTimeout: 10 * time.Second}
}

// Fill sets the unset fields of o from d.
func (o *Options) Fill(d Options) {
	o.Options = o.Options.WithDefaults(d.Options)
	units.Default(&o.AckTimeout, d.AckTimeout)
	units.Default(&o.DialTimeout, d.DialTimeout)
}
