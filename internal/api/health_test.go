package api

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// healthRegistry is a registry with the metrics the verdict reads, as the
// collector registers them.
type healthRegistry struct {
	reg      *prometheus.Registry
	packets  prometheus.Counter
	rejected *prometheus.CounterVec
	drops    prometheus.Counter
	lost     prometheus.Counter
	ahead    prometheus.Counter
	backlog  *prometheus.GaugeVec
}

func newHealthRegistry() *healthRegistry {
	h := &healthRegistry{
		reg:      prometheus.NewRegistry(),
		packets:  prometheus.NewCounter(prometheus.CounterOpts{Name: "xrdmon_packets_total"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xrdmon_packets_rejected_total"}, []string{"reason"}),
		drops:    prometheus.NewCounter(prometheus.CounterOpts{Name: "xrdmon_udp_kernel_drops_total"}),
		lost:     prometheus.NewCounter(prometheus.CounterOpts{Name: "xrdmon_packets_lost_total"}),
		ahead:    prometheus.NewCounter(prometheus.CounterOpts{Name: "xrdmon_records_clock_ahead_total"}),
		backlog:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "xrdmon_sink_backlog_records"}, []string{"sink"}),
	}
	h.reg.MustRegister(h.packets, h.rejected, h.drops, h.lost, h.ahead, h.backlog,
		prometheus.NewCounter(prometheus.CounterOpts{Name: "go_not_ours_total"}))
	return h
}

func value(t *testing.T, a HealthAnswer, sample int, name string) (float64, bool) {
	t.Helper()
	i := slices.Index(a.Names, name)
	if i < 0 {
		t.Fatalf("series %s absent from %q", name, a.Names)
	}
	v := a.Samples[sample].Values
	if i >= len(v) || v[i] == nil {
		return 0, false
	}
	return *v[i], true
}

// TestHistorySamples: families are summed over their labels, each
// labelled series is kept too, a series that appears later is null
// before, foreign families are left out, and from selects the samples.
func TestHistorySamples(t *testing.T) {
	r := newHealthRegistry()
	h := NewHistory(r.reg, 10*time.Second, 100)
	r.packets.Add(100)
	h.Sample(t0)
	r.packets.Add(50)
	r.rejected.WithLabelValues("short").Add(2)
	r.rejected.WithLabelValues("unknown_type").Add(3)
	h.Sample(t0.Add(10 * time.Second))

	a := h.Answer(time.Time{})
	if len(a.Samples) != 2 || a.StepSeconds != 10 {
		t.Fatalf("samples %d, step %v", len(a.Samples), a.StepSeconds)
	}
	if v, _ := value(t, a, 1, "xrdmon_packets_total"); v != 150 {
		t.Errorf("packets = %v, want 150", v)
	}
	if v, _ := value(t, a, 1, "xrdmon_packets_rejected_total"); v != 5 {
		t.Errorf("rejected (family) = %v, want 5", v)
	}
	if v, _ := value(t, a, 1, `xrdmon_packets_rejected_total{reason="unknown_type"}`); v != 3 {
		t.Errorf("rejected{unknown_type} = %v, want 3", v)
	}
	if _, ok := value(t, a, 0, `xrdmon_packets_rejected_total{reason="short"}`); ok {
		t.Error("a series that did not exist yet has a value")
	}
	for _, n := range a.Names {
		if !strings.HasPrefix(n, "xrdmon_") {
			t.Errorf("foreign series %s kept", n)
		}
	}
	if b := h.Answer(t0.Add(5 * time.Second)); len(b.Samples) != 1 || !b.Samples[0].Time.Equal(t0.Add(10*time.Second)) {
		t.Errorf("from selects %d samples", len(b.Samples))
	}
	// The answer is JSON with nulls for absent values.
	js, err := json.Marshal(a)
	if err != nil || !strings.Contains(string(js), "null") {
		t.Errorf("json: %v %s", err, js)
	}
}

// TestHistoryBounded: the ring keeps the last keep samples, and the series
// are at most maxHealthSeries however many label values appear.
func TestHistoryBounded(t *testing.T) {
	r := newHealthRegistry()
	h := NewHistory(r.reg, time.Second, 5)
	for i := range 2 * maxHealthSeries {
		r.backlog.WithLabelValues(fmt.Sprint("sink", i)).Set(1)
		if i%100 == 0 {
			h.Sample(t0.Add(time.Duration(i) * time.Second))
		}
	}
	h.Sample(t0.Add(time.Hour))
	a := h.Answer(time.Time{})
	if len(a.Samples) != 5 || !a.Samples[4].Time.Equal(t0.Add(time.Hour)) {
		t.Errorf("kept %d samples, last %v", len(a.Samples), a.Samples[len(a.Samples)-1].Time)
	}
	if len(a.Names) != maxHealthSeries {
		t.Errorf("%d series, want the bound %d", len(a.Names), maxHealthSeries)
	}
	for _, s := range a.Samples {
		if len(s.Values) > maxHealthSeries {
			t.Errorf("sample of %d values", len(s.Values))
		}
	}
}

