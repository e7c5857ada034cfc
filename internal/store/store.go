// Package store is xrdmon's embedded store: the durable, append-only log of
// transfer records and g-stream events, with a persisted cursor per sink.
//
// Every record and event is appended here before the input that produced it
// is acknowledged; sinks then read the log from their own cursor, so a sink
// outage delays delivery and loses nothing. The store is one SQLite database
// (WAL journal); FORMAT.md beside this file describes the schema.
//
// A Store is safe for concurrent use by multiple goroutines. Writes (Append,
// SetCursor, PutState, retention) are serialised on one connection; reads
// (Read, Query, GetState) use a small pool and never wait for a writer.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/xrdmon/xrdmon/internal/signal"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Sync levels for Options.Synchronous.
const (
	// SyncFull makes every committed Append durable against power loss and
	// OS crashes: the WAL is fsynced at each commit.
	SyncFull = "FULL"
	// SyncNormal makes every committed Append durable against a crash or
	// kill -9 of the process (the WAL write has reached the OS), but the last
	// commits can be lost on power loss or an OS crash.
	SyncNormal = "NORMAL"
)

// Errors returned by the store. Compare with errors.Is.
var (
	// ErrFull is returned by Append when the store cannot take the batch:
	// it is over Options.MaxBytes and everything old enough to drop is still
	// awaited by a sink, or the disk (or SQLite's page limit) is full. Nothing
	// of the batch was written; the caller must not acknowledge its input and
	// should retry later (backpressure).
	ErrFull = errors.New("store full")
	// ErrDiskFull is returned (wrapped together with ErrFull) when SQLite or
	// the file system reported that no space is left (SQLITE_FULL, ENOSPC).
	// The transaction was rolled back and the database is intact.
	ErrDiskFull = errors.New("disk full")
	// ErrNotFound is returned by GetState for a key that was never put.
	ErrNotFound = errors.New("not found")
	// ErrInvalid is returned by Append for a record or event without an id.
	ErrInvalid = errors.New("invalid entry")
	// ErrClosed is returned by methods called after Close.
	ErrClosed = errors.New("store closed")
)

// Config configures the store: the store section of the configuration.
// Options adds the engine's knobs.
type Config struct {
	Path      string         `yaml:"path" help:"directory holding the store's files"`
	Retention units.Duration `yaml:"retention" help:"records older than this are deleted; 0 keeps them forever"`
	MaxBytes  units.ByteSize `yaml:"max_bytes" help:"the oldest records are deleted to stay under this size; 0 means no size limit"`
}

// DBFile is the name of the database file in Config.Path.
const DBFile = "xrdmon.db"

// DefaultConfig returns the defaults: ./xrdmon-data, records kept 90 days,
// no size bound.
func DefaultConfig() Config {
	return Config{Path: "./xrdmon-data", Retention: units.Duration(90 * 24 * time.Hour)}
}

// Options returns DefaultOptions with c's directory, retention and bound.
func (c Config) Options() Options {
	o := DefaultOptions()
	o.Path = filepath.Join(c.Path, DBFile)
	o.Retention = c.Retention.D()
	o.MaxBytes = int64(c.MaxBytes)
	return o
}

// Options configure a Store. Start from DefaultOptions.
type Options struct {
	// Path of the SQLite database file; "-wal" and "-shm" files are kept
	// beside it. The directory is created if needed.
	Path string
	// Retention is how long records and events are kept, by their time
	// (record End, event Time). Entries a registered sink has not yet passed
	// are kept regardless. Zero keeps everything.
	Retention time.Duration
	// RetentionInterval is how often Run applies retention and MaxBytes.
	RetentionInterval time.Duration
	// MaxBytes bounds the bytes used by the database (pages in use, not
	// counting the WAL, which journal_size_limit bounds separately). Zero
	// means no bound. When it is reached the oldest entries every sink has
	// passed are deleted, whatever their age; when none are left, Append
	// returns ErrFull. See FORMAT.md, "Disk use".
	MaxBytes int64
	// BatchSize is the number of rows per retention delete transaction and
	// the default max of Read. Callers of Append are expected to batch about
	// this many entries per call.
	BatchSize int
	// Synchronous is SyncFull (default) or SyncNormal.
	Synchronous string
	// BusyTimeout is how long a connection waits for a lock held by another
	// process (e.g. an sqlite3 shell) before failing.
	BusyTimeout time.Duration
	// ReadConns is the number of pooled read connections.
	ReadConns int
	// WALLimit is SQLite's journal_size_limit: the WAL file is truncated to
	// this size after a checkpoint.
	WALLimit int64
	// CacheBytes is the writer's page cache (SQLite cache_size): the
	// upper levels of the postings index and the names dictionary stay in
	// memory.
	CacheBytes int64
	// PageSize is the SQLite page size of a new database (ignored for an
	// existing one). Larger pages mean fewer WAL frames and syscalls per
	// batch; see the driver choice notes in driver.go.
	PageSize int
	// CheckpointPages is SQLite's wal_autocheckpoint: after a commit that
	// leaves the WAL longer than this many pages, it is folded into the
	// database.
	CheckpointPages int
}

