package units

import (
	"testing"
	"time"
)

func TestDurations(t *testing.T) {
	good := map[string]time.Duration{
		"0":       0,
		"200ms":   200 * time.Millisecond,
		"24h":     24 * time.Hour,
		"90d":     90 * 24 * time.Hour,
		"1d12h":   36 * time.Hour,
		"2w":      14 * 24 * time.Hour,
		"1.5d":    36 * time.Hour,
		"1h30m":   90 * time.Minute,
		"-1d":     -24 * time.Hour,
		" 5s ":    5 * time.Second,
		"1d1h1ms": 25*time.Hour + time.Millisecond,
	}
	for in, want := range good {
		got, err := ParseDuration(in)
		if err != nil || got.D() != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got.D(), err, want)
		}
	}
	for _, in := range []string{"", "10", "d", "3 days", "1x", "h1", "99999999999d", "1..5s"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) succeeded", in)
		}
	}
	format := map[time.Duration]string{
		0:                      "0s",
		24 * time.Hour:         "24h",
		48 * time.Hour:         "2d",
		90 * 24 * time.Hour:    "90d",
		90 * time.Minute:       "1h30m",
		time.Hour:              "1h",
		200 * time.Millisecond: "200ms",
		25 * time.Hour:         "25h",
	}
	for d, want := range format {
		s := Duration(d).String()
		if s != want {
			t.Errorf("Duration(%v).String() = %q, want %q", d, s, want)
		}
		back, err := ParseDuration(s)
		if err != nil || back.D() != d {
			t.Errorf("round trip %v -> %q -> %v, %v", d, s, back.D(), err)
		}
	}
}

func TestByteSizes(t *testing.T) {
	good := map[string]ByteSize{
		"0": 0, "65536": 65536, "64MiB": 64 << 20, "1GiB": 1 << 30, "1.5KiB": 1536,
		"1GB": 1e9, "10kB": 1e4, "10KB": 1e4, "512B": 512, "2 TiB": 2 << 40,
	}
	for in, want := range good {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "1.5", "MiB", "9999999999TiB", "1 PiB"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) succeeded", in)
		}
	}
	for b, want := range map[ByteSize]string{0: "0", 64 << 20: "64MiB", 1536: "1536", 1e9: "1000000000", 2048: "2KiB"} {
		if got := b.String(); got != want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(b), got, want)
		}
	}
}

// TestTestdata loads every testdata/*.good.yaml (must load and validate) and
// *.bad.yaml (must fail with every expected message, each naming its key).
