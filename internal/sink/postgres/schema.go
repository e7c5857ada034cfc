package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// SchemaVersion is the version of the schema this package writes;
// docs/postgres.md documents each version.
const SchemaVersion = 7

// migrations[i] brings a schema from version i to i+1. "{{S}}" is replaced
// by the quoted schema name. Version 1 is the initial schema.
var migrations = []string{`
CREATE TABLE {{S}}.records (
	record_id       text        NOT NULL,
	end_time        timestamptz NOT NULL,
	start_time      timestamptz,
	received        timestamptz NOT NULL,
	reason          text        NOT NULL,
	server_ip       text        NOT NULL,
	server_host     text        NOT NULL,
	server_id       bigint      NOT NULL,
	server_stod     bigint      NOT NULL,
	site            text        NOT NULL,
	instance        text        NOT NULL,
	program         text        NOT NULL,
	version         text        NOT NULL,
	protocol        text        NOT NULL,
	user_name       text        NOT NULL,
	user_dictid     bigint      NOT NULL,
	client_host     text        NOT NULL,
	client_name     text        NOT NULL,
	ipv6            boolean     NOT NULL,
	auth_protocol   text        NOT NULL,
	dn              text        NOT NULL,
	mon_info        text        NOT NULL,
	vo              text        NOT NULL,
	role            text        NOT NULL,
	groups          text        NOT NULL,
	client_release  text        NOT NULL,
	app_name        text        NOT NULL,
	app_info        text        NOT NULL,
	token_subject   text        NOT NULL,
	token_user      text        NOT NULL,
	token_org       text        NOT NULL,
	token_role      text        NOT NULL,
	token_groups    text        NOT NULL,
	experiment      integer     NOT NULL,
	activity        integer     NOT NULL,
	file_id         bigint      NOT NULL,
	path            text        NOT NULL,
	file_size       bigint      NOT NULL,
	read_write      boolean     NOT NULL,
	forced          boolean     NOT NULL,
	read_bytes      bigint      NOT NULL,
	readv_bytes     bigint      NOT NULL,
	write_bytes     bigint      NOT NULL,
	has_ops         boolean     NOT NULL,
	read_ops        integer     NOT NULL,
	readv_ops       integer     NOT NULL,
	write_ops       integer     NOT NULL,
	readv_segs      bigint      NOT NULL,
	readv_segs_min  smallint    NOT NULL,
	readv_segs_max  smallint    NOT NULL,
	read_min        integer     NOT NULL,
	read_max        integer     NOT NULL,
	readv_min       integer     NOT NULL,
	readv_max       integer     NOT NULL,
	write_min       integer     NOT NULL,
	write_max       integer     NOT NULL,
	has_ssq         boolean     NOT NULL,
	read_sq_sum     double precision NOT NULL,
	readv_sq_sum    double precision NOT NULL,
	readv_seg_sq_sum double precision NOT NULL,
	write_sq_sum    double precision NOT NULL,
	PRIMARY KEY (record_id, end_time)
) PARTITION BY RANGE (end_time);

CREATE TABLE {{S}}.events (
	event_id    text        PRIMARY KEY,
	time        timestamptz NOT NULL,
	received    timestamptz NOT NULL,
	type        text        NOT NULL,
	provider    text        NOT NULL,
	server_ip   text        NOT NULL,
	server_host text        NOT NULL,
	server_id   bigint      NOT NULL,
	server_stod bigint      NOT NULL,
	site        text        NOT NULL,
	data        jsonb,
	valid       boolean     NOT NULL
);
CREATE INDEX events_time ON {{S}}.events (time);
`, `
CREATE TABLE IF NOT EXISTS {{S}}.records_pdefault PARTITION OF {{S}}.records DEFAULT;
`, `
ALTER TABLE {{S}}.records
	ADD COLUMN redirect_hops     integer NOT NULL DEFAULT 0,
	ADD COLUMN redirect_delay_ms bigint  NOT NULL DEFAULT 0,
	ADD COLUMN redirect_delay_max_ms bigint NOT NULL DEFAULT 0,
	ADD COLUMN io                jsonb;
`, `
CREATE TABLE {{S}}.rollups (
	collector       text        NOT NULL,
	step            integer     NOT NULL,
	bucket          timestamptz NOT NULL,
	key             bytea       NOT NULL,
	dims            text        NOT NULL,
	server          text,
	site            text,
	vo              text,
	user_name       text,
	identity        text,
	domain          text,
	protocol        text,
	app             text,
	dir             text,
	read_bytes      bigint      NOT NULL,
	readv_bytes     bigint      NOT NULL,
	write_bytes     bigint      NOT NULL,
	transfers       bigint      NOT NULL,
	partial         bigint      NOT NULL,
	partial_by      jsonb,
	users           bigint      NOT NULL,
	duration_ms_sum bigint      NOT NULL,
	duration_ms_p50 double precision NOT NULL,
	duration_ms_p90 double precision NOT NULL,
	duration_ms_p99 double precision NOT NULL,
	size_bytes_p50  double precision NOT NULL,
	size_bytes_p90  double precision NOT NULL,
	size_bytes_p99  double precision NOT NULL,
	updated         timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (collector, step, bucket, key)
);
CREATE INDEX rollups_dims ON {{S}}.rollups (step, dims, bucket);
CREATE TABLE {{S}}.rollup_exports (
	collector text        PRIMARY KEY,
	part      bigint      NOT NULL,
	updated   timestamptz NOT NULL
);
`, `
ALTER TABLE {{S}}.rollups ADD COLUMN locality text;
`, `
CREATE TABLE {{S}}.shard_leases (
	shard    text        PRIMARY KEY,
	epoch    bigint      NOT NULL,
	holder   text        NOT NULL,
	acquired timestamptz NOT NULL
);
CREATE TABLE {{S}}.shard_state (
	shard   text        NOT NULL,
	key     text        NOT NULL,
	epoch   bigint      NOT NULL,
	state   bytea       NOT NULL,
	updated timestamptz NOT NULL,
	PRIMARY KEY (shard, key)
);
`, `
CREATE TABLE {{S}}.shard_redirects (
	event_id  text        PRIMARY KEY,
	shard     text        NOT NULL,
	tx        xid8        NOT NULL DEFAULT pg_current_xact_id(),
	time      timestamptz NOT NULL,
	received  timestamptz NOT NULL,
	server_ip text        NOT NULL,
	server_id bigint      NOT NULL,
	data      jsonb       NOT NULL
);
CREATE INDEX shard_redirects_tx ON {{S}}.shard_redirects (tx);
CREATE INDEX shard_redirects_received ON {{S}}.shard_redirects (shard, received);
`}

