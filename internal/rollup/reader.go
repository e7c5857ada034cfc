package rollup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/units"
)

// PartReader is the read side of the store the rollups live in
// (store.Reader: safe while a collector writes the store).
type PartReader interface {
	RollupState(ctx context.Context) (state []byte, cursor int64, err error)
	RollupMeta(ctx context.Context) ([]byte, error)
	RollupParts(ctx context.Context, step, from, to int64, spec string, fn func(p store.RollupPart) error) error
	RollupBuckets(ctx context.Context, step, from, to int64) (map[int64]int, error)
	RollupChanged(ctx context.Context, after int64) ([]store.RollupBucket, int64, error)
}

// ErrNoRollups is returned by NewReader for a store whose builder never
// flushed (rollups off, or a collector that has not run long enough).
var ErrNoRollups = errors.New("no rollups in this store")

// meta is what a reader that is not the builder needs to answer as the
// builder would: the series kept, the retention of each resolution, and
// the builder's watermark. The builder saves it with every flush.
type meta struct {
	Dimensions []string `json:"dimensions"`
	// Retention per resolution, seconds (0: for ever).
	RetentionMinute int64 `json:"retention_minute_s"`
	RetentionHour   int64 `json:"retention_hour_s"`
	RetentionDay    int64 `json:"retention_day_s"`
	Watermark       int64 `json:"watermark"`
}

func (b *Builder) marshalMeta(wm int64) []byte {
	m := meta{
		Dimensions:      b.cfg.Dimensions,
		RetentionMinute: int64(b.cfg.RetentionMinute.D() / time.Second),
		RetentionHour:   int64(b.cfg.RetentionHour.D() / time.Second),
		RetentionDay:    int64(b.cfg.RetentionDay.D() / time.Second),
		Watermark:       wm,
	}
	out, _ := json.Marshal(m) // cannot fail: strings and numbers
	return out
}

// NewReader returns a Querier of the rollups stored in r, with the
// dimensions and retention the builder that wrote them had. It holds no
// head: what the builder has not flushed yet (at most
// rollup.flush_interval) is not seen. `xrdmon report` reads a store this
// way.
func NewReader(ctx context.Context, r PartReader) (*Querier, error) {
	raw, err := r.RollupMeta(ctx)
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, ErrNoRollups
	}
	var m meta
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: rollup meta: %v", errCorrupt, err)
	}
	cfg := DefaultConfig()
	cfg.Dimensions = m.Dimensions
	cfg.RetentionMinute = units.Duration(time.Duration(m.RetentionMinute) * time.Second)
	cfg.RetentionHour = units.Duration(time.Duration(m.RetentionHour) * time.Second)
	cfg.RetentionDay = units.Duration(time.Duration(m.RetentionDay) * time.Second)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rollup meta: %w", err)
	}
	specs, _ := cfg.specs()
	return &Querier{cfg: cfg, specs: specs, parts: r, watermark: m.Watermark}, nil
}

// ExportRow is one series of a bucket, as an output exports it.
type ExportRow struct {
	Spec Spec
	Keys []string // the values of Spec's dimensions
	Agg  *Agg
}

// Changed calls fn, for every stored bucket that holds a part numbered
// above after (oldest resolution first, then by start), with the series
// those parts touch, each merged from all the bucket's parts: the whole
// value of the series, to be written over what an output has. It returns
// the part number to pass as after next time. An output that saves that
// number with what it wrote exports every change exactly once, and
// rewrites a series only with a newer value.
func Changed(ctx context.Context, r PartReader, after int64, fn func(step, start int64, rows []ExportRow) error) (int64, error) {
	buckets, upTo, err := r.RollupChanged(ctx, after)
	if err != nil {
		return after, err
	}
	for _, bk := range buckets {
		all := make(map[string]*Agg)
		touched := make(map[string]bool)
		err := r.RollupParts(ctx, bk.Step, bk.Start, bk.Start+1, store.AllSpecs, func(p store.RollupPart) error {
			if p.Part <= after {
				return mergePart(all, p.Data, "")
			}
			return walkStored(p.Data, walk{}, func(key string, a *Agg) {
				touched[key] = true
				mergeInto(all, key, a)
			})
		})
		if err != nil {
			return after, fmt.Errorf("rollup bucket %d/%d: %w", bk.Step, bk.Start, err)
		}
		rows := make([]ExportRow, 0, len(touched))
		for key := range touched {
			spec, vals, err := splitKey(key)
			if err != nil {
				return after, err
			}
			rows = append(rows, ExportRow{Spec: spec, Keys: vals, Agg: all[key]})
		}
		if err := fn(bk.Step, bk.Start, rows); err != nil {
			return after, err
		}
	}
	return upTo, nil
}

// Cutoffs returns, per bucket width in seconds, the start before which the
// builder deletes buckets (its watermark less the retention of that
// resolution); widths kept for ever are absent. An output that exports
// rollups applies them to keep what the store keeps.
func Cutoffs(ctx context.Context, r PartReader) (map[int64]int64, error) {
	raw, err := r.RollupMeta(ctx)
	if err != nil || raw == nil {
		return nil, err
	}
	var m meta
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: rollup meta: %v", errCorrupt, err)
	}
	out := make(map[int64]int64)
	for step, ret := range map[int64]int64{60: m.RetentionMinute, 3600: m.RetentionHour, 86400: m.RetentionDay} {
		if ret > 0 {
			out[step] = m.Watermark - ret
		}
	}
	return out, nil
}
