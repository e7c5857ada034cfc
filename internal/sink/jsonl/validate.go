package jsonl

import (
	"github.com/xrdmon/xrdmon/internal/record"

	"github.com/xrdmon/xrdmon/internal/confcheck"
)

// Validate checks c, the outputs.jsonl section.
func (c Config) Validate() error {
	var p confcheck.Problems
	p.Check(!c.Enabled || c.Path != "", "path", "required when outputs.jsonl.enabled")
	p.Check(c.Schema == record.SchemaNative || c.Schema == record.SchemaGRACC || c.Schema == record.SchemaWLCG, "schema", "must be native, gracc or wlcg")
	p.Check(record.ValidGRACCFlavour(c.GRACCFlavour), "gracc_flavour", "must be python or go")
	return p.Err()
}
