package api

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xrdmon/xrdmon/internal/atomicfile"
)

// History samples the collector's own metrics at a fixed step and keeps the
// last samples, so that the dashboard shows the last hour of health (rates
// of packets in, rejections by reason, loss, kernel drops, backlogs) the
// moment it opens, without a Prometheus server. It keeps counters and
// gauges of the xrdmon_ families only (histograms are left to Prometheus):
// one value per family (summed over its labels) and one per labelled
// series, whose label values are the collector's own (reasons, domains,
// sinks), never packet strings. Memory is bounded: keep samples of at most
// maxHealthSeries values.
type History struct {
	g    prometheus.Gatherer
	step time.Duration
	keep int

	// Silent, when set, names the servers silent now
	// (monitored.Monitor.Silent): the verdict warns of them. Set it before
	// Run.
	Silent func() []string

	file atomicfile.State // where the samples are kept across restarts (Restore)

	mu      sync.Mutex
	names   []string       // series names, in the order they first appeared
	index   map[string]int // name → position in names
	samples []sample       // oldest first, at most keep
}

type sample struct {
	t time.Time
	v []float64 // by position in names; NaN where a series was absent
}

// maxHealthSeries bounds the series a History keeps (a sample is at most
// this many float64s).
const maxHealthSeries = 1024

// NewHistory returns a History of g's metrics every step, keeping the last
// keep samples.
func NewHistory(g prometheus.Gatherer, step time.Duration, keep int) *History {
	return &History{g: g, step: step, keep: keep, index: map[string]int{}}
}

// Run samples every step until ctx ends. With a file (Restore), it saves
// the samples there every minute and when it ends.
func (h *History) Run(ctx context.Context) error {
	h.Sample(time.Now())
	t := time.NewTicker(h.step)
	defer t.Stop()
	saveEvery := max(1, int(time.Minute/h.step))
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			h.file.SaveOrLog(h.saved)
			return nil
		case now := <-t.C:
			h.Sample(now)
			if n%saveEvery == 0 {
				h.file.SaveOrLog(h.saved)
			}
		}
	}
}

// maxHistoryFile bounds the file Restore reads (a History of
// maxHealthSeries values per sample and a day of samples fits).
const maxHistoryFile = 256 << 20

// Restore makes h keep its samples in the file path across restarts: it
// reads the samples a previous process saved there (those within the last
// keep steps), and Run saves them there. A missing file is a first start;
// a file that does not parse is ignored (the history starts empty) and
// reported.
func (h *History) Restore(path string, now time.Time, log *slog.Logger) error {
	h.file = atomicfile.State{Path: path, Log: log, Lost: "Health history not saved; a restart will start it empty"}
	var a HealthAnswer
	found, err := atomicfile.ReadJSON(path, maxHistoryFile, &a)
	if err != nil {
		return fmt.Errorf("restore health history: %w", err)
	}
	if !found {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range a.Names {
		if _, ok := h.index[n]; !ok && len(h.names) < maxHealthSeries {
			h.index[n] = len(h.names)
			h.names = append(h.names, n)
		}
	}
	oldest := now.Add(-time.Duration(h.keep) * h.step)
	for _, s := range a.Samples {
		if s.Time.Before(oldest) || s.Time.After(now) || len(s.Values) > len(a.Names) {
			continue
		}
		v := make([]float64, len(h.names))
		for i := range v {
			v[i] = math.NaN()
		}
		for i, x := range s.Values {
			if j, ok := h.index[a.Names[i]]; ok && x != nil {
				v[j] = *x
			}
		}
		if len(h.samples) == h.keep {
			h.samples = h.samples[1:]
		}
		h.samples = append(h.samples, sample{t: s.Time.UTC(), v: v})
	}
	return nil
}

// saved is what the file keeps: the samples, without a verdict.
func (h *History) saved() any {
	a := h.Answer(time.Time{})
	return struct {
		Names   []string       `json:"names"`
		Samples []HealthSample `json:"samples"`
	}{a.Names, a.Samples}
}

// Sample gathers the metrics once, as at now.
func (h *History) Sample(now time.Time) {
	fams, err := h.g.Gather()
	if err != nil && len(fams) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	v := make([]float64, len(h.names), len(h.names)+16)
	for i := range v {
		v[i] = math.NaN()
	}
	set := func(name string, x float64) {
		i, ok := h.index[name]
		if !ok {
			if len(h.names) >= maxHealthSeries {
				return
			}
			i = len(h.names)
			h.names = append(h.names, name)
			h.index[name] = i
		}
		for len(v) <= i {
			v = append(v, math.NaN())
		}
		if math.IsNaN(v[i]) {
			v[i] = 0
		}
		v[i] += x
	}
	var sb strings.Builder
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "xrdmon_") || monitoredFamily(name) {
			continue
		}
		for _, m := range f.GetMetric() {
			var x float64
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				x = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				x = m.GetGauge().GetValue()
			default:
				continue
			}
			set(name, x)
			if len(m.GetLabel()) == 0 {
				continue
			}
			sb.Reset()
			sb.WriteString(name)
			sb.WriteByte('{')
			for i, l := range m.GetLabel() {
				if i > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, "%s=%q", l.GetName(), l.GetValue())
			}
			sb.WriteByte('}')
			set(sb.String(), x)
		}
	}
	if len(h.samples) == h.keep {
		copy(h.samples, h.samples[1:])
		h.samples = h.samples[:h.keep-1]
	}
	h.samples = append(h.samples, sample{t: now.UTC(), v: v})
}

// monitoredFamily reports whether name is a family of the monitored data
// (per server, site and VO: thousands of series), not of the collector's
// own health: the History leaves those to Prometheus.
func monitoredFamily(name string) bool {
	return strings.HasPrefix(name, "xrdmon_monitored_")
}

