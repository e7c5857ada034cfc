//go:build race

package packet

// The race detector's instrumentation makes some values escape, so
// allocation counts are only asserted without it.
func init() { raceEnabled = true }
