package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

// encBuf holds the encoded entries of one batch back to back, with the end
// offset of each, in record's binary form (record.AppendBinary: about 5x
// faster to write and 40x faster to read than JSON). An event's Data must be
// valid JSON: a bad event is refused at Append instead of breaking every
// consumer later.
type encBuf struct {
	buf  []byte
	ends []int
}

var encPool = sync.Pool{New: func() any { return &encBuf{buf: make([]byte, 0, 1<<20)} }}

func (b *encBuf) addRecord(r *record.Record) {
	b.buf = record.AppendBinary(b.buf, r)
	b.ends = append(b.ends, len(b.buf))
}

func (b *encBuf) addEvent(e *record.Event) error {
	if len(e.Data) > 0 && !json.Valid(e.Data) {
		return errors.New("event data is not valid JSON")
	}
	b.buf = record.AppendEventBinary(b.buf, e)
	b.ends = append(b.ends, len(b.buf))
	return nil
}

// get returns the i-th encoded entry; it points into b.buf.
func (b *encBuf) get(i int) []byte {
	start := 0
	if i > 0 {
		start = b.ends[i-1]
	}
	return b.buf[start:b.ends[i]]
}

func (b *encBuf) release() {
	if cap(b.buf) > 64<<20 {
		return // don't keep a huge one-off buffer alive
	}
	b.buf = b.buf[:0]
	b.ends = b.ends[:0]
	encPool.Put(b)
}

// unixNanos returns t in Unix nanoseconds, 0 for the zero time.
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// recordTime is the time a record is indexed and retained by: End, else
// Start, else Received.
func recordTime(r *record.Record) int64 {
	switch {
	case !r.End.IsZero():
		return r.End.UnixNano()
	case !r.Start.IsZero():
		return r.Start.UnixNano()
	default:
		return unixNanos(r.Received)
	}
}

// serverName is the value of the indexed server column: the host name when
// known, else the address.
func serverName(host, ip string) string {
	if host != "" {
		return host
	}
	return ip
}

// Append writes recs and then evs to the log in one transaction and gives
// each new entry the next sequence number, in that order. When Append
// returns nil the batch is durable (see Options.Synchronous) and the input
// that produced it may be acknowledged. Entries whose record_id or event_id
// is already in the store (or earlier in the same batch) are skipped and
// counted in xrdmon_store_duplicates_total; they take no sequence number.
//
// On error nothing of the batch was written. ErrFull (possibly with
// ErrDiskFull) means the store has no room: retry later.
func (s *Store) Append(ctx context.Context, recs []record.Record, evs []record.Event) error {
	if len(recs)+len(evs) == 0 {
		return nil
	}
	start := time.Now()
	b := encPool.Get().(*encBuf)
	defer b.release()
	for i := range recs {
		if recs[i].RecordID == "" {
			return fmt.Errorf("append: record %d: empty record id: %w", i, ErrInvalid)
		}
		b.addRecord(&recs[i])
	}
	for i := range evs {
		if evs[i].EventID == "" {
			return fmt.Errorf("append: event %d: empty event id: %w", i, ErrInvalid)
		}
		if err := b.addEvent(&evs[i]); err != nil {
			return fmt.Errorf("append: encode event %s: %w", evs[i].EventID, err)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("append: %w", ErrClosed)
	}
	if err := s.checkRoom(ctx); err != nil {
		return fmt.Errorf("append: %w", err)
	}
	nrec, nev, dups, err := s.insert(ctx, recs, evs, b)
	if err != nil {
		s.m.appendErrors.Inc()
		if isDiskFull(err) {
			s.setFull(true, "disk full", err)
			s.m.fullRefusals.Inc()
			return fmt.Errorf("append: %w", fullErr{err})
		}
		return fmt.Errorf("append: %w", err)
	}
	s.setFull(false, "", nil)
	s.m.recordsAppended.Add(float64(nrec))
	s.m.eventsAppended.Add(float64(nev))
	s.m.duplicates.Add(float64(dups))
	s.m.batchDuration.Observe(time.Since(start).Seconds())
	return nil
}

// fullErr wraps a driver's disk-full error so that it matches both ErrFull
// and ErrDiskFull and still shows the driver's message.
type fullErr struct{ err error }

func (e fullErr) Error() string   { return "disk full: " + e.err.Error() }
func (e fullErr) Unwrap() []error { return []error{ErrFull, ErrDiskFull, e.err} }

// insert runs the transaction. Call with mu held.
func (s *Store) insert(ctx context.Context, recs []record.Record, evs []record.Event, b *encBuf) (nrec, nev, dups int, err error) {
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, 0, 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			s.rollback()
		}
	}()
	// The statements of the transaction run with a context that is never
	// cancelled: with a cancellable one the driver starts a goroutine and a
	// channel per statement execution to watch it (a few per 64 records).
	// Cancellation is checked between chunks instead; the deferred rollback
	// undoes the batch.
	parent := ctx
	ctx = context.WithoutCancel(ctx)
	seq := s.lastSeq.Load()
	args := s.args[:0]
	for i := 0; i < len(recs); {
		if err := parent.Err(); err != nil {
			return 0, 0, 0, err
		}
		n := min(len(recs)-i, chunkRows)
		if n < chunkRows {
			n = 1 // the tail goes row by row
		}
		args = args[:0]
		for j := i; j < i+n; j++ {
			if args, err = s.recordArgs(ctx, args, seq+1+int64(j-i), &recs[j], b.get(j)); err != nil {
				return 0, 0, 0, err
			}
		}
		if n == chunkRows {
			// Fast path: one statement for the chunk. It is INSERT OR
			// IGNORE, because a multi-row statement that may abort makes
			// SQLite copy every page it touches to a statement journal.
			// If a row was a duplicate, the chunk's rows are deleted
			// again and the chunk is redone row by row below, so that
			// duplicates take no sequence number.
			res, err := s.insChunk.ExecContext(ctx, args...)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("insert records: %w", err)
			}
			if k, _ := res.RowsAffected(); k == int64(n) {
				seq += int64(n)
				nrec += n
				i += n
				continue
			}
			if _, err := s.delChunk.ExecContext(ctx, seq+1, seq+int64(n)); err != nil {
				return 0, 0, 0, fmt.Errorf("undo records chunk: %w", err)
			}
		}
		for j := i; j < i+n; j++ {
			r := &recs[j]
			a := args[(j-i)*recordCols : (j-i+1)*recordCols]
			a[0] = seq + 1
			res, err := s.insRecord.ExecContext(ctx, a...)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("insert record %s: %w", r.RecordID, err)
			}
			if k, _ := res.RowsAffected(); k == 1 {
				seq++
				nrec++
			} else {
				dups++
			}
		}
		i += n
	}
	clear(args) // don't pin the batch's buffer
	s.args = args[:0]
	if err := parent.Err(); err != nil {
		return 0, 0, 0, err
	}
	for i := range evs {
		e := &evs[i]
		res, err := s.insEvent.ExecContext(ctx, seq+1, e.EventID, unixNanos(e.Time), string(e.Type),
			serverName(e.ServerHost, e.ServerIP), e.Site, b.get(len(recs)+i))
		if err != nil {
			return 0, 0, 0, fmt.Errorf("insert event %s: %w", e.EventID, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			seq++
			nev++
		} else {
			dups++
		}
	}
	if seq != s.lastSeq.Load() {
		if _, err := s.setLastSeq.ExecContext(ctx, seq); err != nil {
			return 0, 0, 0, fmt.Errorf("update last seq: %w", err)
		}
	}
	// COMMIT is not cancellable either: once started it must finish.
	if _, err := s.wc.ExecContext(ctx, "COMMIT"); err != nil {
		return 0, 0, 0, fmt.Errorf("commit: %w", err)
	}
	s.dict.commit()
	s.lastSeq.Store(seq)
	return nrec, nev, dups, nil
}

