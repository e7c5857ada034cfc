// Package jsonl is the JSON-lines sink: it copies the store's log, record by
// record and event by event, to a file with one JSON object per line.
//
// Lines are records in their native JSON (record.AppendJSON) and g-stream
// events in theirs (record.AppendEventJSON); a reader tells them apart by
// the "record_id" or "event_id" key. With Config.Schema "gracc" or "wlcg"
// records are written in that format instead (GRACC in the flavour of
// Config.GRACCFlavour; with WLCGOnly, a record matching the WLCG rules is
// written as WLCG in place of GRACC, as the Go collector's file output
// does); those documents carry no record_id, so the restart repair below
// cannot recognise lines past the cursor and a batch may be written twice. The sink reads the store from its own
// cursor, named "jsonl:<path>", with the loop of package deliver, which moves
// the cursor only after the lines are fsynced (at least once). On start it also repairs what a crash can leave:
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

	"github.com/xrdmon/xrdmon/internal/metrics"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/deliver"
	"github.com/xrdmon/xrdmon/internal/store"
)

// Config configures the JSON-lines output: the outputs.jsonl section of
// the configuration.
type Config struct {
	Enabled bool   `yaml:"enabled" help:"append records as JSON lines to a file"`
	Path    string `yaml:"path" help:"file to append to; \"-\" is standard output"`
	// Schema is the format of record lines: record.SchemaNative,
	// SchemaGRACC or SchemaWLCG.
	Schema string `yaml:"schema" help:"format of record lines: native, gracc or wlcg"`
	// GRACCFlavour is the GRACC document with schema gracc:
	// record.GRACCPython or record.GRACCGo.
	GRACCFlavour string `yaml:"gracc_flavour" help:"with schema gracc: python (the Python xrootd-monitoring-collector's document) or go (the shoveler's collector mode)"`
	// WLCGOnly, with schema gracc, writes a record matching the WLCG rules
	// (record.DefaultWLCGMatcher) as a WLCG document instead of a GRACC
	// one, as the OSG collectors route them.
	WLCGOnly bool `yaml:"wlcg_only" help:"with schema gracc: write records matching the WLCG rules as WLCG documents instead"`
}

// DefaultConfig returns the defaults: standard output, native records,
// GRACC flavour python; not enabled.
func DefaultConfig() Config {
	return Config{Path: "-", Schema: record.SchemaNative, GRACCFlavour: record.GRACCPython}
}

// recordEncoder returns the appender of record lines cfg asks for.
func recordEncoder(cfg Config) (func(dst []byte, r *record.Record) []byte, error) {
	schema := cfg.Schema
	if schema == "" {
		schema = record.SchemaNative
	}
	enc, err := record.EncoderFlavour(schema, cfg.GRACCFlavour)
	if err != nil {
		return nil, err
	}
	if schema != record.SchemaGRACC || !cfg.WLCGOnly {
		return enc, nil
	}
	m := record.DefaultWLCGMatcher()
	return func(dst []byte, r *record.Record) []byte {
		if m.Match(r) {
			return record.AppendWLCG(dst, r)
		}
		return enc(dst, r)
	}, nil
}

// Defaults for a new Sink.
const (
	DefaultBatchSize    = 1000
	DefaultPollInterval = time.Second
)

// DefaultOptions returns the delivery options New uses: DefaultBatchSize
// entries per fsync, DefaultPollInterval polling, backoff from 200 ms to
// 30 s, 10 s drain, and no name (the cursor name is then "jsonl:<path>").
func DefaultOptions() deliver.Options {
	o := deliver.DefaultOptions()
	o.BatchSize = DefaultBatchSize
	o.PollInterval = DefaultPollInterval
	return o
}

// Sink writes the store's log to a JSON-lines file. Run must be called at
// most once at a time per path.
type Sink struct {
	path      string
	name      string
	batchSize int
	st        *store.Store
	log       *slog.Logger
	w         *fileWriter
	loop      *deliver.Loop
}

