package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// A version 6 store's rollup parts (every spec in one part) migrate as
// parts of every spec: read for any spec, and by number for exports.
func TestRollupMigrationV7(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v6.db")
	db, err := sql.Open(driverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations[:6] {
		if err := m(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`INSERT INTO rollups (step, start, part, data) VALUES (60, 600, 1, x'01'), (60, 660, 2, x'02'), (3600, 0, 2, x'03')`,
		`PRAGMA user_version = 6`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, _ := openTest(t, func(o *Options) { o.Path = path })
	for _, spec := range []string{"site", "", AllSpecs} {
		var got []RollupPart
		err := s.RollupParts(ctx, 60, 0, 1000, spec, func(p RollupPart) error {
			p.Data = append([]byte(nil), p.Data...)
			got = append(got, p)
			return nil
		})
		if err != nil || len(got) != 2 || got[0].Spec != AllSpecs || got[1].Data[0] != 2 {
			t.Fatalf("spec %q: %+v, %v", spec, got, err)
		}
	}
	// A new part of one spec is read for that spec only.
	if err := s.CommitRollup(ctx, RollupCommit{Cursor: 1, State: []byte{1}, Add: []RollupPart{{Step: 60, Start: 720, Part: 3, Spec: "vo", Data: []byte{4}}}}); err != nil {
		t.Fatal(err)
	}
	n := 0
	_ = s.RollupParts(ctx, 60, 720, 721, "site", func(RollupPart) error { n++; return nil })
	if n != 0 {
		t.Errorf("a part of vo read for site")
	}
	changed, upTo, err := s.RollupChanged(ctx, 1)
	if err != nil || upTo != 3 || len(changed) != 3 {
		t.Fatalf("changed after part 1: %v up to %d, %v", changed, upTo, err)
	}
}
