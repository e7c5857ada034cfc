package store

import (
	"context"
	"database/sql"
	"fmt"
)

// schemaVersion is stored in PRAGMA user_version. FORMAT.md documents each
// version; migrations[i] brings a database from version i to i+1.
const schemaVersion = 1

var migrations = []string{
	// 0 -> 1: the initial schema.
	`
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('last_seq', 0);

CREATE TABLE records (
	seq       INTEGER PRIMARY KEY,
	record_id TEXT NOT NULL UNIQUE,
	end_ns    INTEGER NOT NULL,
	start_ns  INTEGER NOT NULL,
	server    TEXT NOT NULL,
	server_ip TEXT NOT NULL,
	site      TEXT NOT NULL,
	user_name TEXT NOT NULL,
	path      TEXT NOT NULL,
	reason    TEXT NOT NULL,
	data      BLOB NOT NULL
);
CREATE INDEX records_end ON records (end_ns);
CREATE INDEX records_server_end ON records (server, end_ns);
CREATE INDEX records_site_end ON records (site, end_ns);
CREATE INDEX records_user_end ON records (user_name, end_ns);
CREATE INDEX records_path ON records (path);

CREATE TABLE events (
	seq      INTEGER PRIMARY KEY,
	event_id TEXT NOT NULL UNIQUE,
	time_ns  INTEGER NOT NULL,
	type     TEXT NOT NULL,
	server   TEXT NOT NULL,
	site     TEXT NOT NULL,
	data     BLOB NOT NULL
);
CREATE INDEX events_time ON events (time_ns);
CREATE INDEX events_server_time ON events (server, time_ns);

CREATE TABLE cursors (
	sink       TEXT PRIMARY KEY,
	seq        INTEGER NOT NULL,
	updated_ns INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE state (
	key        TEXT PRIMARY KEY,
	blob       BLOB NOT NULL,
	updated_ns INTEGER NOT NULL
) WITHOUT ROWID;
`,
}

// migrate brings the database on c to schemaVersion, one transaction per
// step.
func migrate(ctx context.Context, c *sql.Conn) error {
	var v int
	if err := c.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v > schemaVersion {
		return fmt.Errorf("schema version %d is newer than this program's %d", v, schemaVersion)
	}
	for ; v < schemaVersion; v++ {
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migrate to %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("migrate to %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("migrate to %d: set version: %w", v+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate to %d: commit: %w", v+1, err)
		}
	}
	return nil
}

const insertRecordSQL = `INSERT OR IGNORE INTO records
	(seq, record_id, end_ns, start_ns, server, server_ip, site, user_name, path, reason, data)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

const insertEventSQL = `INSERT OR IGNORE INTO events
	(seq, event_id, time_ns, type, server, site, data)
	VALUES (?, ?, ?, ?, ?, ?, ?)`
