package dnscache

import "github.com/xrdmon/xrdmon/internal/confcheck"

// Validate checks c, the dns section.
func (c Config) Validate() error {
	var p confcheck.Problems
	p.Check(c.TTL > 0, "ttl", "must be > 0")
	p.Check(c.NegativeTTL > 0, "negative_ttl", "must be > 0")
	p.Check(c.CacheSize >= 1, "cache_size", "must be >= 1")
	p.Check(c.Workers >= 1, "workers", "must be >= 1")
	p.Check(c.QueueSize >= 1, "queue_size", "must be >= 1")
	p.Check(c.Timeout > 0, "timeout", "must be > 0")
	p.Check(c.MaxWait >= 0, "max_wait", "must be >= 0")
	if c.Server != "" {
		p.HostPort("server", c.Server)
	}
	return p.Err()
}
