package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/xrdmon/xrdmon/internal/record"
)

// schemaVersion is stored in PRAGMA user_version. FORMAT.md documents each
// version; migrations[i] brings a database from version i to i+1.
const schemaVersion = 10

// migrations[i] brings a database from version i to i+1 inside tx.
var migrations = []func(ctx context.Context, tx *sql.Tx) error{
	execMigration(schemaV1),
	migrateV2,
	execMigration(schemaV3),
	migrateV4,
	execMigration(schemaV5),
	execMigration(schemaV6),
	execMigration(schemaV7),
	execMigration(schemaV8),
	migrateV9,
	execMigration(schemaV10),
}

func execMigration(q string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, q)
		return err
	}
}

// schemaV1 is the initial schema (0 -> 1).
const schemaV1 = `
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
`

// schemaV2 replaces the records table (1 -> 2): text columns become ids
// into the names dictionary, and every index has a small key that grows
// with time within each id (see FORMAT.md).
const schemaV2 = `
DROP INDEX records_end;
DROP INDEX records_server_end;
DROP INDEX records_site_end;
DROP INDEX records_user_end;
DROP INDEX records_path;
ALTER TABLE records RENAME TO records_v1;

CREATE TABLE names (
	id   INTEGER PRIMARY KEY,
	kind INTEGER NOT NULL,
	name TEXT NOT NULL,
	UNIQUE (kind, name)
);

CREATE TABLE records (
	seq       INTEGER PRIMARY KEY,
	end_ns    INTEGER NOT NULL,
	rid       INTEGER NOT NULL,
	server_id INTEGER NOT NULL,
	ip_id     INTEGER NOT NULL,
	site_id   INTEGER NOT NULL,
	user_id   INTEGER NOT NULL,
	dir_id    INTEGER NOT NULL,
	file      TEXT NOT NULL,
	reason    TEXT NOT NULL,
	data      BLOB NOT NULL
);
CREATE UNIQUE INDEX records_key ON records (end_ns, rid);
CREATE INDEX records_server ON records (server_id, end_ns);
CREATE INDEX records_site ON records (site_id, end_ns);
CREATE INDEX records_user ON records (user_id, end_ns);
CREATE INDEX records_dir ON records (dir_id, end_ns);
`

// schemaV3 takes the two many-valued indexes off the append path (2 -> 3):
// records get a column ix, NULL when Append inserts a row and set to 1 by
// the index pass (Store.IndexNow), and records_user and records_dir only
// hold rows with ix set. Rows from before version 3 count as indexed
// through the column's default, without rewriting them; Append inserts
// NULL explicitly. meta 'indexed_seq' is the high-water mark of the pass:
// every record with seq <= it has ix set.
const schemaV3 = `
ALTER TABLE records ADD COLUMN ix INTEGER DEFAULT 1;
DROP INDEX records_user;
DROP INDEX records_dir;
CREATE INDEX records_user ON records (user_id, end_ns) WHERE ix IS NOT NULL;
CREATE INDEX records_dir ON records (dir_id, end_ns) WHERE ix IS NOT NULL;
INSERT INTO meta (key, value) SELECT 'indexed_seq', value FROM meta WHERE key = 'last_seq';
`

