package rollup

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// A reader of the store answers as the builder that wrote it, and an
// exporter that applies Changed after every flush holds, in the end, every
// series of every stored bucket with its final value.
func TestReaderAndChanged(t *testing.T) {
	st, _ := collected(t, longConfig())
	ctx := context.Background()
	if _, err := NewReader(ctx, st.Reader); !errors.Is(err, ErrNoRollups) {
		t.Fatalf("reader of a store without rollups: %v, want ErrNoRollups", err)
	}
	cfg := DefaultConfig()
	cfg.RetentionMinute, cfg.RetentionHour = 0, 0
	b := newBuilder(t, st, cfg)

	type cell struct {
		step, start int64
		key         string
	}
	exported := map[cell]*Agg{}
	var after int64
	export := func() {
		t.Helper()
		var err error
		after, err = Changed(ctx, st.Reader, after, func(step, start int64, rows []ExportRow) error {
			for _, r := range rows {
				exported[cell{step, start, string(r.Spec) + "/" + joinKeys(r.Keys)}] = r.Agg
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Flush (and export) every 2,000 entries, so that buckets get several
	// parts, some compacted between two exports.
	for {
		entries, err := st.Read(ctx, b.cursor, 2000)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == 0 {
			break
		}
		b.Apply(entries)
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		export()
	}
	export() // nothing new: nothing changes
	r, err := NewReader(ctx, st.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, spec := range b.Specs() {
		by := spec.Dims()
		got, gotTotal, err := r.Top(ctx, by, forever[0], forever[1], ByBytes, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, wantTotal, err := b.Top(ctx, by, forever[0], forever[1], ByBytes, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || diffAgg(&gotTotal, &wantTotal) != "" {
			t.Fatalf("%q: reader %d rows, total %s; builder %d rows", spec, len(got), diffAgg(&gotTotal, &wantTotal), len(want))
		}
		// A top 3 (ranked by sums, then read in full) is the head of the
		// whole ranking, with the same total.
		for _, m := range []Measure{ByBytes, ByWrite, ByTransfers, ByUsers} {
			all, allTotal, err := r.Top(ctx, by, forever[0], forever[1], m, 0)
			if err != nil {
				t.Fatal(err)
			}
			top, topTotal, err := r.Top(ctx, by, forever[0], forever[1], m, 3)
			if err != nil {
				t.Fatal(err)
			}
			if len(top) != min(3, len(all)) || diffAgg(&topTotal, &allTotal) != "" {
				t.Fatalf("%q by %s: top 3 has %d rows, total %s", spec, m, len(top), diffAgg(&topTotal, &allTotal))
			}
			for i := range top {
				if !slices.Equal(top[i].Keys, all[i].Keys) || diffAgg(&top[i].Agg, &all[i].Agg) != "" {
					t.Fatalf("%q by %s: row %d %v %s, want %v", spec, m, i, top[i].Keys, diffAgg(&top[i].Agg, &all[i].Agg), all[i].Keys)
				}
			}
		}
		for _, step := range Resolutions {
			ss, err := r.Series(ctx, Query{By: by, From: forever[0], To: forever[1], Step: step})
			if err != nil {
				t.Fatal(err)
			}
			s := int64(step / time.Second)
			for _, sr := range ss {
				for _, p := range sr.Points {
					n++
					e := exported[cell{s, p.Time.Unix(), string(spec) + "/" + joinKeys(sr.Keys)}]
					if e == nil {
						t.Fatalf("%q %s %v at %s: not exported", spec, step, sr.Keys, p.Time)
					}
					if d := diffAgg(e, &p.Agg); d != "" {
						t.Fatalf("%q %s %v at %s: exported %s", spec, step, sr.Keys, p.Time, d)
					}
				}
			}
		}
	}
	if n != len(exported) {
		t.Errorf("%d cells exported, %d stored", len(exported), n)
	}
	if _, err := r.Series(ctx, Query{By: []record.Dim{record.DimIdentity}, From: forever[0], To: forever[1], Step: time.Hour}); !errors.Is(err, ErrNotRolledUp) {
		t.Errorf("reader by path: %v, want ErrNotRolledUp", err)
	}
	var _ PartReader = (*store.Reader)(nil)
}

func joinKeys(keys []string) string {
	out := ""
	for _, k := range keys {
		out += k + "\x00"
	}
	return out
}
