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

// EncoderFlavour is Encoder with the GRACC flavour ("python", the default,
// or "go") the "gracc" schema is written in; other schemas ignore it, but
// an unknown flavour is an error for any.
func EncoderFlavour(schema, flavour string) (func(dst []byte, r *Record) []byte, error) {
	g, err := GRACCEncoder(flavour)
	if err != nil {
		return nil, err
	}
	if schema == SchemaGRACC {
		return g, nil
	}
	return Encoder(schema)
}
