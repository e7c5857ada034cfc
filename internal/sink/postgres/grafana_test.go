package postgres

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/sink/sinktest"
)

// TestGrafanaRollupsDashboard: every query of grafana/xrdmon-rollups.json
// (panels and variables), with Grafana's macros expanded as its
// PostgreSQL data source does, runs against the schema this package
// creates and returns the rollups exported from a store: the tables and
// columns it names exist, and its panels show data.
func TestGrafanaRollupsDashboard(t *testing.T) {
	u := testURL(t)
	t.Parallel()
	b, err := os.ReadFile("../../../grafana/xrdmon-rollups.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Format string `json:"format"`
				RawSQL string `json:"rawSql"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("xrdmon-rollups.json: %v", err)
	}

	// Rollups of ten hours of records, some partial, exported by collector c1.
	schema := sinktest.PostgresSchema(t, u)
	st, builder := rollupStore(t)
	ctx := context.Background()
	recs := testRecords(0, 600)
	for i := range recs {
		if i%7 == 0 {
			recs[i].Reason = []record.Reason{record.Timeout, record.Disconnect}[i%2]
		}
	}
	addRolledUp(t, st, builder, recs)
	opts := fastOptions(schema)
	opts.RollupInterval = 50 * time.Millisecond
	s, err := NewWithOptions(Config{Enabled: true, URL: u, Rollups: true, Collector: "c1"}, opts, st, sinktest.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := sinktest.RunSink(t, s)
	want := builderSums(t, builder, []record.Dim{record.DimSite})
	for deadline := time.Now().Add(10 * time.Second); !equalSums(readPGRollups(t, u, schema, 3600, []record.Dim{record.DimSite}), want); {
		if time.Now().After(deadline) {
			t.Fatal("the rollups did not reach PostgreSQL")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()

	// Grafana's macros and the dashboard's variable, for the range of the
	// records (under 12 hours: the minute rows).
	from, to := sinktest.T0.Add(-time.Hour).UTC().Format(time.RFC3339), sinktest.T0.Add(11*time.Hour).UTC().Format(time.RFC3339)
	timeFilter := regexp.MustCompile(`\$__timeFilter\((\w+)\)`)
	expand := func(sql string) string {
		sql = timeFilter.ReplaceAllString(sql, "$1 BETWEEN '"+from+"' AND '"+to+"'")
		sql = strings.NewReplacer("$__timeFrom()", "'"+from+"'", "$__timeTo()", "'"+to+"'", "$collector", "'c1'",
			"xrdmon.", pgx.Identifier{schema}.Sanitize()+".").Replace(sql)
		if strings.Contains(sql, "$") {
			t.Fatalf("a macro or variable left unexpanded: %s", sql)
		}
		return sql
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows := func(sql string) ([]string, int) {
		t.Helper()
		r, err := conn.Query(ctx, expand(sql))
		if err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
		defer r.Close()
		var cols []string
		for _, f := range r.FieldDescriptions() {
			cols = append(cols, f.Name)
		}
		n := 0
		for r.Next() {
			n++
		}
		if err := r.Err(); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
		return cols, n
	}

	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			if _, n := rows(q); n != 1 {
				t.Errorf("variable %s lists %d collectors, want 1 (c1)", v.Name, n)
			}
		}
	}
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			cols, n := rows(tg.RawSQL)
			if n == 0 {
				t.Errorf("panel %q shows nothing", p.Title)
			}
			if tg.Format == "time_series" && (len(cols) < 2 || cols[0] != "time") {
				t.Errorf("panel %q: a time series needs a first column time, has %v", p.Title, cols)
			}
		}
	}
	if queries < 10 {
		t.Errorf("only %d queries", queries)
	}
}
