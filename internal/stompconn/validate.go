package stompconn

import "github.com/xrdmon/xrdmon/internal/confcheck"

// ValidateBroker checks the broker settings of a section that embeds c:
// its URL (required when the section is enabled), heart-beat and TLS.
func (c Config) ValidateBroker(required bool) error {
	var p confcheck.Problems
	if c.URL == "" {
		p.Check(!required, "url", "required when enabled")
	} else if _, _, err := ParseURL(c.URL); err != nil {
		p.Add("url", err.Error())
	}
	p.Check(c.Heartbeat >= 0, "heartbeat", "must be >= 0 (0 turns heart-beating off)")
	p.Sub("tls", c.TLS.Validate())
	return p.Err()
}