// chunkRows is the number of records per multi-row INSERT statement.
const chunkRows = 64

// recordCols is the number of values bound per record row.
const recordCols = 11

// recordArgs appends the recordCols values of r's row to args. It runs in
// the Append transaction (new names are inserted there).
func (s *Store) recordArgs(ctx context.Context, args []any, seq int64, r *record.Record, data []byte) ([]any, error) {
	dir, file := splitPath(r.Path)
	var ids [5]int64
	var err error
	for k, n := range [5]struct {
		k dictKind
		v string
	}{{kindServer, serverName(r.ServerHost, r.ServerIP)}, {kindIP, r.ServerIP}, {kindSite, r.Site}, {kindUser, r.User}, {kindDir, dir}} {
		if ids[k], err = s.dict.id(ctx, s.wc, n.k, n.v); err != nil {
			return args, fmt.Errorf("record %s: %w", r.RecordID, err)
		}
	}
	return append(args, seq, recordTime(r), ridOf(r.RecordID),
		ids[0], ids[1], ids[2], ids[3], ids[4], file, string(r.Reason), data), nil
}

// rollback ends a failed transaction. SQLite may already have rolled it back
// itself (e.g. on SQLITE_FULL); that is not an error.
func (s *Store) rollback() {
	s.dict.rollback()
	if _, err := s.wc.ExecContext(context.Background(), "ROLLBACK"); err != nil &&
		!strings.Contains(err.Error(), "no transaction is active") {
		s.log.Error("Store rollback failed", "err", err)
	}
}

// checkRoom enforces MaxBytes before a write: over the bound, it deletes the
// oldest entries every sink has passed; if that is not enough it returns
// ErrFull. Call with mu held.
func (s *Store) checkRoom(ctx context.Context) error {
	if s.opts.MaxBytes <= 0 {
		return nil
	}
	used, err := s.usedBytes(ctx)
	if err != nil {
		return err
	}
	if used < s.opts.MaxBytes {
		return nil
	}
	if used, err = s.reclaimLocked(ctx, s.opts.MaxBytes); err != nil {
		return err
	}
	if used >= s.opts.MaxBytes {
		err := fmt.Errorf("%d bytes used, max %d, nothing delivered left to drop: %w", used, s.opts.MaxBytes, ErrFull)
		s.setFull(true, "max bytes reached", err)
		s.m.fullRefusals.Inc()
		return err
	}
	return nil
}

// setFull logs transitions into and out of the full state (not every
// refused batch).
func (s *Store) setFull(full bool, why string, err error) {
	if s.full.Swap(full) == full {
		return
	}
	if full {
		s.log.Error("Store full, refusing appends until space is freed", "reason", why, "err", err,
			"max_bytes", s.opts.MaxBytes, "path", s.opts.Path)
	} else {
		s.log.Info("Store accepting appends again", "path", s.opts.Path)
	}
}