// migrateV2 creates the version 2 records table and moves the version 1
// rows into it, in seq order, keeping their sequence numbers.
func migrateV2(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, schemaV2); err != nil {
		return err
	}
	type v1row struct {
		seq, end                                       int64
		id, server, ip, site, user, path, reason, data string
	}
	old, err := queryAll(ctx, tx, "read version 1 records", func(rows *sql.Rows, r *v1row) error {
		return rows.Scan(&r.seq, &r.id, &r.end, &r.server, &r.ip, &r.site, &r.user, &r.path, &r.reason, &r.data)
	}, `SELECT seq, record_id, end_ns, server, server_ip, site, user_name, path, reason, data
		FROM records_v1 ORDER BY seq`)
	if err != nil {
		return err
	}
	d := newDict(1 << 20)
	for _, r := range old {
		var ids [5]int64
		dir, file := splitPath(r.path)
		for i, n := range []struct {
			k dictKind
			v string
		}{{kindServer, r.server}, {kindIP, r.ip}, {kindSite, r.site}, {kindUser, r.user}, {kindDir, dir}} {
			if ids[i], err = d.id(ctx, tx, n.k, n.v); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, insertRecordV2SQL, r.seq, r.end, ridOf(r.id),
			ids[0], ids[1], ids[2], ids[3], ids[4], file, r.reason, []byte(r.data)); err != nil {
			return fmt.Errorf("copy record %d: %w", r.seq, err)
		}
	}
	_, err = tx.ExecContext(ctx, `DROP TABLE records_v1`)
	return err
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
		if err := migrations[v](ctx, tx); err != nil {
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

// insertRecordV2SQL inserts a row into the version 2 table (migration).
const insertRecordV2SQL = `INSERT OR IGNORE INTO records
	(seq, end_ns, rid, server_id, ip_id, site_id, user_id, dir_id, file, reason, data)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// schemaV4 replaces the records and events tables by blocks of entries
// (3 -> 4); migrateV4 copies the rows. See FORMAT.md, "Blocks".
const schemaV4 = `
CREATE TABLE blocks (
	first_seq INTEGER PRIMARY KEY,
	last_seq  INTEGER NOT NULL,
	min_ns    INTEGER NOT NULL,
	max_ns    INTEGER NOT NULL,
	records   INTEGER NOT NULL,
	events    INTEGER NOT NULL,
	names     BLOB NOT NULL,
	data      BLOB NOT NULL
);
CREATE INDEX blocks_min ON blocks (min_ns);
CREATE INDEX blocks_max ON blocks (max_ns);
CREATE TABLE block_names (
	name_id   INTEGER NOT NULL,
	first_seq INTEGER NOT NULL,
	PRIMARY KEY (name_id, first_seq)
) WITHOUT ROWID;
ALTER TABLE state ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
DELETE FROM meta WHERE key = 'indexed_seq';
INSERT INTO meta (key, value) VALUES ('posted_seq', 0);
`

// schemaV5 adds the dead letters: entries a sink's destination refused for
// good (4 -> 5). See deadletter.go.
const schemaV5 = `
CREATE TABLE dead_letters (
	id       INTEGER PRIMARY KEY,
	sink     TEXT NOT NULL,
	seq      INTEGER NOT NULL,
	entry_id TEXT NOT NULL,
	kind     TEXT NOT NULL,
	data     BLOB NOT NULL,
	error    TEXT NOT NULL,
	time_ns  INTEGER NOT NULL
);
CREATE INDEX dead_letters_sink ON dead_letters (sink, id);
`

// schemaV6 adds the rollups (5 -> 6): additive parts of time buckets, and
// the rollup builder's state.
const schemaV6 = `
CREATE TABLE rollups (
	step  INTEGER NOT NULL,
	start INTEGER NOT NULL,
	part  INTEGER NOT NULL,
	data  BLOB NOT NULL,
	PRIMARY KEY (step, start, part)
) WITHOUT ROWID;
CREATE TABLE rollup_state (
	key  TEXT PRIMARY KEY,
	blob BLOB NOT NULL
) WITHOUT ROWID;
`

// schemaV7 stores a rollup part per spec (6 -> 7), so that a query reads
// only its spec's series; a part of version 6 holds every spec ('*'). It
// indexes parts by number, for the outputs that export what changed
// since the part they last exported.
const schemaV7 = `
CREATE TABLE rollups_v7 (
	step  INTEGER NOT NULL,
	start INTEGER NOT NULL,
	part  INTEGER NOT NULL,
	spec  TEXT NOT NULL,
	data  BLOB NOT NULL,
	PRIMARY KEY (step, start, part, spec)
) WITHOUT ROWID;
INSERT INTO rollups_v7 (step, start, part, spec, data) SELECT step, start, part, '*', data FROM rollups;
DROP TABLE rollups;
ALTER TABLE rollups_v7 RENAME TO rollups;
CREATE INDEX rollups_part ON rollups (part);
`

// schemaV8 sets an entry aside once per sink (7 -> 8): an isolation
// interrupted by an outage refuses the same entry again when it is
// retried, and that second refusal is not a second dead letter. Copies a
// version 7 store holds already are merged into the oldest.
const schemaV8 = `
DELETE FROM dead_letters WHERE id NOT IN (SELECT min(id) FROM dead_letters GROUP BY sink, seq);
CREATE UNIQUE INDEX dead_letters_entry ON dead_letters (sink, seq);
`

// migrateV9 changes nothing (8 -> 9): version 9 adds an entry kind to the
// blocks, progress snapshots (entryProgress), which a program of version 8
// would take for a corrupt block; the version number makes it refuse the
// store instead. Version 8 blocks are valid version 9 blocks, their
// progress events read as before.
func migrateV9(context.Context, *sql.Tx) error { return nil }

// schemaV10 keeps the rollup parts in a table with row ids (9 -> 10): a
// part is a few KiB, and a table without row ids keeps its rows in the
// B-tree of its key, where such rows spill into overflow pages and make
// every insert move them; a row id table keeps the key in an index of
// its own and the part in a leaf page. Inserting a flush's parts costs
// about half (1 to 6 KiB parts, 16 KiB pages).
const schemaV10 = `
CREATE TABLE rollups_v10 (
	step  INTEGER NOT NULL,
	start INTEGER NOT NULL,
	part  INTEGER NOT NULL,
	spec  TEXT NOT NULL,
	data  BLOB NOT NULL,
	UNIQUE (step, start, part, spec)
);
INSERT INTO rollups_v10 (step, start, part, spec, data) SELECT step, start, part, spec, data FROM rollups;
DROP TABLE rollups;
ALTER TABLE rollups_v10 RENAME TO rollups;
CREATE INDEX rollups_part ON rollups (part);
`

// migrateV4 creates the version 4 tables and moves the records and events
// of version 3 into blocks, in seq order, keeping their sequence numbers,
// then drops the old tables.
func migrateV4(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, schemaV4); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, `
		SELECT seq, 0, rid, '', end_ns, server_id, ip_id, site_id, user_id, '', '', data FROM records
		UNION ALL
		SELECT seq, 1, 0, event_id, time_ns, 0, 0, 0, 0, server, site, data FROM events
		ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("read version 3 entries: %w", err)
	}
	defer rows.Close()
	s := &Store{bb: newBlockBuilder(), m: newMetrics(nil)}
	d := newDict(1 << 20)
	bb := s.bb
	bb.reset(1)
	started := false
	flush := func() error {
		if bb.n == 0 {
			return nil
		}
		if err := s.writeBlock(ctx, tx, bb); err != nil {
			return err
		}
		bb.n = 0
		return nil
	}
	for rows.Next() {
		var (
			seq, rid, t           int64
			kind                  byte
			eventID, server, site string
			sid, ip, site1, usr   int64
			data                  []byte
		)
		if err := rows.Scan(&seq, &kind, &rid, &eventID, &t, &sid, &ip, &site1, &usr, &server, &site, &data); err != nil {
			return fmt.Errorf("read version 3 entries: %w", err)
		}
		if !started || bb.full() {
			if err := flush(); err != nil {
				return err
			}
			bb.reset(seq)
			started = true
		}
		var key uint64
		if kind == entryRecord {
			var r record.Record
			if err := record.DecodeStored(data, &r); err != nil {
				return fmt.Errorf("record %d: %w", seq, err)
			}
			key = entryID(r.RecordID)
			dk, err := d.id(ctx, tx, kindDir, dirKey(r.Path))
			if err != nil {
				return err
			}
			for _, id := range [5]int64{sid, ip, site1, usr, dk} {
				bb.post(id)
			}
		} else {
			key = entryID(eventID)
			for _, n := range [2]struct {
				k dictKind
				v string
			}{{kindServer, server}, {kindSite, site}} {
				id, err := d.id(ctx, tx, n.k, n.v)
				if err != nil {
					return err
				}
				bb.post(id)
			}
		}
		bb.add(kind, seq, key, t, data)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read version 3 entries: %w", err)
	}
	rows.Close()
	if err := flush(); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `DROP TABLE records; DROP TABLE events;`)
	return err
}
