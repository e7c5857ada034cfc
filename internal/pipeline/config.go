package pipeline

import (
	"runtime"
	"time"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Config is the correlate section of the configuration: the bounds of the
// correlation state in total (split over the shards) and per server, the
// number of shards and the checkpoint interval.
type Config struct {
	OpenFileTTL          units.Duration `yaml:"open_file_ttl" help:"a file open for longer without a close is written as a partial record (reason timeout)"`
	MaxEntries           int            `yaml:"max_entries" help:"open files, sessions and users tracked in total; beyond it the oldest are written as partial records (reason evicted)"`
	MaxEntriesPerServer  int            `yaml:"max_entries_per_server" help:"the same bound for one XRootD server"`
	MaxStateBytes        units.ByteSize `yaml:"max_state_bytes" help:"estimated memory of the correlation state in total (open files, sessions, pending references, interned texts); over it the least recently used entries are evicted as for max_entries"`
	MaxServersPerAddress int            `yaml:"max_servers_per_address" help:"server incarnations (start time, server id) kept per sender address; forged ones from one address evict only that address's"`
	Shards               int            `yaml:"shards" help:"correlator goroutines, servers are spread over them; 0 means GOMAXPROCS"`
	CheckpointInterval   units.Duration `yaml:"checkpoint_interval" help:"how often the correlation state is checkpointed into the store (and RabbitMQ input acknowledged); 0 means 2s with amqp_input, 30s for UDP only"`
	ClockAheadTolerance  units.Duration `yaml:"clock_ahead_tolerance" help:"a record whose end is ahead of the collector's clock by more than this is flagged clock_ahead and counted (the server's clock is wrong); shown on the health view"`
	RedirectWindow       units.Duration `yaml:"redirect_window" help:"how far apart a redirect (r-stream of a redirector reporting here) and the open it led to (at a data server reporting here) may be to be linked: the record gets the hops and the delay"`
}

// DefaultConfig returns the defaults: correlate.DefaultConfig's TTL,
// per-server bounds and budget, 2,000,000 entries in all, GOMAXPROCS
// shards, the checkpoint interval chosen by the input.
func DefaultConfig() Config {
	cc := correlate.DefaultConfig()
	return Config{
		OpenFileTTL:          units.Duration(cc.OpenTTL),
		MaxEntries:           2_000_000,
		MaxEntriesPerServer:  cc.MaxOpenFilesPerServer,
		MaxStateBytes:        units.ByteSize(cc.MaxStateBytes),
		MaxServersPerAddress: cc.MaxServersPerAddr,
		RedirectWindow:       units.Duration(correlate.DefaultLinkWindow),
		ClockAheadTolerance:  units.Duration(cc.ClockAheadTolerance),
	}
}

// Options returns the pipeline's options for c. acknowledged says whether
// input is acknowledged at checkpoints (RabbitMQ): then checkpoints come
// every 2 s unless set, else every 30 s (UDP cannot be redelivered, so
// frequent checkpoints only cost CPU).
func (c Config) Options(acknowledged bool) Options {
	o := DefaultOptions()
	if c.Shards > 0 {
		o.Shards = c.Shards
	}
	switch {
	case c.CheckpointInterval > 0:
		o.CheckpointInterval = c.CheckpointInterval.D()
	case !acknowledged: // else DefaultOptions' (2 s)
		o.CheckpointInterval = unackedCheckpointInterval
	}
	o.Correlate = c.Correlate(o.Shards)
	if c.RedirectWindow > 0 {
		o.RedirectWindow = c.RedirectWindow.D()
	}
	return o
}

// Correlate maps the bounds onto each of n shards: the total bounds are
// split evenly, the per-server bounds apply as they are (one server lives
// on one shard).
func (c Config) Correlate(n int) correlate.Config {
	n = max(n, 1)
	cc := correlate.DefaultConfig()
	if c.OpenFileTTL > 0 {
		cc.OpenTTL = c.OpenFileTTL.D()
	}
	if c.MaxStateBytes > 0 {
		cc.MaxStateBytes = max(int64(c.MaxStateBytes)/int64(n), 1<<20)
	}
	if c.MaxServersPerAddress > 0 {
		cc.MaxServersPerAddr = c.MaxServersPerAddress
	}
	if c.ClockAheadTolerance > 0 {
		cc.ClockAheadTolerance = c.ClockAheadTolerance.D()
	}
	if c.MaxEntries > 0 {
		per := max(c.MaxEntries/n, 1)
		cc.MaxOpenFiles, cc.MaxSessions = per, per
		cc.MaxPending = max(per/5, 1)
	}
	if c.MaxEntriesPerServer > 0 {
		cc.MaxOpenFilesPerServer = min(c.MaxEntriesPerServer, cc.MaxOpenFiles)
		cc.MaxSessionsPerServer = min(c.MaxEntriesPerServer, cc.MaxSessions)
	}
	return cc
}

// unackedCheckpointInterval is the checkpoint interval of a collector
// whose input is not acknowledged (UDP only): a checkpoint bounds what a
// restart makes again, and costs CPU.
const unackedCheckpointInterval = 30 * time.Second

// shardCount is the default number of shards.
func shardCount() int { return runtime.GOMAXPROCS(0) }
