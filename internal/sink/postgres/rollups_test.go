package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/rollup"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
	"github.com/xrdmon/xrdmon/internal/store"
)

// pgSums is a rollups table's sums of one dimension combination, by value.
type pgSums map[string][3]int64 // key -> read+readv, write, transfers+partial

// readPGRollups returns the sums by the values of the columns of by (one
// or two dimensions), nil while the table is not there.
func readPGRollups(t *testing.T, u, schema string, step int, by []record.Dim) pgSums {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var exists bool
	if err := c.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema+".rollups").Scan(&exists); err != nil || !exists {
		return nil
	}
	col := func(d record.Dim) string {
		for _, c := range rollupDims {
			if c.dim == d {
				return "coalesce(" + c.col + ", '')"
			}
		}
		t.Fatalf("no column for %s", d)
		return ""
	}
	key := col(by[0]) + " || '/'"
	if len(by) > 1 {
		key += " || " + col(by[1])
	}
	rows, err := c.Query(ctx, `SELECT `+key+`, sum(read_bytes + readv_bytes)::bigint,
		sum(write_bytes)::bigint, sum(transfers + partial)::bigint
		FROM `+pgx.Identifier{schema}.Sanitize()+`.rollups WHERE step = $1 AND dims = $2 GROUP BY 1`, step, string(rollup.SpecOf(by)))
	if err != nil {
		t.Fatal(err)
	}
	out := pgSums{}
	for rows.Next() {
		var k string
		var v [3]int64
		if err := rows.Scan(&k, &v[0], &v[1], &v[2]); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func builderSums(t *testing.T, b *rollup.Builder, by []record.Dim) pgSums {
	t.Helper()
	rows, _, err := b.Top(context.Background(), by, time.Unix(0, 0), time.Unix(1<<40, 0), rollup.ByBytes, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := pgSums{}
	for _, r := range rows {
		k := r.Keys[0] + "/"
		if len(r.Keys) > 1 {
			k += r.Keys[1]
		}
		out[k] = [3]int64{r.ReadBytes + r.ReadvBytes, r.WriteBytes, r.Transfers + r.Partial}
	}
	return out
}

// rollupStore returns a store and the rollup builder that follows it,
// keeping every resolution forever (the records are from 2026).
func rollupStore(t *testing.T) (*store.Store, *rollup.Builder) {
	t.Helper()
	st := sinktest.OpenStore(t)
	cfg := rollup.DefaultConfig()
	cfg.RetentionMinute, cfg.RetentionHour = 0, 0
	b, err := rollup.New(cfg, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st, b
}

// addRolledUp appends recs to st and rolls them up with b.
func addRolledUp(t *testing.T, st *store.Store, b *rollup.Builder, recs []record.Record) {
	t.Helper()
	ctx := context.Background()
	if err := st.Append(ctx, recs, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRollupExport: the rollups the collector builds reach PostgreSQL's
// rollups table with the builder's sums, at every resolution; new records
// update the buckets they touch, and a restarted sink exports nothing
// twice (sums stay equal, not doubled).
func TestRollupExport(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	schema := sinktest.PostgresSchema(t, u)
	st, b := rollupStore(t)
	add := func(from, n int) {
		t.Helper()
		addRolledUp(t, st, b, testRecords(from, n))
	}
	add(0, 600) // ten hours of records, one a minute
	opts := fastOptions(schema)
	opts.RollupInterval = 50 * time.Millisecond
	run := func() func() {
		s, err := NewWithOptions(Config{Enabled: true, URL: u, Rollups: true, Collector: "c1"}, opts, st, sinktest.Discard(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return sinktest.RunSink(t, s)
	}
	check := func(what string) {
		t.Helper()
		for _, by := range [][]record.Dim{{record.DimSite}, {record.DimSite, record.DimVO}, {record.DimLocality}} {
			want := builderSums(t, b, by)
			for _, step := range []int{60, 3600, 86400} {
				var got pgSums
				deadline := time.Now().Add(10 * time.Second)
				for {
					got = readPGRollups(t, u, schema, step, by)
					if len(got) == len(want) && equalSums(got, want) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s, %v by %ds: PostgreSQL has %v, the builder %v", what, by, step, got, want)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
	}
	stop := run()
	check("the first export")
	add(600, 300) // five more hours: new buckets and a changed day
	check("the export of new records")
	stop()
	add(900, 60)
	stop = run()
	check("the export after a restart")
	stop()
	n := sinktest.PostgresValue[int64](t, u, `SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.rollups WHERE step = 3600 AND dims = ''`)
	if n != 16 { // 960 minutes from 12:00 (minus the 90 s before the first end): hours 12..03
		t.Errorf("%d hourly total rows, want 16", n)
	}
	part := sinktest.PostgresValue[int64](t, u, `SELECT part FROM `+pgx.Identifier{schema}.Sanitize()+`.rollup_exports`)
	if part == 0 {
		t.Error("export position not saved")
	}
}

func equalSums(a, b pgSums) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