// DefaultOptions returns the defaults: DefaultConfig's retention and
// bound, checked every minute, batches of 1000, synchronous=FULL.
func DefaultOptions() Options {
	c := DefaultConfig()
	return Options{
		Path:              DBFile,
		Retention:         c.Retention.D(),
		RetentionInterval: time.Minute,
		MaxBytes:          int64(c.MaxBytes),
		BatchSize:         1000,
		Synchronous:       SyncFull,
		BusyTimeout:       10 * time.Second,
		ReadConns:         4,
		WALLimit:          64 << 20,
		CacheBytes:        16 << 20,
		PageSize:          16384,
		CheckpointPages:   1000,
	}
}

func (o *Options) fill() error {
	d := DefaultOptions()
	if o.Path == "" {
		return errors.New("empty path")
	}
	units.Default(&o.RetentionInterval, d.RetentionInterval)
	units.Default(&o.BatchSize, d.BatchSize)
	if err := units.DefaultChoice(&o.Synchronous, d.Synchronous, "synchronous", SyncFull, SyncNormal); err != nil {
		return err
	}
	units.Default(&o.BusyTimeout, d.BusyTimeout)
	units.Default(&o.ReadConns, d.ReadConns)
	units.Default(&o.WALLimit, d.WALLimit)
	units.Default(&o.PageSize, d.PageSize)
	units.Default(&o.CheckpointPages, d.CheckpointPages)
	units.Default(&o.CacheBytes, d.CacheBytes)
	if o.Retention < 0 || o.MaxBytes < 0 {
		return errors.New("negative retention or max bytes")
	}
	return nil
}

// dictCacheSize bounds the writer's cache of name ids (see dict).
const dictCacheSize = 1 << 18

// Store is the durable record log. Create it with Open; it is safe for
// concurrent use.
type Store struct {
	opts Options
	log  *slog.Logger
	m    *metrics

	wdb *sql.DB // one connection, held in wc

	// mu serialises all writes on wc and guards the block builder, the
	// duplicate sets and the dictionary.
	mu       sync.Mutex
	wc       *sql.Conn
	bb       *blockBuilder
	postArgs []any     // reused by insertPostings
	postBox  boxer     // insertPostings' boxes (with ints)
	postings []posting // reused by the posting passes
	postQ    postQueue // the pass under way
	// postedSeq is meta 'posted_seq': every block with first_seq <= it
	// has its postings in block_names. pendingPosted is the mark of a
	// pass whose last postings' transaction has not committed yet;
	// lastPost the time the last pass started.
	postedSeq     atomic.Int64
	pendingPosted int64
	lastPost      time.Time
	dict          *dict
	closed        bool
	// recent holds the ids (ridOf) of the entries an earlier process
	// appended after its oldest checkpoint: a restart may produce them
	// again. batchIDs are the ids of the current Append.
	recent   map[uint64]struct{}
	batchIDs map[uint64]struct{}
	// listeners are told of every committed Append (Listen); appended is
	// the batch's entries as given to them, reused.
	listeners []func([]Entry)
	appended  []Entry
	grew      signal.Broadcast // notified after every Append that added entries

	*Reader // the read side: Read, Query, GetState

	lastSeq  atomic.Int64
	cursorMu sync.Mutex
	cursors  map[string]int64
	// running are the sinks that have asked for or moved their cursor
	// since Open: those of this process. A cursor that is not is an
	// output's that no longer runs (removed from the configuration).
	running  map[string]bool
	full     atomic.Bool // logged state of ErrFull, for transition logs
	pageSize int64
	lock     *lockFile // the one writer's lock, released by closeDBs
}

// Open opens (creating or migrating) the store at opts.Path and registers
// its metrics on reg (nil: not registered). A nil log discards.
func Open(opts Options, log *slog.Logger, reg prometheus.Registerer) (*Store, error) {
	if err := opts.fill(); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if dir := filepath.Dir(opts.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("open store: create dir: %w", err)
		}
	}
	lock, err := lockStore(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", opts.Path, err)
	}
	s := &Store{opts: opts, log: log, cursors: map[string]int64{}, dict: newDict(dictCacheSize),
		bb: newBlockBuilder(), batchIDs: make(map[uint64]struct{}), lock: lock,
		postBox: boxer{ints: make(map[int64]any)}}
	if err := s.open(); err != nil {
		s.closeDBs()
		return nil, fmt.Errorf("open store %s: %w", opts.Path, err)
	}
	s.m = newMetrics(s)
	if reg != nil {
		if err := s.m.register(reg); err != nil {
			s.closeDBs()
			return nil, fmt.Errorf("open store: register metrics: %w", err)
		}
	}
	log.Info("Store opened", "path", opts.Path, "last_seq", s.lastSeq.Load(),
		"sinks", len(s.cursors), "synchronous", opts.Synchronous, "dedup_window", len(s.recent))
	return s, nil
}

