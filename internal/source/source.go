// Package source defines what xrdmon's inputs hand to the pipeline: batches of
// raw XRootD monitoring datagrams with their sender and arrival time. The
// subpackages udp, amqp and file implement sources; none of them decodes
// XRootD packets.
package source

import (
	"net/netip"
	"time"
)

// Packet is one monitoring datagram as received.
type Packet struct {
	// Data is the exact UDP payload; valid until the batch's Free is called.
	Data []byte
	// Sender is the sender address (after the NAT/address map), with an
	// IPv4-mapped IPv6 address unmapped to IPv4.
	Sender netip.AddrPort
	// Received is the collector's clock when the datagram (or the message
	// carrying it) arrived.
	Received time.Time
}

// Batch is a group of packets handed to the pipeline in one go.
//
// The pipeline owns a batch once it has received it: it must call Free exactly
// once (when no Packet.Data is referenced any more) and, for acknowledging
// sources, Ack once everything the batch produced is durable.
type Batch struct {
	Packets []Packet
	// Free returns the batch's buffers for reuse; the pipeline calls it once
	// it no longer references Data. May be nil.
	Free func()
	// Ack acknowledges the batch to its origin (RabbitMQ); the pipeline calls
	// it only after everything the batch produced is durable. nil for sources
	// that cannot acknowledge (UDP, files).
	Ack func() error
}
