// Package sourcetest holds helpers shared by the source packages' tests:
// finding the real packet captures and reaching the test RabbitMQ.
package sourcetest

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// RealPacketsPath returns the path of shared/data/real-packets.jsonl, found
// by walking up from the working directory, or skips the test when it is
// absent (as in a clone made elsewhere).
func RealPacketsPath(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	for {
		p := filepath.Join(dir, "shared", "data", "real-packets.jsonl")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("shared/data/real-packets.jsonl not found above the package directory")
		}
		dir = parent
	}
}

// AMQPURL returns the test broker's URL (XRDMON_TEST_AMQP_URL, default
// amqp://guest:guest@127.0.0.1:5672/). When the broker does not answer, the
// test is skipped, or fails when CI=true.
func AMQPURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("XRDMON_TEST_AMQP_URL")
	if u == "" {
		u = "amqp://guest:guest@127.0.0.1:5672/"
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("parse XRDMON_TEST_AMQP_URL: %v", err)
	}
	host := pu.Host
	if pu.Port() == "" {
		host = net.JoinHostPort(pu.Hostname(), "5672")
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		Unavailable(t, "RabbitMQ at "+host+" does not answer: "+err.Error())
	}
	c.Close()
	return u
}

// Unavailable skips the test because a service is missing, or fails it when
// the environment variable CI is "true".
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
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