func (s *Store) open() error {
	ctx := context.Background()
	var err error
	if s.wdb, err = sql.Open(driverName, dsn(s.opts, false)); err != nil {
		return fmt.Errorf("open writer: %w", err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetConnMaxIdleTime(0)
	s.wdb.SetConnMaxLifetime(0)
	if s.wc, err = s.wdb.Conn(ctx); err != nil {
		return fmt.Errorf("connect writer: %w", err)
	}
	// page_size must be set before anything (journal mode included) is
	// written to a new database.
	if _, err := s.wc.ExecContext(ctx, fmt.Sprintf("PRAGMA page_size=%d", s.opts.PageSize)); err != nil {
		return fmt.Errorf("set page size: %w", err)
	}
	var mode string
	if err := s.wc.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return fmt.Errorf("set journal mode: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("journal mode is %q, want wal", mode)
	}
	for _, p := range []string{
		"PRAGMA synchronous=" + s.opts.Synchronous,
		fmt.Sprintf("PRAGMA journal_size_limit=%d", s.opts.WALLimit),
		fmt.Sprintf("PRAGMA cache_size=%d", -s.opts.CacheBytes/1024),
		"PRAGMA temp_store=MEMORY",
		fmt.Sprintf("PRAGMA wal_autocheckpoint=%d", s.opts.CheckpointPages),
	} {
		if _, err := s.wc.ExecContext(ctx, p); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	if err := migrate(ctx, s.wc); err != nil {
		return err
	}
	if err := s.wc.QueryRowContext(ctx, "PRAGMA page_size").Scan(&s.pageSize); err != nil {
		return fmt.Errorf("read page size: %w", err)
	}
	var last int64
	if err := s.wc.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'last_seq'`).Scan(&last); err != nil {
		return fmt.Errorf("read last seq: %w", err)
	}
	s.lastSeq.Store(last)
	rows, err := s.wc.QueryContext(ctx, `SELECT sink, seq FROM cursors`)
	if err != nil {
		return fmt.Errorf("read cursors: %w", err)
	}
	for rows.Next() {
		var name string
		var seq int64
		if err := rows.Scan(&name, &seq); err != nil {
			rows.Close()
			return fmt.Errorf("read cursors: %w", err)
		}
		s.cursors[name] = seq
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("read cursors: %w", err)
	}

	var posted int64
	if err := s.wc.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'posted_seq'`).Scan(&posted); err != nil {
		return fmt.Errorf("read posted seq: %w", err)
	}
	s.postedSeq.Store(posted)
	s.lastPost = time.Now()
	if err := s.dict.load(ctx, s.wc); err != nil {
		return err
	}
	if err := s.loadRecent(ctx); err != nil {
		return err
	}
	if s.Reader, err = newReader(s.opts); err != nil {
		return err
	}
	return nil
}

// writeLocked runs fn with mu held, unless the store is closed
// (ErrClosed); what starts the errors.
func (s *Store) writeLocked(what string, fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%s: %w", what, ErrClosed)
	}
	if err := fn(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Close closes the store. Appends in progress finish first; the WAL is
// checkpointed. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	ctx := context.Background()
	// Post the last blocks so the next open starts with none (best effort:
	// Query is exact without it).
	if err := s.postTx(ctx); err != nil {
		s.log.Warn("Store posting pass at close failed", "err", err)
	}
	// Best effort: keep the query planner's statistics fresh and fold the
	// WAL into the database so the next open starts small.
	_, _ = s.wc.ExecContext(ctx, "PRAGMA optimize")
	_, _ = s.wc.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	err := s.closeDBs()
	if s.m != nil {
		s.m.unregister()
	}
	if err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	s.log.Info("Store closed", "path", s.opts.Path, "last_seq", s.lastSeq.Load())
	return nil
}

func (s *Store) closeDBs() error {
	var errs []error
	if s.wc != nil {
		errs = append(errs, s.wc.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	if s.Reader != nil {
		errs = append(errs, s.Reader.Close())
	}
	errs = append(errs, s.lock.unlock())
	return errors.Join(errs...)
}

// Path returns the database file path.
func (s *Store) Path() string { return s.opts.Path }

// diskBytes is the size of the database and its WAL on disk.
func (s *Store) diskBytes() int64 {
	var n int64
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(s.opts.Path + suffix); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// usedBytes is the bytes of database pages in use (not free). Call with mu.
func (s *Store) usedBytes(ctx context.Context) (int64, error) {
	var pages, free int64
	if err := s.wc.QueryRowContext(ctx, `SELECT (SELECT page_count FROM pragma_page_count()), (SELECT freelist_count FROM pragma_freelist_count())`).Scan(&pages, &free); err != nil {
		return 0, fmt.Errorf("read page counts: %w", err)
	}
	return (pages - free) * s.pageSize, nil
}
