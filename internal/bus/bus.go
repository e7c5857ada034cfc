// Package bus shards the shoveler's messages over RabbitMQ by XRootD
// server, so that several collectors share a federation's load
// (docs/scale-out.md).
//
// The topology, declared by Setup (idempotent):
//
//	shoveled-xrd ──► xrdmon.route ──► Router ──► xrdmon.shards ──► xrdmon.shard.00
//	(the shoveler's   (a durable       (re-keys    (x-consistent-hash:    xrdmon.shard.01
//	 exchange)         queue)           by server)  a server's messages    ...
//	                                                always to one queue)  (single active consumer)
//
// The shoveler publishes with an empty routing key, so the hash cannot see
// the server. The Router consumes the shoveler's messages, reads each one's
// "remote" (the XRootD server's address) and republishes it to the
// consistent-hash exchange with the server's IP (or host name) as the
// routing key: every packet of a server lands in one shard queue, in the
// order the shoveler published it. A message is acknowledged upstream only
// once the broker has confirmed its republication, so a router that dies
// loses nothing (its unacknowledged messages are redelivered, at worst
// republished twice; the collectors drop the duplicate datagram). A
// message that does not parse is routed with an empty key, to one shard,
// whose collector counts and rejects it: nothing is dropped here.
//
// Each shard queue has single-active-consumer: however many collectors
// consume it, the broker delivers to one at a time and hands the queue to
// another when that one goes.
//
// The exchange type is the broker plugin rabbitmq_consistent_hash_exchange
// (shipped with RabbitMQ): `rabbitmq-plugins enable
// rabbitmq_consistent_hash_exchange`.
package bus

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Topology names the exchanges and queues of a sharded bus.
type Topology struct {
	// From is the shoveler's exchange, and RouteQueue the Router's input
	// queue bound to it (with FromKey). Empty From: no route queue (the
	// messages reach Exchange some other way, already keyed by server).
	From, FromKey, RouteQueue string
	// FromType, when set (fanout, topic), declares From (durable) if it
	// does not exist; empty: From must exist (the shoveler's brokers have
	// it).
	FromType string
	// Exchange is the consistent-hash exchange, QueuePrefix the prefix of
	// the Shards shard queues (QueuePrefix + "00", "01", ...).
	Exchange    string
	QueuePrefix string
	Shards      int
}

// DefaultTopology returns the names docs/scale-out.md uses, with 16
// shards: enough to spread over a dozen collectors, few enough to watch.
func DefaultTopology() Topology {
	return Topology{
		From: "shoveled-xrd", FromKey: "#", RouteQueue: "xrdmon.route",
		Exchange: "xrdmon.shards", QueuePrefix: "xrdmon.shard.", Shards: 16,
	}
}

// MaxShards bounds Shards (a shard queue per collector and more: a few
// hundred at most make sense).
const MaxShards = 1000

// Validate checks t.
func (t Topology) Validate() error {
	switch {
	case t.Exchange == "" || t.QueuePrefix == "":
		return errors.New("bus: the exchange and the queue prefix must be named")
	case t.Shards < 1 || t.Shards > MaxShards:
		return fmt.Errorf("bus: %d shards, want 1 to %d", t.Shards, MaxShards)
	case t.From != "" && t.RouteQueue == "":
		return errors.New("bus: a route queue is needed to read the shoveler's exchange")
	}
	return nil
}

// Queue returns the name of shard i's queue.
func (t Topology) Queue(i int) string {
	if t.Shards > 100 {
		return fmt.Sprintf("%s%03d", t.QueuePrefix, i)
	}
	return fmt.Sprintf("%s%02d", t.QueuePrefix, i)
}

// Queues returns every shard queue's name.
func (t Topology) Queues() []string {
	q := make([]string, t.Shards)
	for i := range q {
		q[i] = t.Queue(i)
	}
	return q
}

// ConsistentHash is the exchange type of the rabbitmq_consistent_hash_exchange plugin.
const ConsistentHash = "x-consistent-hash"

// ErrNoPlugin is returned by Setup when the broker does not know the
// consistent-hash exchange type: the plugin is not enabled.
var ErrNoPlugin = errors.New("the broker has no x-consistent-hash exchange type: enable it with `rabbitmq-plugins enable rabbitmq_consistent_hash_exchange`")

// Setup declares t on the broker: the consistent-hash exchange, the
// shard queues (durable, single active consumer) bound to it with equal
// weights, and the route queue (durable, single active consumer) bound to
// the shoveler's exchange. It is
// idempotent; what exists with other arguments is an error from the
// broker (a queue declared without single-active-consumer must be deleted
// first). It closes ch when it fails (the broker closes a channel on a
// failed declaration).
func Setup(conn *amqp.Connection, t Topology) error {
	if err := t.Validate(); err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("bus setup: open channel: %w", err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(t.Exchange, ConsistentHash, true, false, false, false, nil); err != nil {
		if ae, ok := errors.AsType[*amqp.Error](err); ok && ae.Code == amqp.CommandInvalid {
			return fmt.Errorf("bus setup: declare exchange %s: %w (%v)", t.Exchange, ErrNoPlugin, err)
		}
		return fmt.Errorf("bus setup: declare exchange %s: %w", t.Exchange, err)
	}
	for _, q := range t.Queues() {
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-single-active-consumer": true}); err != nil {
			return fmt.Errorf("bus setup: declare queue %s: %w", q, err)
		}
		// The binding key of a consistent-hash exchange is the queue's
		// weight: equal weights, equal shares of the servers.
		if err := ch.QueueBind(q, "1", t.Exchange, false, nil); err != nil {
			return fmt.Errorf("bus setup: bind queue %s: %w", q, err)
		}
	}
	if t.From != "" {
		if t.FromType != "" {
			if err := ch.ExchangeDeclare(t.From, t.FromType, true, false, false, false, nil); err != nil {
				return fmt.Errorf("bus setup: declare exchange %s: %w", t.From, err)
			}
		}
		// Single active consumer here too: a second router is a standby,
		// so that a server's messages keep their order.
		if _, err := ch.QueueDeclare(t.RouteQueue, true, false, false, false, amqp.Table{"x-single-active-consumer": true}); err != nil {
			return fmt.Errorf("bus setup: declare queue %s: %w", t.RouteQueue, err)
		}
		if err := ch.QueueBind(t.RouteQueue, t.FromKey, t.From, false, nil); err != nil {
			if ae, ok := errors.AsType[*amqp.Error](err); ok && ae.Code == amqp.NotFound {
				return fmt.Errorf("bus setup: the shoveler's exchange %q does not exist (start the shoveler, or declare it): %w", t.From, err)
			}
			return fmt.Errorf("bus setup: bind queue %s to %s: %w", t.RouteQueue, t.From, err)
		}
	}
	return nil
}

// checkTopology declares nothing new: it checks that the exchange and the
// route queue exist (passively), for a Router that must not create them.
func checkTopology(ctx context.Context, ch *amqp.Channel, t Topology) error {
	if err := ch.ExchangeDeclarePassive(t.Exchange, ConsistentHash, true, false, false, false, nil); err != nil {
		return fmt.Errorf("exchange %s (run `xrdmon bus setup`): %w", t.Exchange, err)
	}
	if _, err := ch.QueueDeclarePassive(t.RouteQueue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("queue %s (run `xrdmon bus setup`): %w", t.RouteQueue, err)
	}
	return ctx.Err()
}
