package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// SummaryAnswer is the answer of /summary: per server, the series of the
// counters asked for, from its xrd.report summaries.
type SummaryAnswer struct {
	Span
	Step    string          `json:"step"`
	Servers []ServerSummary `json:"servers"`
}

// ServerSummary is one server's series.
type ServerSummary struct {
	Src      string `json:"src"` // host:port, as the server names itself
	ServerIP string `json:"server_ip"`
	Site     string `json:"site,omitempty"`
	Pgm      string `json:"pgm"`
	// Samples is the number of summaries in the window; Restarts the
	// server starts seen between two of them.
	Samples  int             `json:"samples"`
	Restarts int             `json:"restarts"`
	Series   []SummarySeries `json:"series"`
}

// SummarySeries is one value's series. A counter (cumulative since the
// server started) has, per bucket, the increase and its rate per second;
// a gauge (a level: connections now, free space) its last and highest
// value.
type SummarySeries struct {
	Name   string         `json:"name"`
	Kind   string         `json:"kind"` // counter or gauge
	Points []SummaryPoint `json:"points"`
}

// SummaryPoint is one bucket of a SummarySeries.
type SummaryPoint struct {
	Time  time.Time `json:"time"`
	Delta *float64  `json:"delta,omitempty"` // counter: the increase in the bucket
	Rate  *float64  `json:"rate,omitempty"`  // counter: Delta per second of the samples' interval
	Last  *float64  `json:"last,omitempty"`  // gauge
	Max   *float64  `json:"max,omitempty"`   // gauge
}

// defaultSummaryNames are the values /summary gives when none is asked.
var defaultSummaryNames = []string{"link.in", "link.out", "link.num", "link.tot", "xrootd.ops.open", "xrootd.err", "proc.usr.s", "proc.sys.s", "sched.threads"}

// gauge reports whether a summary value is a level rather than a counter
// cumulative since the server started (protocol reference §1; XrdStats,
// XrdLink, XrdScheduler, XrdBuffer, XrdOss).
func gauge(name string) bool {
	switch name {
	case "link.num", "link.maxn", "buff.mem", "buff.buffs", "buff.xlmem", "buff.xlbuffs",
		"sched.inq", "sched.maxinq", "sched.threads", "sched.idle", "poll.att", "xrootd.aio.max":
		return true
	}
	for _, p := range []string{"info.", "sgen.", "oss.paths", "oss.space", "cmsm.", "ofs.han", "ofs.opr", "ofs.opw", "ofs.opp"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// wrap32 is where a counter of 32 bits wraps.
const wrap32 = 1 << 32

// summaryPages bounds the events one /summary reads (1000 a page).
const summaryPages = 1000

func (a *API) summary(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	from, to, err := a.window(v)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	step := v.Get("step")
	if step == "" {
		step = autoStep(to.Sub(from))
	}
	d, ok := steps[step]
	if !ok {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("step: %q is not 1m, 1h or 1d", step))
		return
	}
	if n := to.Sub(from) / d; n > maxPoints {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("step: %d buckets of %s in the window; at most %d (use a coarser step)", n, step, maxPoints))
		return
	}
	names := defaultSummaryNames
	if s := v.Get("name"); s != "" {
		names = strings.Split(s, ",")
	}
	if len(names) > maxSummaryNames {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("name: %d names; at most %d", len(names), maxSummaryNames))
		return
	}
	buckets := int(to.Sub(from)/d) + 1
	// The bucket before the window gives the first delta of the window.
	q := store.EventQuery{From: from.Add(-d), To: to, Types: []record.EventType{record.EventSummary},
		Server: v.Get("server"), Site: v.Get("site"), Limit: 1000, MaxBytes: a.opts.MaxPageBytes}
	byServer := map[string][]record.SummaryReport{}
	ips := map[string]string{}
	for page := 0; ; page++ {
		if page == summaryPages {
			writeError(w, http.StatusBadRequest, "too many summaries in the window: narrow it, or ask for one server")
			return
		}
		evs, next, err := a.recs.QueryEvents(r.Context(), q)
		if err != nil {
			a.queryFailed(w, "Summary query failed", err)
			return
		}
		for i := range evs {
			var s record.SummaryReport
			if json.Unmarshal(evs[i].Data, &s) != nil {
				continue
			}
			s.Values, s.Texts = wanted(s.Values, names), nil
			key := evs[i].ServerIP + " " + s.Src + " " + s.Pgm
			if _, ok := byServer[key]; !ok && len(byServer) == a.opts.MaxPoints/(len(names)*buckets) {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("more than %d servers × %d names × %d buckets of %s; at most %d points (narrow the window, ask for one server or fewer names)",
					len(byServer), len(names), buckets, step, a.opts.MaxPoints))
				return
			}
			byServer[key] = append(byServer[key], s)
			ips[key] = evs[i].ServerIP
		}
		if next == nil {
			break
		}
		q.After = next
	}
	ans := SummaryAnswer{Span: spanOf(from, to), Step: step, Servers: []ServerSummary{}}
	for key, samples := range byServer {
		ans.Servers = append(ans.Servers, serverSeries(ips[key], samples, names, from, to, d))
	}
	slices.SortFunc(ans.Servers, func(x, y ServerSummary) int {
		return cmp.Or(cmp.Compare(x.Src, y.Src), cmp.Compare(x.ServerIP, y.ServerIP), cmp.Compare(x.Pgm, y.Pgm))
	})
	a.writeJSON(w, http.StatusOK, ans)
}

