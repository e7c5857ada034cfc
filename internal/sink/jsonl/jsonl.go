// Package jsonl is the JSON-lines sink: it copies the store's log, record by
// record and event by event, to a file with one JSON object per line.
//
// Lines are records in their native JSON (record.AppendJSON) and g-stream
// events in theirs (record.AppendEventJSON); a reader tells them apart by
// the "record_id" or "event_id" key. The sink reads the store from its own
// cursor, named "jsonl:<path>", and moves the cursor only after the lines are
// fsynced (at least once). On start it also repairs what a crash can leave:
// a torn last line is cut off, and lines written after the last cursor
// update are recognised by the id of the file's last line, so a restart does
// not write them again (in practice exactly once).
package jsonl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// Defaults for a new Sink.
const (
	DefaultBatchSize    = 1000
	DefaultPollInterval = time.Second
)

// Sink writes the store's log to a JSON-lines file. Run must be called at
// most once at a time per path.
type Sink struct {
	path string
	name string
	st   *store.Store
	log  *slog.Logger

	batchSize    int
	pollInterval time.Duration

	written  prometheus.Counter
	errors   prometheus.Counter
	fsyncDur prometheus.Histogram
}

// New returns a sink appending to the file at path (created if needed) from
// st. Metrics are registered on reg (nil: not registered), labelled with the
// sink's cursor name; a nil log discards.
func New(path string, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (*Sink, error) {
	if path == "" {
		return nil, errors.New("new jsonl sink: empty path")
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	name := "jsonl:" + path
	labels := prometheus.Labels{"sink": name}
	s := &Sink{
		path: path, name: name, st: st, log: log.With("sink", name),
		batchSize: DefaultBatchSize, pollInterval: DefaultPollInterval,
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_records_written_total", ConstLabels: labels,
			Help: "Entries (records and events) written and made durable by the sink.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_sink_errors_total", ConstLabels: labels,
			Help: "Failed sink batches (each is retried).",
		}),
		fsyncDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "xrdmon_jsonl_fsync_duration_seconds", ConstLabels: labels,
			Help:    "Time to fsync one batch of lines.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.written, s.errors, s.fsyncDur} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("new jsonl sink: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Name returns the sink's cursor name in the store, "jsonl:<path>".
func (s *Sink) Name() string { return s.name }

// Run copies the log to the file until ctx is cancelled, then returns nil
// after the batch in progress is durable. Write or store errors are logged
// and retried after the poll interval; only failing to open the file at
// start is returned.
func (s *Sink) Run(ctx context.Context) error {
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("jsonl sink: open %s: %w", s.path, err)
	}
	defer f.Close()
	cursor, err := s.recover(ctx, f)
	if err != nil {
		return fmt.Errorf("jsonl sink: recover %s: %w", s.path, err)
	}
	s.log.Info("JSON-lines sink started", "path", s.path, "cursor", cursor)
	var buf []byte
	failing := false
	for ctx.Err() == nil {
		n, next, err := s.batch(ctx, f, cursor, &buf)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			s.errors.Inc()
			if !failing {
				s.log.Warn("JSON-lines sink batch failed, retrying", "err", err)
			}
			failing = true
		case failing:
			s.log.Info("JSON-lines sink recovered")
			failing = false
		}
		cursor = next
		if n > 0 && err == nil {
			continue // more may be waiting
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.pollInterval):
		}
	}
	s.log.Info("JSON-lines sink stopped", "cursor", cursor)
	return nil
}

// batch writes the entries after cursor, fsyncs and moves the cursor. On a
// write error the file is cut back to where the batch started.
func (s *Sink) batch(ctx context.Context, f *os.File, cursor int64, buf *[]byte) (int, int64, error) {
	entries, err := s.st.Read(ctx, cursor, s.batchSize)
	if err != nil || len(entries) == 0 {
		return 0, cursor, err
	}
	b := (*buf)[:0]
	for _, e := range entries {
		if e.Record != nil {
			b = record.AppendJSON(b, e.Record)
		} else {
			b = record.AppendEventJSON(b, e.Event)
		}
		b = append(b, '\n')
	}
	*buf = b
	off, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, cursor, fmt.Errorf("seek: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		if terr := f.Truncate(off); terr != nil {
			err = errors.Join(err, fmt.Errorf("undo partial write: %w", terr))
		}
		return 0, cursor, fmt.Errorf("write: %w", err)
	}
	start := time.Now()
	if err := f.Sync(); err != nil {
		if terr := f.Truncate(off); terr != nil {
			err = errors.Join(err, fmt.Errorf("undo write: %w", terr))
		}
		return 0, cursor, fmt.Errorf("fsync: %w", err)
	}
	s.fsyncDur.Observe(time.Since(start).Seconds())
	last := entries[len(entries)-1].Seq
	// The lines are durable; a failure from here on is repaired by recover
	// (the file's last line is entry last).
	if err := s.st.SetCursor(context.WithoutCancel(ctx), s.name, last); err != nil {
		return 0, cursor, fmt.Errorf("set cursor: %w", err)
	}
	s.written.Add(float64(len(entries)))
	return len(entries), last, nil
}

// recover cuts a torn last line and returns the cursor to resume from: the
// stored cursor, or the seq of the file's last line when the sink died
// between writing lines and moving the cursor.
func (s *Sink) recover(ctx context.Context, f *os.File) (int64, error) {
	cursor, err := s.st.Cursor(ctx, s.name)
	if err != nil {
		return 0, err
	}
	// Register the sink at once, so retention keeps what it has not read.
	if err := s.st.SetCursor(ctx, s.name, cursor); err != nil {
		return 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	if size == 0 {
		return cursor, nil
	}
	const tailMax = 4 << 20
	tailLen := min(size, tailMax)
	tail := make([]byte, tailLen)
	if _, err := f.ReadAt(tail, size-tailLen); err != nil {
		return 0, fmt.Errorf("read tail: %w", err)
	}
	if tail[len(tail)-1] != '\n' {
		i := bytes.LastIndexByte(tail, '\n')
		if i < 0 && size > tailMax {
			return 0, errors.New("last line longer than 4 MiB")
		}
		cut := size - tailLen + int64(i+1)
		s.log.Warn("Cutting torn last line of JSON-lines file", "path", s.path, "bytes", size-cut)
		if err := f.Truncate(cut); err != nil {
			return 0, fmt.Errorf("cut torn line: %w", err)
		}
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("fsync: %w", err)
		}
		tail = tail[:i+1]
	}
	if len(tail) == 0 {
		return cursor, nil
	}
	line := tail[:len(tail)-1]
	line = line[bytes.LastIndexByte(line, '\n')+1:]
	var ids struct {
		RecordID string `json:"record_id"`
		EventID  string `json:"event_id"`
	}
	if err := json.Unmarshal(line, &ids); err != nil {
		s.log.Warn("Last line of JSON-lines file is not JSON, not checking for lines past the cursor", "err", err)
		return cursor, nil
	}
	// Lines past the cursor are at most one batch: look for the last line
	// among the entries that follow the cursor.
	entries, err := s.st.Read(ctx, cursor, s.batchSize)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if (e.Record != nil && ids.RecordID != "" && e.Record.RecordID == ids.RecordID) ||
			(e.Event != nil && ids.EventID != "" && e.Event.EventID == ids.EventID) {
			s.log.Warn("JSON-lines file is ahead of the cursor, skipping lines already written",
				"cursor", cursor, "file_seq", e.Seq)
			if err := s.st.SetCursor(ctx, s.name, e.Seq); err != nil {
				return 0, err
			}
			return e.Seq, nil
		}
	}
	return cursor, nil
}
