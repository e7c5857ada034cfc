package main

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/source/file"
)

// grafanaDashboard is what the tests read of a dashboard JSON file.
type grafanaDashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr   string `json:"expr"`
			RawSQL string `json:"rawSql"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T, path string) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no title, uid or panels", path)
	}
	return d
}

// TestGrafanaCollectorDashboard: grafana/xrdmon-collector.json parses, and
// every metric its queries name is one a collector exports, with labels
// it has (docs/metrics.md lists each metric's labels).
func TestGrafanaCollectorDashboard(t *testing.T) {
	d := readDashboard(t, "../../grafana/xrdmon-collector.json")

	// The metrics a collector exports: a daemon with every component, and
	// the file input's (registered only by an import, which exits).
	exported := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\w+) (\w+)$`).FindAllSubmatch(exportedMetrics(t), -1) {
		name := string(m[1])
		exported[name] = true
		if string(m[2]) == "histogram" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				exported[name+suffix] = true
			}
		}
	}
	reg := prometheus.NewRegistry()
	if _, err := file.New(file.Options{}, nil, reg); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		exported[f.GetName()] = true
	}

	// Each metric's labels, from docs/metrics.md's tables.
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string][]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(xrdmon_\\w+)` \\| \\w+ \\| ([^|]*) \\|").FindAllStringSubmatch(string(doc), -1) {
		for l := range strings.SplitSeq(m[2], ",") {
			if l = strings.TrimSpace(l); l != "—" && l != "" {
				labels[m[1]] = append(labels[m[1]], l)
			}
		}
	}

	metricRe := regexp.MustCompile(`\b((?:xrdmon|process)_[a-z0-9_]+)`)
	labelRe := regexp.MustCompile(`(\w+)\s*(?:=~|!~|!=|=)\s*"|by \(([^)]*)\)`)
	queries := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				continue
			}
			queries++
			names := metricRe.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: %s names no metric", p.Title, tg.Expr)
			}
			var have []string
			for _, n := range names {
				if !exported[n] {
					t.Errorf("panel %q: %s is not a metric xrdmon exports", p.Title, n)
				}
				have = append(have, labels[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")]...)
			}
			for _, m := range labelRe.FindAllStringSubmatch(tg.Expr, -1) {
				for l := range strings.SplitSeq(m[1]+m[2], ",") {
					l = strings.TrimSpace(l)
					if l == "instance" || l == "job" || l == "le" {
						continue // Prometheus's own, and histograms'
					}
					if !slices.Contains(have, l) {
						t.Errorf("panel %q: label %q is not one of %v (%s)", p.Title, l, names, tg.Expr)
					}
				}
			}
		}
	}
	if queries < 20 {
		t.Errorf("only %d queries", queries)
	}
}

// TestGrafanaMonitoredDashboard: grafana/xrdmon-monitored.json parses, and
// every metric its queries name is a documented monitored metric, with
// labels it has (a fresh collector exports none of them before it hears a
// server, so docs/metrics.md is the reference; TestMonitoredExport checks
// the export).
func TestGrafanaMonitoredDashboard(t *testing.T) {
	d := readDashboard(t, "../../grafana/xrdmon-monitored.json")
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string][]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(xrdmon_\\w+)` \\| \\w+ \\| ([^|]*) \\|").FindAllStringSubmatch(string(doc), -1) {
		labels[m[1]] = []string{}
		for l := range strings.SplitSeq(m[2], ",") {
			if l = strings.TrimSpace(l); l != "—" && l != "" {
				labels[m[1]] = append(labels[m[1]], l)
			}
		}
	}
	metricRe := regexp.MustCompile(`\b(xrdmon_[a-z0-9_]+)`)
	labelRe := regexp.MustCompile(`(\w+)\s*(?:=~|!~|!=|=)\s*"|by \(([^)]*)\)`)
	queries := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			queries++
			names := metricRe.FindAllString(tg.Expr, -1)
			var have []string
			for _, n := range names {
				l, ok := labels[n]
				if !ok || (n != "xrdmon_packets_total" && !strings.HasPrefix(n, "xrdmon_monitored_")) {
					t.Errorf("panel %q: %s is not a documented monitored metric", p.Title, n)
				}
				have = append(have, l...)
			}
			for _, m := range labelRe.FindAllStringSubmatch(tg.Expr, -1) {
				for l := range strings.SplitSeq(m[1]+m[2], ",") {
					if l = strings.TrimSpace(l); l != "instance" && l != "job" && !slices.Contains(have, l) {
						t.Errorf("panel %q: label %q is not one of %v (%s)", p.Title, l, names, tg.Expr)
					}
				}
			}
		}
	}
	if queries < 12 {
		t.Errorf("only %d queries", queries)
	}
}