// maxSummaryNames bounds the values one /summary asks for.
const maxSummaryNames = 64

// wanted returns the values of vals named in names (a summary holds
// hundreds; an answer shows a few).
func wanted(vals map[string]float64, names []string) map[string]float64 {
	out := make(map[string]float64, len(names))
	for _, n := range names {
		if v, ok := vals[n]; ok {
			out[n] = v
		}
	}
	return out
}

// serverSeries makes the series of one server from its samples (oldest
// first). A counter's increase between two samples is the difference of
// its values; when the server restarted in between (another start time or
// process) the new value is the increase since the start; when a counter
// of 32 bits went down it wrapped; any other decrease is a reset, and the
// new value is the increase.
func serverSeries(ip string, samples []record.SummaryReport, names []string, from, to time.Time, step time.Duration) ServerSummary {
	last := samples[len(samples)-1]
	out := ServerSummary{Src: last.Src, ServerIP: ip, Site: last.Site, Pgm: last.Pgm}
	s := int64(step / time.Second)
	lo, hi := from.Unix(), to.Unix()
	bucket := func(t int64) int64 { return t - mod(t, s) }
	for i := range samples {
		if samples[i].Tod >= lo {
			out.Samples++
		}
		if i > 0 && samples[i].Tod >= lo && (samples[i].Tos != samples[i-1].Tos || samples[i].Pid != samples[i-1].Pid) {
			out.Restarts++
		}
	}
	for _, name := range names {
		sr := SummarySeries{Name: name, Kind: "counter", Points: []SummaryPoint{}}
		if gauge(name) {
			sr.Kind = "gauge"
		}
		type acc struct {
			delta, secs, last, max float64
			n                      int
		}
		buckets := map[int64]*acc{}
		var order []int64
		get := func(b int64) *acc {
			a := buckets[b]
			if a == nil {
				a = &acc{max: math.Inf(-1)}
				buckets[b] = a
				order = append(order, b)
			}
			return a
		}
		for i, x := range samples {
			val, ok := x.Values[name]
			if !ok || x.Tod < lo || x.Tod >= hi {
				continue
			}
			a := get(bucket(x.Tod))
			if sr.Kind == "gauge" {
				a.last, a.max, a.n = val, max(a.max, val), a.n+1
				continue
			}
			if i == 0 {
				continue // no earlier value: the increase is unknown
			}
			p := samples[i-1]
			prev, ok := p.Values[name]
			if !ok || x.Tod <= p.Tod {
				continue
			}
			var delta float64
			switch {
			case x.Tos != p.Tos || x.Pid != p.Pid:
				delta = val // restarted: counted from zero since
			case val >= prev:
				delta = val - prev
			case prev < wrap32:
				delta = val + wrap32 - prev // a 32-bit counter wrapped
			default:
				delta = val // reset
			}
			a.delta += delta
			a.secs += float64(x.Tod - p.Tod)
			a.n++
		}
		slices.Sort(order)
		for _, b := range order {
			a := buckets[b]
			pt := SummaryPoint{Time: time.Unix(b, 0).UTC()}
			if sr.Kind == "gauge" {
				pt.Last, pt.Max = ptr(a.last), ptr(a.max)
			} else {
				if a.n == 0 {
					continue
				}
				pt.Delta, pt.Rate = ptr(a.delta), ptr(a.delta/a.secs)
			}
			if pt.Last == nil && pt.Max == nil && pt.Delta == nil && pt.Rate == nil {
				continue // nothing finite to show
			}
			sr.Points = append(sr.Points, pt)
		}
		out.Series = append(out.Series, sr)
	}
	return out
}

// ptr returns a pointer to f, or nil when f is not finite (an increase of
// ±1.7e308 overflows): JSON has no infinities, and one of them would make
// the whole answer fail to encode.
func ptr(f float64) *float64 {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil
	}
	return &f
}

// mod is t mod s, non-negative.
func mod(t, s int64) int64 {
	m := t % s
	if m < 0 {
		m += s
	}
	return m
}
