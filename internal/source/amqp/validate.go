package amqp

import "github.com/xrdmon/xrdmon/internal/confcheck"

// Validate checks c, the amqp_input section.
func (c Config) Validate() error {
	var p confcheck.Problems
	p.Sub("", c.ValidateBroker(c.Enabled))
	p.Check(!c.Enabled || c.Queue != "", "queue", "required when amqp_input.enabled")
	p.Check(c.Prefetch >= 1, "prefetch", "must be >= 1")
	return p.Err()
}