// New returns a sink appending to the file at cfg.Path (created if needed)
// from st, with DefaultOptions. See NewWithOptions.
func New(cfg Config, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (*Sink, error) {
	enc, err := recordEncoder(cfg)
	if err != nil {
		return nil, fmt.Errorf("new jsonl sink: %w", err)
	}
	s, err := NewWithOptions(cfg.Path, DefaultOptions(), st, log, reg)
	if err != nil {
		return nil, err
	}
	s.w.enc = enc
	return s, nil
}

// NewWithOptions returns a sink appending to the file at path (created if
// needed) from st; unset options take DefaultOptions, and an empty
// opts.Name the cursor name "jsonl:<path>". Metrics are registered on reg
// (nil: not registered), labelled with the cursor name; a nil log discards.
func NewWithOptions(path string, opts deliver.Options, st *store.Store, log *slog.Logger, reg prometheus.Registerer) (*Sink, error) {
	if path == "" {
		return nil, errors.New("new jsonl sink: empty path")
	}
	log = deliver.Discard(log)
	if opts.Name == "" {
		opts.Name = "jsonl:" + path
	}
	opts = opts.WithDefaults(DefaultOptions())
	w := &fileWriter{fsyncDur: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "xrdmon_jsonl_fsync_duration_seconds", ConstLabels: prometheus.Labels{"sink": opts.Name},
		Help:    "Time to fsync one batch of lines.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	})}
	l, err := deliver.New(st, w, opts, log, reg)
	if err != nil {
		return nil, fmt.Errorf("new jsonl sink: %w", err)
	}
	ms := metrics.NewSet(reg)
	if h := metrics.Add(ms, w.fsyncDur); h != w.fsyncDur {
		// Its histogram is labelled with the sink's name: another sink of
		// that name (the same file) already runs in this process.
		return nil, fmt.Errorf("new jsonl sink: a sink named %s already exists", opts.Name)
	}
	if err := ms.Err(); err != nil {
		return nil, fmt.Errorf("new jsonl sink: %w", err)
	}
	return &Sink{
		path: path, name: opts.Name, batchSize: opts.BatchSize, st: st,
		log: log.With("sink", opts.Name), w: w, loop: l,
	}, nil
}

// Name returns the sink's cursor name in the store, "jsonl:<path>" unless
// the options named it.
func (s *Sink) Name() string { return s.name }

// Run repairs the file (see recover), then copies the log to it until ctx
// is cancelled, then copies what it can of the backlog within the drain
// timeout and returns nil, even when ctx was cancelled before it started
// (a short file input can end first). Write and store errors are logged
// and retried with backoff; only failing to open or repair the file, or to
// read the cursor, at start is returned.
func (s *Sink) Run(ctx context.Context) error {
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("jsonl sink: open %s: %w", s.path, err)
	}
	defer f.Close()
	if err := s.recover(context.WithoutCancel(ctx), f); err != nil {
		return fmt.Errorf("jsonl sink: recover %s: %w", s.path, err)
	}
	s.w.f = f
	defer func() { s.w.f = nil }()
	if err := s.loop.Run(ctx); err != nil {
		return fmt.Errorf("jsonl sink %s: %w", s.path, err)
	}
	return nil
}

// fileWriter appends batches as lines to the sink's file; it is the
// deliver.Deliverer of the sink's loop.
type fileWriter struct {
	f        *os.File                                  // set by Run while it runs
	enc      func(dst []byte, r *record.Record) []byte // record lines; nil: native
	buf      []byte
	fsyncDur prometheus.Histogram
}

// Deliver appends one line per entry and fsyncs. On a failure the file is
// cut back to where the batch started.
func (w *fileWriter) Deliver(_ context.Context, entries []store.Entry) error {
	b := w.buf[:0]
	enc := w.enc
	if enc == nil {
		enc = record.AppendJSON
	}
	for _, e := range entries {
		if e.Record != nil {
			b = enc(b, e.Record)
		} else {
			b = record.AppendEventJSON(b, e.Event)
		}
		b = append(b, '\n')
	}
	w.buf = b
	off, err := w.f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("seek: %w", err)
	}
	if _, err := w.f.Write(b); err != nil {
		if terr := w.f.Truncate(off); terr != nil {
			err = errors.Join(err, fmt.Errorf("undo partial write: %w", terr))
		}
		return fmt.Errorf("write: %w", err)
	}
	start := time.Now()
	if err := w.f.Sync(); err != nil {
		if terr := w.f.Truncate(off); terr != nil {
			err = errors.Join(err, fmt.Errorf("undo write: %w", terr))
		}
		return fmt.Errorf("fsync: %w", err)
	}
	w.fsyncDur.Observe(time.Since(start).Seconds())
	// The lines are durable; if the cursor update that follows is lost,
	// recover finds them at the next start (the file's last line).
	return nil
}

// recover cuts a torn last line and, when the sink died between writing
// lines and moving the cursor, moves the stored cursor to the seq of the
// file's last line. It also registers the cursor, so that retention keeps
// what the sink has not read.
func (s *Sink) recover(ctx context.Context, f *os.File) error {
	cursor, err := s.st.Cursor(ctx, s.name)
	if err != nil {
		return fmt.Errorf("read cursor: %w", err)
	}
	// Register the sink at once, so retention keeps what it has not read.
	if err := s.st.SetCursor(ctx, s.name, cursor); err != nil {
		return fmt.Errorf("register cursor: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	size := fi.Size()
	if size == 0 {
		return nil
	}
	const tailMax = 4 << 20
	tailLen := min(size, tailMax)
	tail := make([]byte, tailLen)
	if _, err := f.ReadAt(tail, size-tailLen); err != nil {
		return fmt.Errorf("read tail: %w", err)
	}
	if tail[len(tail)-1] != '\n' {
		i := bytes.LastIndexByte(tail, '\n')
		if i < 0 && size > tailMax {
			return errors.New("last line longer than 4 MiB")
		}
		cut := size - tailLen + int64(i+1)
		s.log.Warn("Cutting torn last line of JSON-lines file", "path", s.path, "bytes", size-cut)
		if err := f.Truncate(cut); err != nil {
			return fmt.Errorf("cut torn line: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync: %w", err)
		}
		tail = tail[:i+1]
	}
	if len(tail) == 0 {
		return nil
	}
	line := tail[:len(tail)-1]
	line = line[bytes.LastIndexByte(line, '\n')+1:]
	var ids struct {
		RecordID string `json:"record_id"`
		EventID  string `json:"event_id"`
	}
	if err := json.Unmarshal(line, &ids); err != nil {
		s.log.Warn("Last line of JSON-lines file is not JSON, not checking for lines past the cursor", "err", err)
		return nil
	}
	// Lines past the cursor are at most one batch: look for the last line
	// among the entries that follow the cursor.
	entries, err := s.st.Read(ctx, cursor, s.batchSize)
	if err != nil {
		return fmt.Errorf("read store: %w", err)
	}
	for _, e := range entries {
		if (e.Record != nil && ids.RecordID != "" && e.Record.RecordID == ids.RecordID) ||
			(e.Event != nil && ids.EventID != "" && e.Event.EventID == ids.EventID) {
			s.log.Warn("JSON-lines file is ahead of the cursor, skipping lines already written",
				"cursor", cursor, "file_seq", e.Seq)
			if err := s.st.SetCursor(ctx, s.name, e.Seq); err != nil {
				return fmt.Errorf("move cursor past written lines: %w", err)
			}
			return nil
		}
	}
	return nil
}
