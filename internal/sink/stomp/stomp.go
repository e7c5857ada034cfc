// Package stomp is the STOMP sink, the WLCG side of the bus: it reads
// records and events from the store's log, from its own persisted cursor,
// and sends them to STOMP destinations (ActiveMQ, as CERN MONIT runs it,
// or RabbitMQ's STOMP plugin): the WLCG records by default, and,
// configured, the GRACC records and the events.
//
// # Delivery
//
// A batch of up to Options.BatchSize log entries is sent in one STOMP
// transaction: BEGIN, a persistent SEND per message, and a COMMIT that
// asks for a receipt. The receipt confirms the whole transaction (ActiveMQ
// stores a transaction's persistent messages before it answers the
// COMMIT); the cursor moves past the batch only then. Up to
// Options.InFlight transactions are open at once. A lost connection, an
// ERROR frame or a missing receipt fails the batch and those after it; they
// are sent again on a new connection after a backoff: delivery is at least
// once, and consumers drop duplicates by the xrdmon-id header (the
// record_id or event_id).
//
// A message larger than Config.MaxMessageBytes, or one the broker answers
// with an ERROR about its size, is refused: the delivery loop sets the
// entry aside in the store's dead letters and goes on.
//
// # Destinations
//
// The OSG collector (xrootd-monitoring-shoveler in collector mode,
// COLLECTOR_MQ=stomp) sends every message to its one topic, /topic/ +
// COLLECTOR_STOMP_TOPIC, as text/plain with a receipt per SEND. xrdmon
// sends each kind to its own destination (an empty name: not sent):
//
//	what                          destination (key)     body
//	record matching WLCGMatcher   destinations.wlcg     WLCG JSON (record.AppendWLCG)
//	record (a WLCG one: not with   destinations.records  GRACC JSON (Config.GRACCFlavour: record.AppendGRACC or AppendGRACCGo)
//	  Config.WLCGOnly)
//	event                         destinations.events   native event JSON (record.AppendEventJSON)
//
// Every SEND has the headers persistent:true, content-type (Config),
// xrdmon-type ("wlcg", "gracc" or the event type) and xrdmon-id (the
// record_id or event_id of its first entry); with RecordsPerMessage > 1 a
// message is a JSON array of up to that many entries and xrdmon-count
// says how many.
package stomp

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/sink/busmsg"
	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/stompconn"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Config configures the STOMP output: the outputs.stomp section of the
// configuration.
type Config struct {
	Enabled          bool `yaml:"enabled" help:"send records to a STOMP broker (ActiveMQ; the WLCG bus, CERN MONIT)"`
	stompconn.Config `yaml:",inline"`
	Destinations     Destinations `yaml:"destinations"`
	// Format is what messages hold (records per message, the GRACC
	// document, WLCG-only routing).
	busmsg.Format `yaml:",inline"`
	// ContentType is the content-type header of every message.
	ContentType string `yaml:"content_type" help:"content-type header of the messages"`
	// MaxMessageBytes refuses (sets aside as a dead letter) a message
	// whose body is larger.
	MaxMessageBytes units.ByteSize `yaml:"max_message_bytes" help:"largest message body sent; a larger one is set aside as a dead letter"`
}

// Destinations names the destination of each kind of message. An empty
// name means that kind is not sent.
type Destinations struct {
	WLCG    string `yaml:"wlcg" help:"destination of the records in the WLCG format (the records WLCG consumers take: CMS, /store, /user/dteam)"`
	Records string `yaml:"records" help:"destination of every transfer record in the GRACC format"`
	Events  string `yaml:"events" help:"destination of the events (XCache file closes, third-party copies, server starts, ...)"`
}

// DefaultConfig returns the defaults: no destination (the broker's
// operators assign them), one record per message, application/json,
// 1 MiB messages at most, the python GRACC document, WLCG records to
// both destinations; not enabled.
func DefaultConfig() Config {
	return Config{
		Config:          stompconn.Config{Heartbeat: units.Duration(stompconn.DefaultHeartbeat)},
		Format:          busmsg.DefaultFormat(),
		ContentType:     "application/json",
		MaxMessageBytes: 1 << 20,
	}
}

// Options tune the sink beyond Config (a batch is a transaction,
// AckTimeout bounds the wait for its COMMIT's receipt). Start from
// DefaultOptions.
type Options = busmsg.Options

// DefaultOptions returns busmsg.DefaultOptions with the cursor name
// "stomp".
func DefaultOptions() Options { return busmsg.DefaultOptions("stomp") }

// Sink sends the store's log to a STOMP broker. Create it with New and
// call Run once.
type Sink = deliver.Sink

// New returns a sink for cfg with DefaultOptions. See NewWithOptions.
func New(cfg Config, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (*Sink, error) {
	return NewWithOptions(cfg, DefaultOptions(), st, log, reg)
}

// NewWithOptions returns a sink sending the log of st as cfg says
// (deliver.NewBrokerSink). Metrics are registered on reg (nil: not
// registered); a nil log discards.
func NewWithOptions(cfg Config, opts Options, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (*Sink, error) {
	if !cfg.Destinations.any() {
		return nil, errors.New("new stomp sink: no destination configured")
	}
	if cfg.ContentType == "" {
		cfg.ContentType = DefaultConfig().ContentType
	}
	units.Default(&cfg.MaxMessageBytes, DefaultConfig().MaxMessageBytes)
	opts.Fill(DefaultOptions())
	return deliver.NewBrokerSink("stomp", st, cfg.URL, opts.Options, log, reg, func(log *slog.Logger) (*publisher, error) {
		return newPublisher(cfg, opts, log)
	}, (*publisher).close)
}
