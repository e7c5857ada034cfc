package confcheck

import (
	"errors"
	"slices"
	"testing"
)

// TestProblems: a section's problems come out under its key, nested ones
// under both, a plain error as the section's own, in the order found.
func TestProblems(t *testing.T) {
	var tls Problems
	tls.Check(false, "cert", "needs key")
	var sec Problems
	sec.Check(true, "fine", "never")
	sec.Add("rcvbuf", "must be > 0")
	sec.Sub("tls", tls.Err())
	sec.Sub("", errors.Join()) // nil: nothing
	sec.URL("url", "http://h", true, "amqp", "amqps")
	sec.URL("empty", "", true, "amqp")
	sec.HostPort("addr", "9930")
	var all Problems
	all.Sub("listen", sec.Err())
	all.Sub("rollup", errors.New("bad dimension"))
	want := []string{
		"listen.rcvbuf: must be > 0",
		"listen.tls.cert: needs key",
		`listen.url: scheme must be amqp or amqps, not "http"`,
		"listen.empty: required when enabled",
		`listen.addr: "9930" is not host:port`,
		"rollup: bad dimension",
	}
	var e *Error
	if err := all.Err(); !errors.As(err, &e) || !slices.Equal(e.Problems, want) {
		t.Fatalf("got %v, want %q", err, want)
	}
	if (Problems{}).Err() != nil {
		t.Fatal("no problems must be a nil error")
	}
}
