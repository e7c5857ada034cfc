package stomp

import "github.com/xrdmon/xrdmon/internal/confcheck"

// Validate checks c, the outputs.stomp section.
func (c Config) Validate() error {
	var p confcheck.Problems
	p.Sub("", c.ValidateBroker(c.Enabled))
	p.Check(!c.Enabled || c.Destinations.any(), "destinations", "at least one destination is required when outputs.stomp.enabled")
	p.Check(c.MaxMessageBytes > 0, "max_message_bytes", "must be > 0")
	c.Format.Check(&p)
	return p.Err()
}

// any reports whether d names a destination.
func (d Destinations) any() bool { return d.WLCG != "" || d.Records != "" || d.Events != "" }
