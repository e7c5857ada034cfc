package progress

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		s        Sample
		from, to point
		want     string
	}{
		{Sample{Label: "replay", Done: 500_000_000, Total: 2_000_000_000, Bytes: true, Count: 1_234_567, CountUnit: "packets"},
			point{t0, 0, 0}, point{t0.Add(5 * time.Second), 500_000_000, 1_234_567},
			"replay: 500 MB of 2.00 GB (25%), 1,234,567 packets, 246,913/s, 0:15 left"},
		{Sample{Label: "replay", Done: 3_000_000, Bytes: true, Count: 10, CountUnit: "packets"}, // standard input: no total
			point{t0, 0, 0}, point{t0.Add(2 * time.Second), 3_000_000, 10},
			"replay: 3.00 MB, 10 packets, 5/s"},
		{Sample{Label: "step 1/3", Done: 7200, Total: 10000},
			point{t0, 0, 0}, point{t0.Add(time.Second), 7200, 0},
			"step 1/3: 7,200 of 10,000 (72%), 7,200/s, 0:00 left"},
		{Sample{Done: 1, Total: 7200}, point{t0, 0, 0}, point{t0.Add(time.Second), 1, 0},
			"1 of 7,200 (0%), 1/s, 1:59:59 left"},
		{Sample{Label: "x", Done: 5, Total: 5}, point{t0, 0, 0}, point{t0, 5, 0}, "x: 5 of 5 (100%)"},
	} {
		if got := Format(c.s, c.from, c.to); got != c.want {
			t.Errorf("Format = %q\nwant     %q", got, c.want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the drawing goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDrawsInPlace: on a terminal the line is redrawn in place, cut to the
// width, and erased at stop.
func TestDrawsInPlace(t *testing.T) {
	var out syncBuffer
	var mu sync.Mutex
	done := int64(0)
	stop := start(&out, func() int { return 30 }, func() Sample {
		mu.Lock()
		defer mu.Unlock()
		done += 100
		return Sample{Label: "work", Done: done, Total: 1000}
	}, time.Now, time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), "\r") < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	stop() // twice is fine
	s := out.String()
	if !strings.HasPrefix(s, "\rwork: 100 of 1,000 (10%)") || !strings.HasSuffix(s, "\r\x1b[K") {
		t.Errorf("drawn %q", s)
	}
	for line := range strings.SplitSeq(strings.TrimPrefix(s, "\r"), "\r") {
		if n := len([]rune(strings.TrimSuffix(line, "\x1b[K"))); n > 29 {
			t.Errorf("line of %d runes on a 30-column terminal: %q", n, line)
		}
	}
}

// TestQuietOffTerminal: anything but a terminal gets nothing.
func TestQuietOffTerminal(t *testing.T) {
	var out bytes.Buffer
	stop := Start(&out, func() Sample { return Sample{Done: 1, Total: 2} })
	time.Sleep(2 * Interval)
	stop()
	if out.Len() != 0 {
		t.Errorf("wrote %q to a buffer", out.String())
	}
}
