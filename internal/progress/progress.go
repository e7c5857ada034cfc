// Package progress shows how far long work has come, on a terminal: one
// line redrawn in place with what is done of the total, the rate and the
// time left, as `xrdmon replay` of a large capture and `xrdmon bench`
// draw it on standard error. On anything but a terminal (a file, a pipe,
// a CI log) it draws nothing, so that logs and scripts see only results.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/xrdmon/xrdmon/internal/report"
)

// Sample is the state of the work at one moment.
type Sample struct {
	// Label says what is being done ("replay", "step 2/5 rate=20000:
	// sending").
	Label string
	// Done of Total, in bytes when Bytes is set; Total <= 0 is unknown
	// (no percentage, no time left).
	Done, Total int64
	Bytes       bool
	// Count items of CountUnit were handled (packets, records), for the
	// rate; CountUnit "" shows the rate of Done instead.
	Count     int64
	CountUnit string
}

// Interval is how often the line is redrawn.
const Interval = 500 * time.Millisecond

// window is how far back the rates look: long enough to be steady, short
// enough to follow a change of pace.
const window = 5 * time.Second

// Start draws sample() every Interval on w, when w is a terminal, and
// returns a function that stops and erases the line (call it before
// printing results). On anything else it draws nothing.
func Start(w io.Writer, sample func() Sample) (stop func()) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return func() {}
	}
	width := func() int {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
		return 80
	}
	return start(w, width, sample, time.Now, Interval)
}

// point is a sample's numbers at a time, for the rates.
type point struct {
	t           time.Time
	done, count int64
}

func start(w io.Writer, width func() int, sample func() Sample, now func() time.Time, every time.Duration) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var hist []point
		var label string
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(w, "\r\x1b[K")
				return
			case <-tk.C:
				s := sample()
				t := now()
				if s.Label != label { // another phase: its own rates
					hist, label = hist[:0], s.Label
				}
				hist = append(hist, point{t, s.Done, s.Count})
				for len(hist) > 2 && t.Sub(hist[1].t) >= window {
					hist = hist[1:]
				}
				line := Format(s, hist[0], hist[len(hist)-1])
				if n := width() - 1; len([]rune(line)) > n && n > 0 {
					line = string([]rune(line)[:n])
				}
				fmt.Fprint(w, "\r", line, "\x1b[K")
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// Format renders a sample, with the rates between the points from and to.
func Format(s Sample, from, to point) string {
	var b strings.Builder
	if s.Label != "" {
		b.WriteString(s.Label)
		b.WriteString(": ")
	}
	amount := func(n int64) string {
		if s.Bytes {
			return report.Bytes(n)
		}
		return report.Count(n)
	}
	b.WriteString(amount(s.Done))
	if s.Total > 0 {
		pct := min(100*float64(s.Done)/float64(s.Total), 100)
		fmt.Fprintf(&b, " of %s (%.0f%%)", amount(s.Total), pct)
	}
	dt := to.t.Sub(from.t).Seconds()
	if s.CountUnit != "" {
		fmt.Fprintf(&b, ", %s %s", report.Count(s.Count), s.CountUnit)
		if dt > 0 {
			fmt.Fprintf(&b, ", %s/s", report.Count(int64(float64(to.count-from.count)/dt)))
		}
	} else if dt > 0 {
		fmt.Fprintf(&b, ", %s/s", amount(int64(float64(to.done-from.done)/dt)))
	}
	if s.Total > 0 && dt > 0 {
		if rate := float64(to.done-from.done) / dt; rate > 0 && s.Done < s.Total {
			left := time.Duration(float64(s.Total-s.Done) / rate * float64(time.Second))
			fmt.Fprintf(&b, ", %s left", clock(left))
		}
	}
	return b.String()
}

// clock formats d as m:ss or h:mm:ss.
func clock(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
