// Package sourcetest holds helpers shared by the source packages' tests:
// finding the real packet captures and reaching the test RabbitMQ.
package sourcetest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// RealPacketsPath returns the path of shared/data/real-packets.jsonl, found
// by walking up from the working directory, or skips the test when it is
// absent (as in a clone made elsewhere).
func RealPacketsPath(t testing.TB) string {
	t.Helper()
	p := findData(t, "real-packets.jsonl")
	if p == "" {
		t.Skip("shared/data/real-packets.jsonl not found above the package directory")
	}
	return p
}

// UseCaseCapturePath returns the path of shared/data/use-case-capture.jsonl
// (the OSG shoveler's tests/use_case: 10 shoveler messages, f-stream only,
// from two servers), found by walking up from the working directory. When
// it is absent the test is skipped, or fails when CI=true (CI has it).
func UseCaseCapturePath(t testing.TB) string {
	t.Helper()
	p := findData(t, "use-case-capture.jsonl")
	if p == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("shared/data/use-case-capture.jsonl not found above the package directory (CI=true)")
		}
		t.Skip("shared/data/use-case-capture.jsonl not found above the package directory")
	}
	return p
}

// findData returns the path of shared/data/name, found by walking up from
// the working directory, or "" when there is none.
func findData(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	for {
		p := filepath.Join(dir, "shared", "data", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// SumLabels sums counter vector v over the given values of its one label
// (the reasons of an invalid-message counter, say).
func SumLabels(v *prometheus.CounterVec, values []string) float64 {
	var n float64
	for _, l := range values {
		n += testutil.ToFloat64(v.WithLabelValues(l))
	}
	return n
}
