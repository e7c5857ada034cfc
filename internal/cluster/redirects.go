package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/postgres"
)

// Redirects across shards (docs/scale-out.md, "Redirects across shards").
// A redirector and the data server it sends a client to hash to shards of
// their own, so the collector that makes the data server's record does not
// correlate the redirector. Each collector of a cluster therefore writes
// its shard's redirect events to shard_redirects as it commits them, and
// reads the other shards' ones at each of its commits (ForeignRedirects),
// for its redirect linker (correlate.Linker), which decides an open only
// twice the link window after it arrived: time enough for the redirector's
// collector to have committed the redirect.
//
// Each row carries the id of the transaction that wrote it (tx, xid8). A
// reader keeps a cursor: every row with a smaller tx has been read. A read
// takes the snapshot's xmin (every transaction before it has ended, so
// every row below it that will ever exist is visible) as the next cursor,
// and remembers the ids of the rows it read at or above it (transactions
// still running may commit rows there later, so that range is read again,
// and what was read already is skipped). So every row is read exactly once,
// whatever the order in which the writers' transactions commit, and the
// cursor (with those ids) is part of the linker's checkpoint
// (RedirectFeedState): after a restart or a failover, the reader goes on
// from the checkpoint as the linker's state does. A writing transaction
// left open in the database (idle in transaction) holds the cursor back
// while it lasts: the reads then go over the rows since it again, skipped
// by id, until it ends.

// redirectFeed is a Store's reading position in shard_redirects.
type redirectFeed struct {
	started bool              // cursor is valid (else: read the last firstLook)
	cursor  uint64            // every row with a smaller tx was read
	seen    map[string]uint64 // ids (and tx) of the rows read at or above cursor
	pruned  time.Time         // when this shard's old rows were last deleted
}

// firstLook is how far back, from the newest redirect shared, a collector
// with no feed checkpoint (its first start in a cluster) reads the other
// shards' redirects: longer than a redirect can wait for its open
// (correlate.Linker, four windows). From the newest row, not from now:
// the times are the collectors' (or a replay's input) clocks.
const firstLook = 10 * time.Minute

// redirectRetention is how long rows are kept (before the shard's newest:
// the times are the collector's, or a replay's input, clock); each shard's
// collector deletes its own older rows every pruneEvery.
const (
	redirectRetention = time.Hour
	pruneEvery        = 5 * time.Minute
)

// publishRedirects writes the redirect events among evs to shard_redirects
// (a redelivery's again are dropped by id). The caller holds c.mu, and the
// writer's connection is up (its Conn).
func (c *Store) publishRedirects(ctx context.Context, evs []record.Event) error {
	var ids, ips, data []string
	var times, recv []time.Time
	var sids []int64
	for i := range evs {
		e := &evs[i]
		if e.Type != record.EventRedirect || !e.Valid || len(e.Data) == 0 {
			continue
		}
		ids = append(ids, e.EventID)
		times = append(times, e.Time)
		recv = append(recv, e.Received)
		ips = append(ips, e.ServerIP)
		sids = append(sids, int64(e.ServerID))
		data = append(data, string(e.Data))
	}
	conn, err := c.w.Conn(ctx)
	if err != nil {
		return err
	}
	s := pgx.Identifier{c.lease.schema}.Sanitize()
	if len(ids) > 0 {
		_, err := conn.Exec(ctx, `INSERT INTO `+s+`.shard_redirects (event_id, shard, time, received, server_ip, server_id, data)
			SELECT u.id, $1, u.t, u.r, u.ip, u.sid, u.d::jsonb
			FROM unnest($2::text[], $3::timestamptz[], $4::timestamptz[], $5::text[], $6::bigint[], $7::text[]) AS u(id, t, r, ip, sid, d)
			ON CONFLICT (event_id) DO NOTHING`, c.lease.Shard, ids, times, recv, ips, sids, data)
		if err != nil {
			if postgres.Refused(err) {
				// A redirect PostgreSQL cannot hold (its event is kept
				// locally): the other shards do not link it.
				c.log.Warn("PostgreSQL refused redirects shared with the other shards", "err", err, "redirects", len(ids))
				return nil
			}
			return fmt.Errorf("share redirects: %w", err)
		}
	}
	if now := time.Now(); now.Sub(c.feed.pruned) >= pruneEvery {
		if _, err := conn.Exec(ctx, `DELETE FROM `+s+`.shard_redirects WHERE shard = $1
			AND received < (SELECT max(received) FROM `+s+`.shard_redirects WHERE shard = $1) - make_interval(secs => $2)`,
			c.lease.Shard, redirectRetention.Seconds()); err != nil {
			return fmt.Errorf("delete old shared redirects: %w", err)
		}
		c.feed.pruned = now
	}
	return nil
}