// TestHistoryVerdict: the verdict is ok while only packets flow, warn on
// sequence gaps and on a sink backlog that grows over the window, bad on
// kernel drops, and ok again once the window holds no new trouble.
func TestHistoryVerdict(t *testing.T) {
	r := newHealthRegistry()
	h := NewHistory(r.reg, 10*time.Second, 1000)
	at := t0
	step := func(f func()) {
		if f != nil {
			f()
		}
		at = at.Add(10 * time.Second)
		h.Sample(at)
	}
	verdict := func() Verdict { return h.Answer(time.Time{}).KeepingUp }

	if v := verdict(); v.Status != "ok" {
		t.Errorf("empty: %+v", v)
	}
	for range 10 {
		step(func() { r.packets.Add(1000) })
	}
	if v := verdict(); v.Status != "ok" || len(v.Reasons) != 0 {
		t.Errorf("flowing: %+v", v)
	}
	step(func() { r.lost.Add(7) })
	if v := verdict(); v.Status != "warn" || len(v.Reasons) != 1 || !strings.Contains(v.Reasons[0], "7 datagrams") {
		t.Errorf("lost: %+v", v)
	}
	step(func() { r.drops.Add(3) })
	if v := verdict(); v.Status != "bad" || len(v.Reasons) != 2 {
		t.Errorf("kernel drops: %+v", v)
	}
	for range 7 { // more than a minute without new trouble
		step(nil)
	}
	if v := verdict(); v.Status != "ok" {
		t.Errorf("a minute later: %+v", v)
	}
	for i := range 7 {
		step(func() { r.backlog.WithLabelValues("gracc").Set(float64(20000 + 1000*i)) })
	}
	if v := verdict(); v.Status != "warn" || len(v.Reasons) != 1 || !strings.Contains(v.Reasons[0], `sink="gracc"`) {
		t.Errorf("growing backlog: %+v", v)
	}
	step(func() { r.backlog.WithLabelValues("gracc").Set(100) })
	if v := verdict(); v.Status != "ok" {
		t.Errorf("backlog drained: %+v", v)
	}
	// Records from a server whose clock is ahead: a warning that says so.
	step(func() { r.ahead.Add(12) })
	if v := verdict(); v.Status != "warn" || len(v.Reasons) != 1 || !strings.Contains(v.Reasons[0], "12 records end ahead of the collector's clock") {
		t.Errorf("clock ahead: %+v", v)
	}
}

// TestHistoryVerdictSilent: servers the monitor finds silent make the
// verdict a warning that names them.
func TestHistoryVerdictSilent(t *testing.T) {
	r := newHealthRegistry()
	h := NewHistory(r.reg, 10*time.Second, 100)
	var silent []string
	h.Silent = func() []string { return silent }
	h.Sample(t0)
	h.Sample(t0.Add(10 * time.Second))
	if v := h.Answer(time.Time{}).KeepingUp; v.Status != "ok" {
		t.Errorf("no silent server: %+v", v)
	}
	silent = []string{"xrd1.example.org", "192.0.2.7"}
	v := h.Answer(time.Time{}).KeepingUp
	if v.Status != "warn" || len(v.Reasons) != 1 || !strings.Contains(v.Reasons[0], "2 servers silent") || !strings.Contains(v.Reasons[0], "xrd1.example.org, 192.0.2.7") {
		t.Errorf("two silent servers: %+v", v)
	}
}

// TestHistoryRestore: samples saved by one History are those another
// restores from the file (a restart keeps the hour of health), less the
// ones older than it keeps; a missing file is an empty start.
func TestHistoryRestore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "health.json")
	r := newHealthRegistry()
	h := NewHistory(r.reg, 10*time.Second, 30)
	if err := h.Restore(path, t0, nil); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	for i := range 20 {
		r.packets.Add(100)
		h.Sample(t0.Add(time.Duration(i) * 10 * time.Second))
	}
	if err := h.file.Save(h.saved); err != nil {
		t.Fatal(err)
	}
	before := h.Answer(time.Time{})

	h2 := NewHistory(newHealthRegistry().reg, 10*time.Second, 30)
	if err := h2.Restore(path, t0.Add(300*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	after := h2.Answer(time.Time{})
	// Kept: 30 steps back from t0+300 s, so the samples from t0+0 s on.
	if len(after.Samples) != len(before.Samples) || !slices.Equal(after.Names, before.Names) {
		t.Fatalf("restored %d samples of %v, saved %d of %v", len(after.Samples), after.Names, len(before.Samples), before.Names)
	}
	i := slices.Index(after.Names, "xrdmon_packets_total")
	if got := *after.Samples[19].Values[i]; got != 2000 {
		t.Errorf("last restored packets_total %v, want 2000", got)
	}
	h3 := NewHistory(newHealthRegistry().reg, 10*time.Second, 30)
	if err := h3.Restore(path, t0.Add(390*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if n := len(h3.Answer(time.Time{}).Samples); n != 11 {
		t.Errorf("restored %d samples of the last 300 s, want 11", n)
	}
}
