package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// metricSums is a scrape of a Prometheus text exposition: each sample's
// value summed over its labels, by metric name, and by name{labels}.
type metricSums struct {
	byName   map[string]float64
	bySeries map[string]float64
}

func (m metricSums) get(name string) float64 { return m.byName[name] }

// series returns one labelled sample, e.g. `xrdmon_packets_total{outcome="accounted"}`.
func (m metricSums) series(s string) float64 { return m.bySeries[s] }

// parseMetrics reads the Prometheus text format. Histogram and summary
// parts keep their suffixed names; comments are skipped.
func parseMetrics(r io.Reader) (metricSums, error) {
	m := metricSums{byName: make(map[string]float64), bySeries: make(map[string]float64)}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		series, value := line, ""
		if i := strings.LastIndexByte(line, '}'); i >= 0 {
			series, value = line[:i+1], strings.TrimSpace(line[i+1:])
		} else if f := strings.Fields(line); len(f) >= 2 {
			series, value = f[0], f[1]
		}
		if f := strings.Fields(value); len(f) > 0 {
			value = f[0] // drop a timestamp
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		name := series
		if i := strings.IndexByte(series, '{'); i >= 0 {
			name = series[:i]
		}
		m.byName[name] += v
		m.bySeries[series] += v
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("read metrics: %w", err)
	}
	return m, nil
}

// scrape fetches and parses url.
func scrape(ctx context.Context, c *http.Client, url string) (metricSums, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return metricSums{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return metricSums{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return metricSums{}, fmt.Errorf("scrape %s: status %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}
