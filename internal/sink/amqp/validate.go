package amqp

import "github.com/xrdmon/xrdmon/internal/confcheck"

// Validate checks c, the outputs.amqp section.
func (c Config) Validate() error {
	var p confcheck.Problems
	p.Sub("", c.ValidateBroker(c.Enabled))
	p.Check(!c.Enabled || c.Exchanges.any(), "exchanges", "at least one exchange is required when outputs.amqp.enabled")
	c.Format.Check(&p)
	return p.Err()
}

// any reports whether e names an exchange.
func (e Exchanges) any() bool {
	return e.Records != "" || e.WLCG != "" || e.Cache != "" || e.TPC != "" || e.Events != ""
}
