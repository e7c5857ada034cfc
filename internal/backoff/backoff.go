// Package backoff computes exponential retry delays with jitter, shared by
// the sinks' delivery loop and the AMQP source's reconnects.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff yields the delays between retries: Min, then doubling on each
// call up to Max, each jittered to a random value in [d/2, d). The zero
// value is not useful; set Min and Max (Max below Min counts as Min). It is
// not safe for concurrent use.
type Backoff struct {
	// Min is the delay before the first retry, Max the cap.
	Min, Max time.Duration

	next time.Duration // un-jittered delay of the next call; 0: Min
}

// Next returns the delay before the next retry and doubles the one after
// it, up to Max.
func (b *Backoff) Next() time.Duration {
	if b.next <= 0 {
		b.next = b.Min
	}
	d := min(b.next, max(b.Max, b.Min))
	if d < b.Max && d > 0 {
		b.next = min(2*d, b.Max)
	} else {
		b.next = d
	}
	return Jitter(d)
}

// Reset makes the next call of Next return (a jittered) Min again.
func (b *Backoff) Reset() { b.next = 0 }

// Jitter returns a random duration in [d/2, d); d itself when d is at most
// one nanosecond.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half)
}
