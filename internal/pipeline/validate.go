package pipeline

import (
	"fmt"

	"github.com/xrdmon/xrdmon/internal/confcheck"
)

// Validate checks c, the correlate section.
func (c Config) Validate() error {
	var p confcheck.Problems
	p.Check(c.OpenFileTTL > 0, "open_file_ttl", "must be > 0")
	p.Check(c.MaxEntries >= 1, "max_entries", "must be >= 1")
	p.Check(c.MaxEntriesPerServer >= 1, "max_entries_per_server", "must be >= 1")
	p.Check(c.MaxServersPerAddress >= 1, "max_servers_per_address", "must be >= 1")
	p.Check(c.MaxStateBytes >= 16<<20, "max_state_bytes", "must be >= 16MiB")
	if c.MaxEntries >= 1 && c.MaxEntriesPerServer > c.MaxEntries {
		p.Add("max_entries_per_server", fmt.Sprintf("must be <= max_entries (%d)", c.MaxEntries))
	}
	p.Check(c.Shards >= 0, "shards", "must be >= 0 (0 means GOMAXPROCS)")
	p.Check(c.CheckpointInterval >= 0, "checkpoint_interval", "must be >= 0 (0 chooses by input)")
	return p.Err()
}
