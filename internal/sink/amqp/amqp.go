// Package amqp is the RabbitMQ sink: it reads records and events from the
// store's log, from its own persisted cursor, and publishes them to AMQP
// exchanges in the formats the OSG xrootd-monitoring-collector publishes, so
// existing GRACC and WLCG consumers work unchanged.
//
// # Delivery
//
// Messages are persistent (delivery mode 2) and published on a channel in
// confirm mode. A batch of up to Options.BatchSize log entries is published
// with all its messages in flight, and up to Options.InFlight batches are
// published before the oldest one's confirms are awaited (a pipeline of
// confirm rounds); the cursor moves batch by batch, in order, past a batch
// only when all its confirms are acks. A nack, a closed channel, a lost
// connection or a confirm timeout fails that batch and abandons those
// after it; all are published again after a backoff on a new connection:
// delivery is at least once, and consumers drop duplicates by message id
// (the record_id).
//
// The publishes of a batch share the socket's write(2) calls (see
// coalescingConn), and with RecordsPerMessage > 1 several entries share a
// message: at one entry per message the broker's per-message cost
// dominates, and 10 per message is about three times faster (the
// benchmarks in amqp_bench_test.go).
//
// # Routing
//
// The defaults follow the OSG collector (Collectors/DetailedCollector.py and
// connection.sample.conf):
//
//	what                          exchange (OSG default)   routing key    body
//	record                        xrd.detailed             file-close     GRACC JSON (Config.GRACCFlavour: record.AppendGRACC or AppendGRACCGo)
//	record matching WLCGMatcher   xrd.wlcg_format          file-close     WLCG JSON (record.AppendWLCG)
//	event cache_file_close        xrd.cache.stash          file-close     native event JSON (record.AppendEventJSON)
//	event tpc                     xrd.tpc                  tpc            native event JSON
//	any other event               (none in OSG)            <event type>   native event JSON
//
// An empty exchange name in the configuration means that kind is not
// published. Unlike the OSG collectors, which send a WLCG-matching record
// only to the WLCG exchange, xrdmon by default sends it to both; with
// Config.WLCGOnly (wlcg_only) it sends it to the WLCG exchange only. Event
// bodies are xrdmon's native event JSON, not the OSG collector's renamed
// fields.
//
// Every message has content type application/json, the app id "xrdmon", its
// type ("gracc", "wlcg" or the event type) and, as message id, the record_id
// or event_id of its (first) entry. With RecordsPerMessage > 1 up to that
// many entries of the same exchange share one message, a JSON array, and the
// header "x-xrdmon-count" holds how many.
package amqp

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/sink/busmsg"
	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/units"
)

// The OSG collector's exchange names (connection.sample.conf), for
// configurations that want its layout. DefaultExchanges returns them.
const (
	OSGRecordsExchange = "xrd.detailed"
	OSGWLCGExchange    = "xrd.wlcg_format"
	OSGCacheExchange   = "xrd.cache.stash"
	OSGTPCExchange     = "xrd.tpc"
)

// Routing keys, as the OSG collector uses them. Events on the events
// exchange are routed by their type (record.EventType).
const (
	RoutingKeyFileClose = "file-close"
	RoutingKeyTPC       = "tpc"
)

// Config configures the AMQP output: the outputs.amqp section of the
// configuration.
type Config struct {
	Enabled         bool `yaml:"enabled" help:"publish records to AMQP"`
	amqpconn.Config `yaml:",inline"`
	Exchanges       Exchanges `yaml:"exchanges"`
	// Format is what messages hold (records per message, the GRACC
	// document, WLCG-only routing).
	busmsg.Format `yaml:",inline"`
}

// Exchanges names the exchange of each kind of message. An empty name
// means that kind is not published.
type Exchanges struct {
	Records string `yaml:"records" help:"exchange for transfer records in the GRACC format"`
	WLCG    string `yaml:"wlcg" help:"exchange for records in the WLCG format"`
	Cache   string `yaml:"cache" help:"exchange for XCache (g-stream) events"`
	TPC     string `yaml:"tpc" help:"exchange for third-party-copy events"`
	Events  string `yaml:"events" help:"exchange for other events (server start, redirects, ...)"`
}

// DefaultConfig returns the defaults: the OSG collector's exchanges, one
// record per message; not enabled.
func DefaultConfig() Config {
	return Config{Exchanges: DefaultExchanges(), Format: busmsg.DefaultFormat()}
}

// DefaultExchanges returns the OSG collector's exchange names. It has no
// events exchange: the OSG collector publishes no such events.
func DefaultExchanges() Exchanges {
	return Exchanges{
		Records: OSGRecordsExchange,
		WLCG:    OSGWLCGExchange,
		Cache:   OSGCacheExchange,
		TPC:     OSGTPCExchange,
	}
}

// Options tune the sink beyond Config. Start from DefaultOptions.
type Options struct {
	// Options are the delivery loop's (a batch is a confirm round), the
	// confirms' timeout (AckTimeout), the dial timeout and the WLCG rules.
	busmsg.Options
	// Heartbeat is the AMQP heartbeat interval (a dead peer is noticed
	// after about two of them).
	Heartbeat time.Duration
	// DeclareExchanges declares each configured exchange (durable, of
	// kind ExchangeKind) at every connect. Off by default: in OSG the
	// exchanges exist and belong to the broker's operators.
	DeclareExchanges bool
	// ExchangeKind is the kind used by DeclareExchanges ("topic").
	ExchangeKind string
}

// DefaultOptions returns busmsg.DefaultOptions with the cursor name
// "amqp", a 10 s heartbeat and topic exchanges.
func DefaultOptions() Options {
	return Options{Options: busmsg.DefaultOptions("amqp"), Heartbeat: 10 * time.Second, ExchangeKind: "topic"}
}

func (o *Options) fill() {
	d := DefaultOptions()
	o.Options.Fill(d.Options)
	units.Default(&o.Heartbeat, d.Heartbeat)
	if o.ExchangeKind == "" {
		o.ExchangeKind = d.ExchangeKind
	}
}

// Sink publishes the store's log to RabbitMQ. Create it with New and call
// Run once.
type Sink = deliver.Sink

// New returns a sink for cfg with DefaultOptions. See NewWithOptions.
func New(cfg Config, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (*Sink, error) {
	return NewWithOptions(cfg, DefaultOptions(), st, log, reg)
}

// NewWithOptions returns a sink publishing the log of st as cfg says
// (deliver.NewBrokerSink). Metrics are registered on reg (nil: not
// registered); a nil log discards.
func NewWithOptions(cfg Config, opts Options, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (*Sink, error) {
	if !cfg.Exchanges.any() {
		return nil, errors.New("new amqp sink: no exchange configured")
	}
	opts.fill()
	return deliver.NewBrokerSink("amqp", st, cfg.URL, opts.Options.Options, log, reg, func(log *slog.Logger) (*publisher, error) {
		return newPublisher(cfg, opts, log)
	}, (*publisher).close)
}