// recordColumns are the records table's columns in table order; rowOf
// writes the values in this order.
var recordColumns = []string{
	"record_id", "end_time", "start_time", "received", "reason",
	"server_ip", "server_host", "server_id", "server_stod", "site", "instance", "program", "version",
	"protocol", "user_name", "user_dictid", "client_host", "client_name", "ipv6", "auth_protocol", "dn",
	"mon_info", "vo", "role", "groups", "client_release", "app_name", "app_info",
	"token_subject", "token_user", "token_org", "token_role", "token_groups", "experiment", "activity",
	"file_id", "path", "file_size", "read_write", "forced",
	"read_bytes", "readv_bytes", "write_bytes",
	"has_ops", "read_ops", "readv_ops", "write_ops", "readv_segs", "readv_segs_min", "readv_segs_max",
	"read_min", "read_max", "readv_min", "readv_max", "write_min", "write_max",
	"has_ssq", "read_sq_sum", "readv_sq_sum", "readv_seg_sq_sum", "write_sq_sum",
	"redirect_hops", "redirect_delay_ms", "redirect_delay_max_ms", "io",
}

var eventColumns = []string{
	"event_id", "time", "received", "type", "provider", "server_ip", "server_host",
	"server_id", "server_stod", "site", "data", "valid",
}

