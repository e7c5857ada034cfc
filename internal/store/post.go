package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// postInterval is how often a posting pass starts: the postings of the
// blocks written since the last pass are added to block_names, sorted by
// name. Posting every block as it is written would dirty one index page
// per distinct name in every commit (random writes, the trap version 2 fell
// into); in a pass each name's page is dirtied once. Query reads the blocks
// not yet posted by their names column, so results never depend on when a
// pass ran.
const postInterval = 10 * time.Second

// A pass is not inserted in one transaction: at 150,000 packets/s its
// 300,000 postings took 0.3–0.5 s, and every Append waited for it (a stall
// of the close→durable latency every postInterval). The sorted postings
// are queued instead, and each Append inserts the next postSpread-th of
// them (at least postChunk) in name order, so a name's page is still
// dirtied about once per pass and a pass ends within postSpread Appends.
// The mark 'posted_seq' moves in the transaction that inserts the last of
// them: until then Query takes none of the pass's blocks as posted, and
// after a crash the next pass inserts them again (INSERT OR IGNORE).
const (
	postSpread = 32
	postChunk  = 2048
)

// postQueue is a posting pass under way: its sorted postings, the next to
// insert, the mark it moves 'posted_seq' to when all are in, how many an
// Append inserts, and the time its inserts took so far. A rolled-back
// transaction drops it (rollback): the next pass lists its blocks again.
type postQueue struct {
	ps    []posting
	next  int
	last  int64
	share int
	took  time.Duration
}

// postDue reports whether an Append should post: a pass is under way, or
// the next is due.
func (s *Store) postDue() bool {
	return s.postQ.ps != nil || time.Since(s.lastPost) >= postInterval
}

// postLocked inserts the next postings of the pass under way, starting a
// pass first when none is (the postings of every block after meta
// 'posted_seq'), on c in the caller's transaction (call with mu held). With
// all, it inserts the rest of the pass at once. When the pass's last
// postings are in, it moves the mark (pendingPosted, 'posted_seq'). It
// returns the postings inserted.
func (s *Store) postLocked(ctx context.Context, c dbtx, all bool) (int, error) {
	q := &s.postQ
	if q.ps == nil {
		if err := s.startPass(ctx); err != nil || q.ps == nil {
			return 0, err
		}
	}
	start := time.Now()
	n := len(q.ps) - q.next
	if !all {
		n = min(n, q.share)
	}
	if n > 0 {
		if err := insertPostings(ctx, c, q.ps[q.next:q.next+n], &s.postArgs, &s.postBox); err != nil {
			return 0, err
		}
	}
	q.next += n
	if q.next == len(q.ps) {
		if _, err := c.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'posted_seq'`, q.last); err != nil {
			return 0, fmt.Errorf("update posted seq: %w", err)
		}
		s.pendingPosted = q.last
	}
	q.took += time.Since(start)
	return n, nil
}

// startPass queues the postings of every block after meta 'posted_seq',
// sorted by (name, block); none when there is no such block.
func (s *Store) startPass(ctx context.Context) error {
	t0 := time.Now()
	from := max(s.postedSeq.Load(), s.pendingPosted) // past a pass ended in this transaction
	rows, err := s.wc.QueryContext(ctx, `SELECT first_seq, names FROM blocks WHERE first_seq > ? ORDER BY first_seq`, from)
	if err != nil {
		return fmt.Errorf("list unposted blocks: %w", err)
	}
	ps := s.postings[:0]
	last := from
	for rows.Next() {
		var first int64
		var names []byte
		if err := rows.Scan(&first, &names); err != nil {
			rows.Close()
			return fmt.Errorf("list unposted blocks: %w", err)
		}
		ids, err := decodeIDs(names)
		if err != nil {
			rows.Close()
			return fmt.Errorf("block %d: %w", first, err)
		}
		for _, id := range ids {
			ps = append(ps, posting{id, first})
		}
		last = first
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return fmt.Errorf("list unposted blocks: %w", err)
	}
	s.lastPost = t0
	if last == from {
		return nil
	}
	slices.SortFunc(ps, func(a, b posting) int {
		if a.name != b.name {
			return int(a.name - b.name)
		}
		return int(a.first - b.first)
	})
	if ps == nil {
		ps = []posting{} // blocks without names: the pass only moves the mark
	}
	s.postings = ps
	s.postQ = postQueue{ps: ps, last: last, share: max(postChunk, (len(ps)+postSpread-1)/postSpread), took: time.Since(t0)}
	return nil
}

// dropQueued takes the blocks firsts (sorted), deleted by retention, out of
// the pass under way: their postings would outlive them.
func (s *Store) dropQueued(firsts []int64) {
	q := &s.postQ
	if q.ps == nil || len(firsts) == 0 {
		return
	}
	keep := q.ps[:q.next]
	for _, p := range q.ps[q.next:] {
		if _, gone := slices.BinarySearch(firsts, p.first); !gone {
			keep = append(keep, p)
		}
	}
	q.ps = keep
}

// PostNow adds the postings of every block written so far (Append does so
// in passes that start every postInterval, and Close once more). Tests
// and tools use it; queries are exact either way.
func (s *Store) PostNow(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("post: %w", ErrClosed)
	}
	return s.postTx(ctx)
}

// postTx ends the pass under way and posts every block after it, in its
// own transaction. Call with mu held.
func (s *Store) postTx(ctx context.Context) (err error) {
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("post: begin: %w", err)
	}
	defer func() {
		if err != nil {
			s.rollback()
		}
	}()
	underWay := s.postQ.ps != nil
	if _, err := s.postLocked(ctx, s.wc, true); err != nil {
		return fmt.Errorf("post: %w", err)
	}
	if underWay { // that pass ended: then the blocks written since it started
		s.postQ = postQueue{}
		if _, err := s.postLocked(ctx, s.wc, true); err != nil {
			return fmt.Errorf("post: %w", err)
		}
	}
	if _, err := s.wc.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		return fmt.Errorf("post: commit: %w", err)
	}
	s.postCommitted()
	return nil
}

// postCommitted follows a commit in which postLocked ran: a pass whose
// last postings are in ends, and its mark becomes current.
func (s *Store) postCommitted() {
	q := &s.postQ
	if q.ps != nil && q.next == len(q.ps) {
		s.m.postDuration.Observe(q.took.Seconds())
		*q = postQueue{}
	}
	if s.pendingPosted > s.postedSeq.Load() {
		s.postedSeq.Store(s.pendingPosted)
	}
}