// HealthAnswer is the answer of /api/v1/health.
type HealthAnswer struct {
	StepSeconds float64 `json:"step_seconds"`
	// Names are the series: a family ("xrdmon_packets_total", summed over
	// its labels) or one labelled series of it
	// (`xrdmon_packets_rejected_total{reason="short"}`).
	Names   []string       `json:"names"`
	Samples []HealthSample `json:"samples"`
	// KeepingUp says whether the collector keeps up with its input and
	// outputs, judged on the last minute of samples.
	KeepingUp Verdict `json:"keeping_up"`
}

// HealthSample is one sample: the time and each series' value (null when
// the series did not exist then).
type HealthSample struct {
	Time   time.Time  `json:"time"`
	Values []*float64 `json:"values"`
}

// Verdict is the keeping-up judgement: "ok", "warn" or "bad", and why.
type Verdict struct {
	Status  string   `json:"status"`
	Reasons []string `json:"reasons"`
}

// Answer returns the samples since from and the verdict.
func (h *History) Answer(from time.Time) HealthAnswer {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := HealthAnswer{StepSeconds: h.step.Seconds(), Names: slices.Clone(h.names), Samples: []HealthSample{}}
	for _, s := range h.samples {
		if s.t.Before(from) {
			continue
		}
		hs := HealthSample{Time: s.t, Values: make([]*float64, len(h.names))}
		for i, x := range s.v {
			if !math.IsNaN(x) {
				hs.Values[i] = &x
			}
		}
		a.Samples = append(a.Samples, hs)
	}
	a.KeepingUp = h.verdict()
	if h.Silent != nil {
		if names := h.Silent(); len(names) > 0 {
			if a.KeepingUp.Status == "ok" {
				a.KeepingUp.Status = "warn"
			}
			const show = 5
			list := strings.Join(names[:min(show, len(names))], ", ")
			if len(names) > show {
				list += fmt.Sprintf(" and %d more", len(names)-show)
			}
			a.KeepingUp.Reasons = append(a.KeepingUp.Reasons, fmt.Sprintf("%d servers silent beyond their usual interval: %s (see Servers)", len(names), list))
		}
	}
	return a
}

// The keeping-up rules. Bad: input is dropped by the kernel before we read
// it, the store refuses or is full, or a commit failed. Warn: sequence
// gaps (datagrams lost on the network, or by the sender), rows set aside
// as dead letters, or a sink backlog that grew over the whole window.
var verdictRules = []struct {
	series, status, what string
}{
	{"xrdmon_udp_kernel_drops_total", "bad", "the kernel dropped %s datagrams on our sockets: the collector does not read fast enough (or the receive buffer is small)"},
	{"xrdmon_store_full_total", "bad", "the store was full %s times: input waits"},
	{"xrdmon_store_append_errors_total", "bad", "%s store appends failed"},
	{"xrdmon_pipeline_commit_failures_total", "bad", "%s commits failed for good"},
	{"xrdmon_packets_lost_total", "warn", "%s datagrams missing from the servers' sequences (lost on the way)"},
	{"xrdmon_sink_dead_letters_total", "warn", "%s rows refused by a destination, set aside as dead letters"},
	{"xrdmon_records_clock_ahead_total", "warn", "%s records end ahead of the collector's clock by more than correlate.clock_ahead_tolerance: a server's clock is wrong (they are flagged clock_ahead)"},
}

// verdictWindow is how far back verdict looks.
const verdictWindow = time.Minute

func (h *History) verdict() Verdict {
	v := Verdict{Status: "ok", Reasons: []string{}}
	if len(h.samples) < 2 {
		return v
	}
	last := h.samples[len(h.samples)-1]
	first := last
	for i := len(h.samples) - 1; i >= 0 && last.t.Sub(h.samples[i].t) <= verdictWindow; i-- {
		first = h.samples[i]
	}
	worse := func(status, reason string) {
		if status == "bad" || v.Status == "ok" {
			v.Status = status
		}
		v.Reasons = append(v.Reasons, reason)
	}
	value := func(s sample, name string) float64 {
		if i, ok := h.index[name]; ok && i < len(s.v) && !math.IsNaN(s.v[i]) {
			return s.v[i]
		}
		return 0
	}
	window := last.t.Sub(first.t).Round(time.Second)
	for _, r := range verdictRules {
		if d := value(last, r.series) - value(first, r.series); d > 0 {
			worse(r.status, fmt.Sprintf(r.what, fmt.Sprint(int64(d)))+" in the last "+window.String())
		}
	}
	// A sink backlog that grew at every sample of the window, to more than
	// a few commits' worth, is a destination that does not keep up.
	for i, name := range h.names {
		if !strings.HasPrefix(name, "xrdmon_sink_backlog_records{") {
			continue
		}
		growing := true
		prev := math.NaN()
		for _, s := range h.samples {
			if s.t.Before(first.t) || i >= len(s.v) {
				continue
			}
			if !math.IsNaN(prev) && s.v[i] <= prev {
				growing = false
			}
			prev = s.v[i]
		}
		if growing && prev > 10000 && first.t != last.t {
			worse("warn", fmt.Sprintf("backlog of %s grows: %d entries not yet delivered", strings.TrimPrefix(name, "xrdmon_sink_backlog_records"), int64(prev)))
		}
	}
	return v
}

func (a *API) health(w http.ResponseWriter, r *http.Request) {
	if a.opts.History == nil {
		writeError(w, http.StatusNotFound, "no health history here")
		return
	}
	from, err := ParseTime(r.URL.Query().Get("from"), a.opts.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, "from: "+err.Error())
		return
	}
	a.writeJSON(w, http.StatusOK, a.opts.History.Answer(from))
}