// Migrate creates the schema or brings it to SchemaVersion, under a
// transaction-scoped advisory lock so concurrent collectors do not race.
func Migrate(ctx context.Context, conn *pgx.Conn, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('xrdmon schema ' || $1))`, schema); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	for _, q := range []string{
		`CREATE SCHEMA IF NOT EXISTS ` + s,
		`CREATE TABLE IF NOT EXISTS ` + s + `.schema_version (
			version    integer PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	var v int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+s+`.schema_version`).Scan(&v); err != nil {
		return fmt.Errorf("migrate: read version: %w", err)
	}
	if v > SchemaVersion {
		return fmt.Errorf("migrate: schema %s is at version %d, newer than this xrdmon's %d", schema, v, SchemaVersion)
	}
	for ; v < SchemaVersion; v++ {
		if _, err := tx.Exec(ctx, strings.ReplaceAll(migrations[v], "{{S}}", s)); err != nil {
			return fmt.Errorf("migrate: to version %d: %w", v+1, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+s+`.schema_version (version) VALUES ($1)`, v+1); err != nil {
			return fmt.Errorf("migrate: record version %d: %w", v+1, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// Partition granularities for Options.Partition.
const (
	PartitionDay   = "day"
	PartitionMonth = "month"
)

// partitionOf returns the name suffix and bounds of the partition holding t.
func partitionOf(t time.Time, by string) (suffix string, from, to time.Time) {
	t = t.UTC()
	if by == PartitionMonth {
		from = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return from.Format("200601"), from, from.AddDate(0, 1, 0)
	}
	from = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return from.Format("20060102"), from, from.AddDate(0, 0, 1)
}

// Partition windows: a record whose end time (the server's clock) is
// further from the time the collector received it than this goes to the
// default partition (records_pdefault) rather than a partition of its own,
// so that servers with wrong clocks (or forged times) cannot create
// partitions without end.
const (
	partitionPast = 35 * 24 * time.Hour // day partitions; 13 months for month partitions
)

// ownPartition reports whether a record ending at t and received at now
// gets a partition of its own, with ahead partitions created in advance:
// t is at most partitionPast (13 months with month partitions) before now
// and at most ahead partitions after now's.
func ownPartition(t, now time.Time, by string, ahead int) bool {
	_, _, lastEnd := partitionOf(now, by)
	past := now.Add(-partitionPast)
	if by == PartitionMonth {
		past = now.AddDate(0, -13, 0)
		lastEnd = lastEnd.AddDate(0, ahead, 0)
	} else {
		lastEnd = lastEnd.AddDate(0, 0, ahead)
	}
	return !t.Before(past) && t.Before(lastEnd)
}

// createPartition creates records_p<suffix> for [from, to) if missing. Rows
// of that range already in the default partition (written when the range
// was outside the window) move into the new partition in the same
// transaction; PostgreSQL would otherwise refuse to create it.
func createPartition(ctx context.Context, conn *pgx.Conn, schema, suffix string, from, to time.Time) error {
	part := pgx.Identifier{schema, "records_p" + suffix}.Sanitize()
	parent := pgx.Identifier{schema, "records"}.Sanitize()
	def := pgx.Identifier{schema, "records_pdefault"}.Sanitize()
	bounds := fmt.Sprintf(`FOR VALUES FROM ('%s') TO ('%s')`, from.Format(time.RFC3339), to.Format(time.RFC3339))
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("create partition records_p%s: %w", suffix, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	// One creator at a time (several collectors may share the schema).
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('xrdmon partition ' || $1))`, part); err != nil {
		return fmt.Errorf("create partition records_p%s: %w", suffix, err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, part).Scan(&exists); err != nil {
		return fmt.Errorf("create partition records_p%s: %w", suffix, err)
	}
	if exists {
		return nil
	}
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS ` + part + ` (LIKE ` + parent + ` INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
		`WITH moved AS (DELETE FROM ` + def + ` WHERE end_time >= '` + from.Format(time.RFC3339) + `' AND end_time < '` + to.Format(time.RFC3339) + `' RETURNING *)
		 INSERT INTO ` + part + ` SELECT * FROM moved`,
		`ALTER TABLE ` + parent + ` ATTACH PARTITION ` + part + ` ` + bounds,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("create partition records_p%s: %w", suffix, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("create partition records_p%s: %w", suffix, err)
	}
	return nil
}
