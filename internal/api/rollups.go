package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/rollup"
)

// SeriesAnswer is the answer of /rollups.
type SeriesAnswer struct {
	By   []record.Dim `json:"by"`
	Step string       `json:"step"`
	Span
	Series []SeriesView `json:"series"`
}

// SeriesView is one series of /rollups.
type SeriesView struct {
	Keys   []string       `json:"keys"`
	Total  rollup.Summary `json:"total"`
	Points []PointView    `json:"points"`
}

// PointView is one bucket of a series.
type PointView struct {
	Time time.Time `json:"time"`
	rollup.Summary
}

// TopAnswer is the answer of /top.
type TopAnswer struct {
	By []record.Dim `json:"by"`
	Span
	Order rollup.Measure `json:"order"`
	Rows  []RowView      `json:"rows"`
	Total rollup.Summary `json:"total"`
}

// RowView is one row of /top.
type RowView struct {
	Keys []string `json:"keys"`
	rollup.Summary
}

var steps = map[string]time.Duration{"1m": time.Minute, "1h": time.Hour, "1d": 24 * time.Hour}

// window reads from and to (default: the last 24 hours up to now).
func (a *API) window(v url.Values) (time.Time, time.Time, error) {
	now := a.opts.Now()
	from, err := ParseTime(v.Get("from"), now)
	if err != nil {
		return from, now, fmt.Errorf("from: %w", err)
	}
	to, err := ParseTime(v.Get("to"), now)
	if err != nil {
		return from, to, fmt.Errorf("to: %w", err)
	}
	if to.IsZero() {
		to = now
	}
	if from.IsZero() {
		from = to.Add(-24 * time.Hour)
	}
	if !from.Before(to) {
		return from, to, errors.New("from: must be before to")
	}
	return from, to, nil
}

// dims reads the by parameter ("" is the total).
func dims(v url.Values) ([]record.Dim, error) {
	if v.Get("by") == "" {
		return nil, nil
	}
	by, err := record.ParseDims(v.Get("by"))
	if err != nil {
		return nil, fmt.Errorf("by: %w", err)
	}
	return by, nil
}

func (a *API) rollups(w http.ResponseWriter, r *http.Request) {
	if a.opts.Rollups == nil {
		writeError(w, http.StatusNotFound, "rollups are off (rollup.enabled)")
		return
	}
	v := r.URL.Query()
	var q rollup.Query
	var err error
	if q.By, err = dims(v); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if q.From, q.To, err = a.window(v); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	step := v.Get("step")
	if step == "" {
		step = autoStep(q.To.Sub(q.From))
	}
	var ok bool
	if q.Step, ok = steps[step]; !ok {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("step: %q is not 1m, 1h or 1d", step))
		return
	}
	if n := q.To.Sub(q.From) / q.Step; n > maxPoints {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("step: %d buckets of %s in the window; at most %d (use a coarser step)", n, step, maxPoints))
		return
	}
	for _, d := range q.By {
		if val, ok := v[string(d)]; ok {
			if q.Where == nil {
				q.Where = make(map[record.Dim]string)
			}
			q.Where[d] = val[0]
		}
	}
	series, err := a.opts.Rollups.Series(r.Context(), q)
	if err != nil {
		a.rollupError(w, err)
		return
	}
	if limit := v.Get("limit"); limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit: %q is not a positive number", limit))
			return
		}
		series = series[:min(n, len(series))]
	}
	points := 0
	for i := range series {
		points += len(series[i].Points)
	}
	if points > a.opts.MaxPoints {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%d series with %d points in all; at most %d (use limit, a coarser step or a shorter window)",
			len(series), points, a.opts.MaxPoints))
		return
	}
	head := SeriesAnswer{By: q.By, Step: step, Span: spanOf(q.From, q.To)}
	a.writeSeries(w, head, series)
}

// writeSeries streams a SeriesAnswer: its head, then each series encoded
// on its own, so that the answer is never built whole in memory.
func (a *API) writeSeries(w http.ResponseWriter, head SeriesAnswer, series []rollup.Series) {
	h, err := json.Marshal(head)
	if err != nil {
		a.log.Error("Cannot encode an API answer", "err", err)
		writeError(w, http.StatusInternalServerError, "the answer could not be encoded")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	var out bytes.Buffer
	out.Write(h[:bytes.LastIndex(h, []byte(`null}`))]) // "series":null} → the list
	out.WriteByte('[')
	enc := json.NewEncoder(&out)
	for i := range series {
		s := &series[i]
		sv := SeriesView{Keys: s.Keys, Total: s.Total.Summary(), Points: make([]PointView, len(s.Points))}
		for j := range s.Points {
			sv.Points[j] = PointView{Time: s.Points[j].Time, Summary: s.Points[j].Summary()}
		}
		if i > 0 {
			out.WriteByte(',')
		}
		if err := enc.Encode(sv); err != nil {
			a.log.Error("Cannot encode a series of an API answer", "err", err)
			return // the answer ends malformed: the client sees the error
		}
		if out.Len() >= 64<<10 {
			if _, err := w.Write(out.Bytes()); err != nil {
				return
			}
			out.Reset()
		}
	}
	out.WriteString("]}\n")
	_, _ = w.Write(out.Bytes())
}

// maxPoints bounds the buckets of one series in an answer.
const maxPoints = 10000

// autoStep picks the finest step that gives at most a few hundred points.
func autoStep(d time.Duration) string {
	switch {
	case d <= 12*time.Hour:
		return "1m"
	case d <= 21*24*time.Hour:
		return "1h"
	}
	return "1d"
}

func (a *API) top(w http.ResponseWriter, r *http.Request) {
	if a.opts.Rollups == nil {
		writeError(w, http.StatusNotFound, "rollups are off (rollup.enabled)")
		return
	}
	v := r.URL.Query()
	by, err := dims(v)
	if err != nil || len(by) == 0 {
		writeError(w, http.StatusBadRequest, "by: a dimension is required (server, site, vo, user, domain, ...)")
		return
	}
	from, to, err := a.window(v)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	order := rollup.Measure(v.Get("order"))
	switch order {
	case "":
		order = rollup.ByBytes
	case rollup.ByBytes, rollup.ByRead, rollup.ByWrite, rollup.ByTransfers, rollup.ByPartial, rollup.ByUsers:
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("order: %q is not bytes, read, write, transfers, partial or users", order))
		return
	}
	n := 10
	if s := v.Get("n"); s != "" {
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > 10000 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("n: %q is not a number from 1 to 10000", s))
			return
		}
	}
	rows, total, err := a.opts.Rollups.Top(r.Context(), by, from, to, order, n)
	if err != nil {
		a.rollupError(w, err)
		return
	}
	ans := TopAnswer{By: by, Span: spanOf(from, to), Order: order, Rows: make([]RowView, len(rows)), Total: total.Summary()}
	for i := range rows {
		ans.Rows[i] = RowView{Keys: rows[i].Keys, Summary: rows[i].Summary()}
	}
	a.writeJSON(w, http.StatusOK, ans)
}

func (a *API) rollupError(w http.ResponseWriter, err error) {
	if errors.Is(err, rollup.ErrNotRolledUp) {
		writeError(w, http.StatusBadRequest, "by: "+err.Error())
		return
	}
	a.queryFailed(w, "Rollup query failed", err)
}
