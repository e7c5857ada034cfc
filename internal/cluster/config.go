// Package cluster lets collectors of a bus cluster (docs/scale-out.md)
// share the shards of the input: a collector holds its shard through a
// Lease and keeps, through a Store, what another collector needs to take
// the shard over in PostgreSQL.
// What the Store keeps there: the records and events (the
// records and events tables, deduplicated by id) and the correlation
// checkpoint (shard_state), written before the input they cover is
// acknowledged. A local disk that vanishes with its machine then loses
// nothing: the next holder of the shard restores the checkpoint from
// PostgreSQL, and the broker redelivers what was not acknowledged.
//
// Fencing: a Lease is a session advisory lock, held on its own connection
// for as long as the collector runs, and an epoch in shard_leases that
// each new holder increments. Every checkpoint is written in a
// transaction that reads the epoch FOR SHARE and writes only if it is the
// holder's: a collector that lost its lease (its connection to PostgreSQL
// broke, another took the shard) can never overwrite the newer holder's
// state, and its commit fails, so it acknowledges nothing more.
package cluster

import (
	"github.com/xrdmon/xrdmon/internal/confcheck"
	"github.com/xrdmon/xrdmon/internal/sink/postgres"
)

// Config is the cluster section of the configuration: a collector
// of a bus cluster holds its shard queue (amqp_input.queue) through a
// lease in this PostgreSQL database and keeps the shard's records, events
// and checkpoint there (docs/scale-out.md).
type Config struct {
	Enabled bool   `yaml:"enabled" help:"hold the shard (amqp_input.queue) through a lease in PostgreSQL and keep its records, events and checkpoint there, so another collector can take it over"`
	URL     string `yaml:"url" secret:"url" help:"PostgreSQL connection string of the cluster's state (may be outputs.postgres.url's)"`
	Schema  string `yaml:"schema" help:"schema of the cluster's tables (shard_leases, shard_state, shard_redirects, records, events)"`
	Holder  string `yaml:"holder" help:"this collector's name in shard_leases; empty: the host name"`
}

// DefaultConfig returns the defaults: off, schema xrdmon (the PostgreSQL
// output's).
func DefaultConfig() Config { return Config{Schema: postgres.DefaultOptions().Schema} }

// Validate checks c, the cluster section (the rules that span sections
// are the configuration's).
func (c Config) Validate() error {
	var p confcheck.Problems
	if c.Enabled {
		p.Check(c.URL != "", "url", "required when cluster.enabled")
		p.Check(c.Schema != "", "schema", "required when cluster.enabled")
	}
	postgres.CheckURL(&p, c.URL)
	return p.Err()
}
