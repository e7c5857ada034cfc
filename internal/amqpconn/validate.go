package amqpconn

import (
	"errors"

	"github.com/xrdmon/xrdmon/internal/confcheck"
)

// Validate checks t: a client certificate and its key come together.
func (t TLS) Validate() error {
	if (t.Cert == "") != (t.Key == "") {
		return errors.New("cert and key must be given together")
	}
	return nil
}

// ValidateBroker checks the broker settings of a section that embeds c:
// its URL (required when the section is enabled) and TLS.
func (c Config) ValidateBroker(required bool) error {
	var p confcheck.Problems
	p.URL("url", c.URL, required, "amqp", "amqps")
	p.Sub("tls", c.TLS.Validate())
	return p.Err()
}
