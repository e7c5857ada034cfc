package record

import "fmt"

// Schema names accepted by Encoder.
const (
	SchemaNative = "native" // AppendJSON
	SchemaGRACC  = "gracc"  // AppendGRACC
	SchemaWLCG   = "wlcg"   // AppendWLCG
)

// Encoder returns the appender for a schema name: "native", "gracc" or
// "wlcg".
func Encoder(schema string) (func(dst []byte, r *Record) []byte, error) {
	switch schema {
	case SchemaNative:
		return AppendJSON, nil
	case SchemaGRACC:
		return AppendGRACC, nil
	case SchemaWLCG:
		return AppendWLCG, nil
	}
	return nil, fmt.Errorf("unknown record schema %q (want native, gracc or wlcg)", schema)
}
