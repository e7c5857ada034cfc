package store

import "github.com/xrdmon/xrdmon/internal/confcheck"

// Validate checks c, the store section.
func (c Config) Validate() error {
	var p confcheck.Problems
	p.Check(c.Path != "", "path", "required")
	p.Check(c.Retention >= 0, "retention", "must be >= 0 (0 keeps records forever)")
	p.Check(c.MaxBytes >= 0, "max_bytes", "must be >= 0 (0 means no limit)")
	return p.Err()
}
