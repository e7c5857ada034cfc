// Package units holds the value types of xrdmon's configuration that read and
// write as text: durations with days and weeks, and byte sizes with binary
// and decimal suffixes. Every component's Config uses them.
package units

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration that reads and writes as text. Besides Go's
// units (ns, us, ms, s, m, h) it accepts d (24h) and w (7d), so "90d" and
// "1d12h" are valid. A bare "0" is zero.
type Duration time.Duration

// ParseDuration parses a duration in the Duration syntax.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty duration")
	}
	if s == "0" {
		return 0, nil
	}
	neg := false
	rest := s
	if rest[0] == '-' || rest[0] == '+' {
		neg = rest[0] == '-'
		rest = rest[1:]
	}
	// Pull out d and w components; hand everything else to time.ParseDuration.
	var days float64
	var goPart strings.Builder
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] == '.' || (rest[i] >= '0' && rest[i] <= '9')) {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		num := rest[:i]
		j := i
		for j < len(rest) && !(rest[j] == '.' || (rest[j] >= '0' && rest[j] <= '9')) {
			j++
		}
		unit := rest[i:j]
		rest = rest[j:]
		switch unit {
		case "d", "w":
			f, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, fmt.Errorf("invalid duration %q", s)
			}
			if unit == "w" {
				f *= 7
			}
			days += f
		case "":
			return 0, fmt.Errorf("missing unit in duration %q", s)
		default:
			goPart.WriteString(num)
			goPart.WriteString(unit)
		}
	}
	var d time.Duration
	if goPart.Len() > 0 {
		var err error
		d, err = time.ParseDuration(goPart.String())
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
	}
	const maxDays = float64(1<<63-1) / float64(24*time.Hour)
	if days > maxDays || float64(d)+days*float64(24*time.Hour) > float64(1<<63-1) {
		return 0, fmt.Errorf("duration %q out of range", s)
	}
	d += time.Duration(days * float64(24*time.Hour))
	if neg {
		d = -d
	}
	return Duration(d), nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats the duration compactly: whole multiples of two days or
// more as "90d", everything else in Go's syntax without zero components
// ("24h", "1h30m", "200ms").
func (d Duration) String() string {
	td := time.Duration(d)
	const day = 24 * time.Hour
	if td == 0 {
		return "0s"
	}
	if td%day == 0 && (td >= 2*day || td <= -2*day) {
		return strconv.FormatInt(int64(td/day), 10) + "d"
	}
	s := td.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalScalar(n, d, ParseDuration, "expected a duration such as 30s, 24h or 90d")
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// ByteSize is a number of bytes that reads and writes as text: a plain
// integer, or a number with a unit. IEC units (KiB, MiB, GiB, TiB) are powers
// of 1024, SI units (kB, KB, MB, GB, TB) powers of 1000; B is bytes.
type ByteSize int64

var byteUnits = []struct {
	name string
	mult int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3}, {"B", 1},
}

// ParseByteSize parses a size in the ByteSize syntax, such as "64MiB".
func ParseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty size")
	}
	mult := int64(1)
	num := s
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.name) {
			mult = u.mult
			num = strings.TrimSpace(strings.TrimSuffix(s, u.name))
			break
		}
	}
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		if n != 0 && (n > (1<<63-1)/mult || n < -(1<<63-1)/mult) {
			return 0, fmt.Errorf("size %q out of range", s)
		}
		return ByteSize(n * mult), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 1 {
		return 0, fmt.Errorf("invalid size %q (use e.g. 65536, 64MiB, 1GB)", s)
	}
	v := f * float64(mult)
	if v > float64(1<<62) || v < -float64(1<<62) {
		return 0, fmt.Errorf("size %q out of range", s)
	}
	return ByteSize(v), nil
}

// String formats the size with the largest IEC unit that divides it exactly.
func (b ByteSize) String() string {
	if b == 0 {
		return "0"
	}
	for _, u := range byteUnits[:4] {
		if int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalScalar(n, b, ParseByteSize, "expected a size such as 65536 or 64MiB")
}

// MarshalYAML implements yaml.Marshaler.
func (b ByteSize) MarshalYAML() (any, error) {
	s := b.String()
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil // a plain number stays a YAML integer
	}
	return s, nil
}

// Default sets *v to def when *v is zero or negative: how a component's
// constructor fills in the settings its caller left unset.
func Default[T ~int | ~int32 | ~int64 | ~float64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// DefaultChoice sets *v to def when *v is empty; otherwise *v must be one
// of choices, and the error names the setting what and the choices.
func DefaultChoice(v *string, def, what string, choices ...string) error {
	if *v == "" {
		*v = def
		return nil
	}
	if slices.Contains(choices, *v) {
		return nil
	}
	return fmt.Errorf("%s %q: want %s", what, *v, strings.Join(choices, " or "))
}

// unmarshalScalar sets *dst to the value parse reads from the scalar n;
// a node that is not a scalar is the error expected.
func unmarshalScalar[T any](n *yaml.Node, dst *T, parse func(string) (T, error), expected string) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New(expected)
	}
	v, err := parse(n.Value)
	if err != nil {
		return err
	}
	*dst = v
	return nil
}
