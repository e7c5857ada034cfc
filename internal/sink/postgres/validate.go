package postgres

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/xrdmon/xrdmon/internal/confcheck"
)

// Validate checks c, the outputs.postgres section.
func (c Config) Validate() error {
	var p confcheck.Problems
	p.Check(!c.Enabled || c.URL != "", "url", "required when outputs.postgres.enabled")
	CheckURL(&p, c.URL)
	return p.Err()
}

// CheckURL checks a connection string in URL form (the key=value form is
// checked by the driver when it connects), for every section that names a
// PostgreSQL database.
func CheckURL(p *confcheck.Problems, raw string) {
	if !strings.Contains(raw, "://") {
		return
	}
	if u, err := url.Parse(raw); err != nil {
		p.Add("url", "invalid URL: "+confcheck.RedactURL(raw))
	} else if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		p.Add("url", fmt.Sprintf("scheme must be postgres or postgresql, not %q", u.Scheme))
	}
}
