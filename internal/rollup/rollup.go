// Package rollup keeps time series of what the collector saw, summed by
// dimension at 1-minute, 1-hour and 1-day resolution, without the RRD
// trap: nothing is a file per series updated in place. The builder reads
// the store's log from its own cursor (like a sink), sums records and
// progress snapshots into an in-memory head, and every FlushInterval writes
// the head as one additive part per bucket, with its cursor and state, in
// one transaction: after a crash it resumes from its cursor and counts
// every entry exactly once, so a restart gives the sums of an uninterrupted
// run. Parts of a bucket are merged (compacted) once the bucket is over,
// and buckets past their resolution's retention are deleted.
//
// Bytes of long transfers count as they flow: a progress snapshot (an
// isXfr update, store.Entry.Progress) adds the bytes moved since the access's
// previous one, in the minute it was sent; the record at the close adds
// only the rest. Transfers, partial transfers, distinct users and the
// duration and size distributions count at the close, in the bucket of the
// record's end. See docs/rollups.md.
package rollup

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/codec"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Resolutions are the bucket widths kept, finest first.
var Resolutions = []time.Duration{time.Minute, time.Hour, 24 * time.Hour}

// Config is the rollup section of the configuration.
type Config struct {
	Enabled         bool           `yaml:"enabled" help:"build rollups (time series by dimension) while collecting"`
	Dimensions      []string       `yaml:"dimensions" help:"the series kept: dimensions (server, site, vo, user, identity, domain, protocol, app, dir) and combinations (\"site,vo\"); the total is always kept"`
	RetentionMinute units.Duration `yaml:"retention_minute" help:"1-minute buckets older than this are deleted; 0 keeps them forever"`
	RetentionHour   units.Duration `yaml:"retention_hour" help:"1-hour buckets older than this are deleted; 0 keeps them forever"`
	RetentionDay    units.Duration `yaml:"retention_day" help:"1-day buckets older than this are deleted; 0 keeps them forever"`
	FlushInterval   units.Duration `yaml:"flush_interval" help:"how often the sums held in memory are written to the store"`
	MaxHeadBytes    units.ByteSize `yaml:"max_head_bytes" help:"bound of the sums held in memory, those being written included (they are written early past a third of it)"`
	MaxOpenBytes    units.ByteSize `yaml:"max_open_bytes" help:"bound of the table of bytes counted so far for open transfers; beyond it a transfer's bytes count at its close"`
	MaxQueueBytes   units.ByteSize `yaml:"max_queue_bytes" help:"bound of what the rollups hold of the records just committed, not yet summed (while they pause or a flush runs); while paused they sum past three quarters of it, and past it they read those records back from the store's log instead"`
	MaxYield        units.Duration `yaml:"max_yield" help:"longest the rollups pause while the UDP input is behind (its kernel queue filling), to give it the CPU; they catch up from the store's log afterwards; 0: never pause"`
}

// DefaultConfig returns the defaults: on, the dimensions operators and
// accounting ask for, minutes for 2 days, hours for 90 days, days for ever.
func DefaultConfig() Config {
	return Config{
		Enabled:         true,
		Dimensions:      []string{"server", "site", "vo", "user", "domain", "protocol", "app", "dir", "locality", "site,vo"},
		RetentionMinute: units.Duration(48 * time.Hour),
		RetentionHour:   units.Duration(90 * 24 * time.Hour),
		FlushInterval:   units.Duration(30 * time.Second),
		MaxHeadBytes:    32 << 20,
		MaxOpenBytes:    64 << 20,
		MaxQueueBytes:   16 << 20,
		MaxYield:        units.Duration(time.Minute),
	}
}

// Validate checks c.
func (c Config) Validate() error {
	if _, err := c.specs(); err != nil {
		return err
	}
	if c.RetentionMinute < 0 || c.RetentionHour < 0 || c.RetentionDay < 0 {
		return fmt.Errorf("rollup retention: must not be negative")
	}
	if c.FlushInterval <= 0 {
		return fmt.Errorf("rollup flush_interval %s: must be positive", c.FlushInterval)
	}
	if c.MaxYield < 0 {
		return fmt.Errorf("rollup max_yield %s: must not be negative", c.MaxYield)
	}
	if c.MaxHeadBytes <= 0 || c.MaxOpenBytes <= 0 || c.MaxQueueBytes <= 0 {
		return fmt.Errorf("rollup max_head_bytes, max_open_bytes and max_queue_bytes: must be positive")
	}
	return nil
}

func (c Config) retention(step time.Duration) time.Duration {
	switch step {
	case time.Minute:
		return c.RetentionMinute.D()
	case time.Hour:
		return c.RetentionHour.D()
	}
	return c.RetentionDay.D()
}

// A Spec is a set of dimensions a series groups by, in a canonical order
// ("site,vo"); the empty Spec is the total.
type Spec string

// SpecOf returns the Spec of dims.
func SpecOf(dims []record.Dim) Spec {
	s := make([]string, len(dims))
	for i, d := range dims {
		s[i] = string(d)
	}
	return Spec(strings.Join(s, ","))
}

// Dims returns the dimensions of s.
func (s Spec) Dims() []record.Dim {
	if s == "" {
		return nil
	}
	var out []record.Dim
	for f := range strings.SplitSeq(string(s), ",") {
		out = append(out, record.Dim(f))
	}
	return out
}

func (c Config) specs() ([]Spec, error) {
	out := []Spec{""}
	for _, d := range c.Dimensions {
		dims, err := record.ParseDims(d)
		if err != nil {
			return nil, fmt.Errorf("rollup dimensions: %w", err)
		}
		s := SpecOf(dims)
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// appendKey appends the key of a series of spec: the spec, a zero byte,
// then each value of its dimensions (vals at idx) length-prefixed (values
// come from packets and may hold any byte).
func appendKey(b []byte, spec Spec, idx []int, vals []string) []byte {
	b = append(b, spec...)
	b = append(b, 0)
	for _, i := range idx {
		b = codec.AppendString(b, vals[i])
	}
	return b
}

// splitKey returns the spec and values of a series key.
func splitKey(key string) (Spec, []string, error) {
	i := strings.IndexByte(key, 0)
	if i < 0 {
		return "", nil, fmt.Errorf("%w: series key without spec", errCorrupt)
	}
	spec := Spec(key[:i])
	d := decoder{Dec: codec.NewDec([]byte(key[i+1:]))}
	var vals []string
	for d.Len() > 0 && d.Err() == nil {
		vals = append(vals, string(d.UvarintBytes()))
	}
	return spec, vals, d.Err()
}
