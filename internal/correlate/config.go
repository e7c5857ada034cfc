package correlate

import (
	"fmt"
	"time"
)

// Config bounds the correlator's state and sets its timeouts. The zero
// value is not useful; start from DefaultConfig.
type Config struct {
	// OpenTTL is how long an open file may go without any news (xfr)
	// before it is given up as a partial record with reason timeout.
	OpenTTL time.Duration
	// SessionTTL is how long a session (u record) is kept without news
	// while it has no open file, and how long an idle server incarnation
	// without state is kept.
	SessionTTL time.Duration
	// PendingTTL is how long an unresolved reference waits: a d (path) or
	// T/U record whose file or user has not appeared, a close whose open
	// has not been seen (then no_open), and a superseded server
	// incarnation's leftovers. The shoveler uses 300 s.
	PendingTTL time.Duration
	// DisconnectGrace is how long a session that disconnected with no file
	// still open keeps its details for packets that arrive late (reordered
	// map or f-stream packets). It is much shorter than PendingTTL because
	// sessions churn: at 1,000 sessions/s every second of grace holds 1,000
	// sessions in memory and in every checkpoint (about 2 KB each).
	// Packets of one server arrive reordered by milliseconds, not seconds,
	// so the default is 10 s. 0 means PendingTTL.
	DisconnectGrace time.Duration

	// MaxOpenFiles bounds the open files of the shard; MaxOpenFilesPerServer
	// those of one server incarnation. Beyond a bound the least recently
	// used file is emitted as a partial record (evicted).
	MaxOpenFiles          int
	MaxOpenFilesPerServer int
	// MaxSessions and MaxSessionsPerServer bound sessions the same way;
	// an evicted session emits nothing (it is not accounting data), its
	// open files lose their user fields.
	MaxSessions          int
	MaxSessionsPerServer int
	// MaxPending bounds pending paths and pending user attributes together
	// (oldest dropped first, counted in Stats.PendingDropped).
	MaxPending int
	// MaxServers bounds server incarnations; beyond it the least recently
	// seen one is closed out (its files emitted as evicted).
	MaxServers int
	// MaxServersPerAddr bounds the incarnations (stod, sID pairs) of one
	// sender address; beyond it the address's least recently seen one is
	// closed out. Packets with forged stod or sID from one address thus
	// churn that address's slots and never evict another address's state.
	MaxServersPerAddr int

	// ReorderWindow is the number of sequence numbers (1..63) within which
	// a number repeated with other bytes is a collision (further back:
	// stale); both are applied. A repeat with the same bytes is a
	// duplicate however far back, up to a whole turn of the counter (the
	// fingerprints cover every number). Loss waits for a late packet over
	// a fixed horizon of 64 numbers (docs/records.md §2.1).
	ReorderWindow int
	// ClockAheadTolerance is how far ahead of the collector's clock a
	// record's end may be before the record is flagged (record.ClockAhead)
	// and counted (Stats.ClockAhead): server clocks drift, and a server's
	// times are whole seconds of windows that end after the collector saw
	// them.
	ClockAheadTolerance time.Duration
	// InternMax is the number of slots of each string-interning cache
	// (rounded up to a power of two; intern.go).
	InternMax int
	// MaxStateBytes bounds the estimated heap bytes of the shard's state:
	// open files, sessions, pending references and the interning tables
	// each have a share of it (budget.go, docs/limits.md). Over its share a
	// table evicts as it does over its entry bound.
	MaxStateBytes int64

	// ReportOpens makes the shard report every open file with a known
	// client (Output.Opens), for the redirect Linker.
	ReportOpens bool

	// ReportProgress makes the shard report the bytes of open files at
	// their isXfr updates (Output.Progress), for rollups.
	ReportProgress bool

	// ReportActivity makes every Drain report the activity of the
	// shard's servers (Output.Activity), for the monitored counters.
	ReportActivity bool
}

// DefaultConfig returns the defaults: open files time out after 24 h
// without news, sessions after 12 h, pending references after 300 s; at
// most 1,000,000 open files and sessions per shard (200,000 per server);
// a reorder window of 16 packets.
func DefaultConfig() Config {
	return Config{
		OpenTTL:               24 * time.Hour,
		SessionTTL:            12 * time.Hour,
		PendingTTL:            300 * time.Second,
		DisconnectGrace:       10 * time.Second,
		MaxOpenFiles:          1_000_000,
		MaxOpenFilesPerServer: 200_000,
		MaxSessions:           1_000_000,
		MaxSessionsPerServer:  200_000,
		MaxPending:            200_000,
		MaxServers:            10_000,
		MaxServersPerAddr:     32,
		ReorderWindow:         16,
		ClockAheadTolerance:   5 * time.Minute,
		InternMax:             16_384,
		MaxStateBytes:         1 << 30,
	}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case c.OpenTTL < time.Second || c.SessionTTL < time.Second || c.PendingTTL < time.Second:
		return fmt.Errorf("correlate config: TTLs must be at least 1s")
	case c.MaxOpenFiles < 1 || c.MaxOpenFilesPerServer < 1 || c.MaxSessions < 1 ||
		c.MaxSessionsPerServer < 1 || c.MaxPending < 1 || c.MaxServers < 1 || c.MaxServersPerAddr < 1:
		return fmt.Errorf("correlate config: bounds must be positive")
	case c.ReorderWindow < 1 || c.ReorderWindow > 63:
		return fmt.Errorf("correlate config: reorder window %d not in 1..63", c.ReorderWindow)
	case c.MaxStateBytes < 1<<20:
		return fmt.Errorf("correlate config: state budget %d bytes below 1 MiB", c.MaxStateBytes)
	case c.ClockAheadTolerance < 0:
		return fmt.Errorf("correlate config: clock ahead tolerance %v is negative", c.ClockAheadTolerance)
	case c.InternMax < 1:
		return fmt.Errorf("correlate config: intern max must be positive")
	}
	return nil
}
