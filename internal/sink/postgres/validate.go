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
	checkURL(&p, c.URL)
	return p.Err()
}

// Validate checks c, the cluster section (the rules that span sections
// are the configuration's).
func (c ClusterConfig) Validate() error {
	var p confcheck.Problems
	if c.Enabled {
		p.Check(c.URL != "", "url", "required when cluster.enabled")
		p.Check(c.Schema != "", "schema", "required when cluster.enabled")
	}
	checkURL(&p, c.URL)
	return p.Err()
}

// checkURL checks a connection string in URL form (the key=value form is
// checked by the driver when it connects).
func checkURL(p *confcheck.Problems, raw string) {
	if !strings.Contains(raw, "://") {
		return
	}
	if u, err := url.Parse(raw); err != nil {
		p.Add("url", "invalid URL: "+confcheck.RedactURL(raw))
	} else if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		p.Add("url", fmt.Sprintf("scheme must be postgres or postgresql, not %q", u.Scheme))
	}
}
