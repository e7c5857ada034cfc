package stomp

import "github.com/xrdmon/xrdmon/internal/confcheck"

// Validate checks c, the stomp_input section.
func (c Config) Validate() error {
	var p confcheck.Problems
	p.Sub("", c.ValidateBroker(c.Enabled))
	p.Check(c.Destination != "", "destination", "required")
	p.Check(c.Prefetch >= 1, "prefetch", "must be >= 1")
	return p.Err()
}
