// Command vulndb writes a Go vulnerability database in the layout
// govulncheck reads with -db file://DIR (the "v1" layout of
// https://go.dev/doc/security/vuln/database) from a directory of OSV JSON
// files, such as data/osv of the golang.org/x/vulndb module:
//
//	DIR/index/db.json       {"modified": the latest entry's modified time}
//	DIR/index/modules.json  [{"path": module, "vulns": [{"id", "modified"}]}]
//	DIR/index/vulns.json    [{"id", "modified", "aliases"}]
//	DIR/ID/<id>.json        each entry, as it is
//
// The modules index leaves out the optional "fixed" version, so govulncheck
// reads the entry of every vulnerability of a module it uses and decides
// from its ranges. .ci/vulndb runs it for `make vulncheck`.
//
// Usage: go run ./internal/tools/vulndb -osv DIR -out DIR
package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// entry is what the indexes need of an OSV entry.
type entry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
	} `json:"affected"`
}

type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
}

type module struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

type vuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
}

func main() {
	osvDir := flag.String("osv", "", "directory of OSV JSON files (GO-YYYY-NNNN.json)")
	out := flag.String("out", "", "directory to write the database to (created)")
	flag.Parse()
	if *osvDir == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := build(*osvDir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(1)
	}
}

// build reads every entry of osvDir and writes the database to out.
func build(osvDir, out string) error {
	files, err := filepath.Glob(filepath.Join(osvDir, "GO-*.json"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no OSV entries in %s", osvDir)
	}
	if err := os.MkdirAll(filepath.Join(out, "ID"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(out, "index"), 0o755); err != nil {
		return err
	}
	var (
		vulns    []vuln
		modules  = map[string]*module{}
		modified time.Time
	)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var e entry
		if err := json.Unmarshal(raw, &e); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if e.ID == "" || strings.ContainsAny(e.ID, `/\`) {
			return fmt.Errorf("%s: bad id %q", f, e.ID)
		}
		if err := os.WriteFile(filepath.Join(out, "ID", e.ID+".json"), raw, 0o644); err != nil {
			return err
		}
		vulns = append(vulns, vuln{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		if e.Modified.After(modified) {
			modified = e.Modified
		}
		for _, a := range e.Affected {
			m := modules[a.Package.Name]
			if m == nil {
				m = &module{Path: a.Package.Name}
				modules[m.Path] = m
			}
			if !slices.ContainsFunc(m.Vulns, func(v moduleVuln) bool { return v.ID == e.ID }) {
				m.Vulns = append(m.Vulns, moduleVuln{ID: e.ID, Modified: e.Modified})
			}
		}
	}
	slices.SortFunc(vulns, func(a, b vuln) int { return cmp.Compare(a.ID, b.ID) })
	mods := make([]*module, 0, len(modules))
	for _, m := range modules {
		slices.SortFunc(m.Vulns, func(a, b moduleVuln) int { return cmp.Compare(a.ID, b.ID) })
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b *module) int { return cmp.Compare(a.Path, b.Path) })
	return errors.Join(
		writeJSON(filepath.Join(out, "index", "db.json"), struct {
			Modified time.Time `json:"modified"`
		}{modified}),
		writeJSON(filepath.Join(out, "index", "modules.json"), mods),
		writeJSON(filepath.Join(out, "index", "vulns.json"), vulns))
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, b, 0o644)
}