// ForeignRedirects returns the redirect events that the other shards'
// collectors have committed since the last call (each exactly once; see
// above), for the pipeline's redirect linker (pipeline.RedirectFeed).
func (c *Store) ForeignRedirects(ctx context.Context) ([]record.Event, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn, err := c.w.Conn(ctx)
	if err != nil {
		return nil, err
	}
	f := &c.feed
	var out []record.Event
	var xmin uint64
	s := pgx.Identifier{c.lease.schema}.Sanitize()
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var x string
		if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&x); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		var err error
		if xmin, err = strconv.ParseUint(x, 10, 64); err != nil {
			return fmt.Errorf("snapshot xmin %q: %w", x, err)
		}
		// The same snapshot (repeatable read) for the rows.
		rows, err := tx.Query(ctx, `SELECT event_id, tx::text, time, received, server_ip, server_id, data::text
			FROM `+s+`.shard_redirects
			WHERE shard <> $1 AND (CASE WHEN $2 THEN tx >= $3::text::xid8
				ELSE received > (SELECT max(received) FROM `+s+`.shard_redirects) - make_interval(secs => $4) END)
			ORDER BY tx, event_id`, c.lease.Shard, f.started, strconv.FormatUint(f.cursor, 10), firstLook.Seconds())
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var e record.Event
			var txt, data string
			var sid int64
			if err := rows.Scan(&e.EventID, &txt, &e.Time, &e.Received, &e.ServerIP, &sid, &data); err != nil {
				return fmt.Errorf("read: %w", err)
			}
			txid, err := strconv.ParseUint(txt, 10, 64)
			if err != nil {
				return fmt.Errorf("row tx %q: %w", txt, err)
			}
			if _, dup := f.seen[e.EventID]; dup {
				continue
			}
			if txid >= xmin {
				f.seen[e.EventID] = txid
			}
			e.Type, e.Provider, e.Valid = record.EventRedirect, "r", true
			e.ServerID = uint64(sid)
			e.Time, e.Received = e.Time.UTC(), e.Received.UTC()
			e.Data = []byte(data)
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		c.w.Close()
		return nil, fmt.Errorf("cluster store: other shards' redirects: %w", err)
	}
	f.started, f.cursor = true, max(f.cursor, xmin)
	for id, tx := range f.seen {
		if tx < f.cursor {
			delete(f.seen, id)
		}
	}
	return out, nil
}

// feedMagic starts a RedirectFeedState.
const feedMagic = "XRDMFEED1"

// RedirectFeedState returns the reading position of ForeignRedirects, for
// the pipeline to keep with the redirect linker's checkpoint.
func (c *Store) RedirectFeedState() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := &c.feed
	b := []byte(feedMagic)
	b = append(b, b2u(f.started))
	b = binary.AppendUvarint(b, f.cursor)
	b = binary.AppendUvarint(b, uint64(len(f.seen)))
	for id, tx := range f.seen {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
		b = binary.AppendUvarint(b, tx)
	}
	return b
}

// RestoreRedirectFeed sets the reading position from a RedirectFeedState.
func (c *Store) RestoreRedirectFeed(b []byte) error {
	if len(b) < len(feedMagic) || string(b[:len(feedMagic)]) != feedMagic {
		return errors.New("redirect feed state: bad magic")
	}
	d := codec.NewDec(b[len(feedMagic):])
	f := redirectFeed{started: d.Byte() != 0, cursor: d.Uvarint(), seen: map[string]uint64{}}
	for n, i := d.Count(2), 0; i < n && d.Err() == nil; i++ {
		id := string(d.UvarintBytes())
		f.seen[id] = d.Uvarint()
	}
	d.Done()
	if err := d.Err(); err != nil {
		return fmt.Errorf("redirect feed state: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f.pruned = c.feed.pruned
	c.feed = f
	return nil
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}
