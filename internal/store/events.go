package store

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

// EventQuery selects events (g-stream, redirects, FRM, ...): by time
// (Event.Time, From inclusive, To exclusive), type, server and site.
// Internal events (record.EventType.Internal) are never listed.
type EventQuery struct {
	From, To time.Time
	// Types, when set, keeps only events of these types.
	Types []record.EventType
	// Server matches ServerHost, or ServerIP for events without a host
	// name; Site matches exactly.
	Server, Site string
	// Limit caps the result (<= 0: 1000; at most 100000).
	Limit int
	// MaxBytes, when positive, bounds the stored bytes of the events of
	// one page (at least one event), as Query.MaxBytes.
	MaxBytes int
	// Newest returns the latest events first (default: oldest first).
	Newest bool
	// After continues a listing (the Next of the previous page).
	After *Position
}

func (q *EventQuery) match(e *record.Event, t int64) bool {
	switch {
	case !q.From.IsZero() && t < q.From.UnixNano(),
		!q.To.IsZero() && t >= q.To.UnixNano(),
		len(q.Types) > 0 && !slices.Contains(q.Types, e.Type),
		q.Server != "" && serverName(e.ServerHost, e.ServerIP) != q.Server,
		q.Site != "" && e.Site != q.Site:
		return false
	}
	return true
}

// QueryEvents returns a page of the events matching q, ordered by time
// (then sequence number), and the position of the next page (nil when
// there are no more). It visits the blocks holding events whose time span
// meets [From, To), in order, and stops as soon as no further block can
// hold an event that sorts before the Limit-th one found. Events have no
// postings: a filter by server or site is applied to every event of the
// window.
func (r *Reader) QueryEvents(ctx context.Context, q EventQuery) ([]record.Event, *Position, error) {
	cond, args := []string{"events > 0"}, []any{}
	if !q.From.IsZero() {
		cond, args = append(cond, "max_ns >= ?"), append(args, q.From.UnixNano())
	}
	if !q.To.IsZero() {
		cond, args = append(cond, "min_ns < ?"), append(args, q.To.UnixNano())
	}
	order := " ORDER BY min_ns, first_seq"
	if q.Newest {
		order = " ORDER BY max_ns DESC, first_seq DESC"
	}
	pg := pager[record.Event]{limit: pageLimit(q.Limit), newest: q.Newest, maxBytes: q.MaxBytes}
	return list(ctx, r, "query events", "SELECT first_seq, min_ns, max_ns FROM blocks WHERE "+strings.Join(cond, " AND ")+order, args,
		func(rows *sql.Rows, c *blockCand) (bool, error) { return true, rows.Scan(&c.first, &c.minNs, &c.maxNs) },
		entryEvent, pg, q.After, record.DecodeStoredEvent, eventTime, q.match)
}
