package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// ActivityAnswer is the answer of /activity: per server, the cache, copy
// and redirect events of a range, summed on the server over every event
// of the range (not a page of them), and the redirection of the transfers
// that ended in it.
type ActivityAnswer struct {
	Span
	Caches      []CacheRow     `json:"caches"`
	Copies      []CopyRow      `json:"copies"`
	Redirectors []RedirectRow  `json:"redirectors"`
	Redirected  RedirectedRecs `json:"redirected"`
	// Events is the number of events summed; Complete is false when the
	// range held more than the bound (maxActivityEvents): the sums are then
	// those of the newest Events events.
	Events   int  `json:"events"`
	Complete bool `json:"complete"`
}

// CacheRow sums one cache's file closes (g-stream provider C).
type CacheRow struct {
	Server      string `json:"server"`
	Files       int64  `json:"files"`
	HitBytes    int64  `json:"hit_bytes"`
	MissBytes   int64  `json:"miss_bytes"`
	BypassBytes int64  `json:"bypass_bytes"`
}

// CopyRow sums one server's third-party copies (g-stream provider P).
type CopyRow struct {
	Server string `json:"server"`
	Copies int64  `json:"copies"`
	Failed int64  `json:"failed"`
	Bytes  int64  `json:"bytes"`
	// Seconds is the summed duration of the copies with a size and a
	// duration: their bytes over it is the mean rate.
	Seconds    float64 `json:"seconds"`
	TimedBytes int64   `json:"timed_bytes"`
}

// RedirectRow sums one redirector's redirects (r-stream).
type RedirectRow struct {
	Server    string `json:"server"`
	Redirects int64  `json:"redirects"`
	// Targets is the number of distinct targets (counted up to
	// maxTargets).
	Targets int `json:"targets"`
}

// RedirectedRecs sums the transfers of the range that a redirect led to.
type RedirectedRecs struct {
	Transfers      int64 `json:"transfers"`
	Hops           int64 `json:"hops"`
	DelayMS        int64 `json:"delay_ms"`         // summed lower bounds
	DelayMaxMS     int64 `json:"delay_max_ms"`     // summed upper bounds
	RecordsScanned int   `json:"records_scanned"`  // the records of the range read
	Complete       bool  `json:"records_complete"` // false: the newest RecordsScanned only
}

// Bounds of one /activity answer: the events and records it reads (newest
// first), and the distinct targets it counts per redirector.
const (
	maxActivityEvents  = 2_000_000
	maxActivityRecords = 1_000_000
	maxTargets         = 10_000
)

var activityTypes = []record.EventType{record.EventCacheFileClose, record.EventTPC, record.EventRedirect}

func (a *API) activity(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	now := a.opts.Now()
	from, err := ParseTime(v.Get("from"), now)
	if err != nil {
		writeError(w, http.StatusBadRequest, "from: "+err.Error())
		return
	}
	to, err := ParseTime(v.Get("to"), now)
	if err != nil {
		writeError(w, http.StatusBadRequest, "to: "+err.Error())
		return
	}
	if to.IsZero() {
		to = now
	}
	ans, err := a.sumActivity(r, from, to)
	if err != nil {
		a.queryFailed(w, "Activity query failed", err)
		return
	}
	a.writeJSON(w, http.StatusOK, ans)
}

func (a *API) sumActivity(r *http.Request, from, to time.Time) (ActivityAnswer, error) {
	ans := ActivityAnswer{Span: spanOf(from, to), Complete: true}
	caches, copies, redirs := map[string]*CacheRow{}, map[string]*CopyRow{}, map[string]*RedirectRow{}
	targets := map[string]map[string]struct{}{}
	q := store.EventQuery{From: from, To: to, Types: activityTypes, Limit: 100000, Newest: true}
	for {
		evs, next, err := a.recs.QueryEvents(r.Context(), q)
		if err != nil {
			return ans, fmt.Errorf("events: %w", err)
		}
		for i := range evs {
			e := &evs[i]
			server := e.ServerHost
			if server == "" {
				server = e.ServerIP
			}
			switch e.Type {
			case record.EventCacheFileClose:
				var d record.CacheFileClose
				if json.Unmarshal(e.Data, &d) == nil {
					rowOf(caches, server, func() *CacheRow { return &CacheRow{Server: server} }).add(&d)
				}
			case record.EventTPC:
				var d record.TPCTransfer
				if json.Unmarshal(e.Data, &d) == nil {
					rowOf(copies, server, func() *CopyRow { return &CopyRow{Server: server} }).add(&d)
				}
			case record.EventRedirect:
				var d struct {
					TargetHost string `json:"target_host"`
				}
				_ = json.Unmarshal(e.Data, &d)
				rowOf(redirs, server, func() *RedirectRow { return &RedirectRow{Server: server} }).Redirects++
				if t := rowOf(targets, server, func() map[string]struct{} { return map[string]struct{}{} }); len(t) < maxTargets {
					t[d.TargetHost] = struct{}{}
				}
			}
		}
		ans.Events += len(evs)
		if next == nil {
			break
		}
		if ans.Events >= maxActivityEvents {
			ans.Complete = false
			break
		}
		q.After = next
	}
	for s, t := range targets {
		redirs[s].Targets = len(t)
	}
	ans.Caches = sorted(caches, func(c *CacheRow) string { return c.Server })
	ans.Copies = sorted(copies, func(c *CopyRow) string { return c.Server })
	ans.Redirectors = sorted(redirs, func(c *RedirectRow) string { return c.Server })
	return ans, a.sumRedirected(r, from, to, &ans.Redirected)
}

// sumRedirected sums the redirection of the records that ended in the
// range (newest first, at most maxActivityRecords).
func (a *API) sumRedirected(r *http.Request, from, to time.Time, out *RedirectedRecs) error {
	q := store.Query{From: from, To: to, Limit: a.opts.MaxLimit, Newest: true}
	out.Complete = true
	for {
		recs, next, err := a.recs.QueryPage(r.Context(), q)
		if err != nil {
			return fmt.Errorf("records: %w", err)
		}
		for i := range recs {
			if h := recs[i].RedirectHops; h > 0 {
				out.Transfers++
				out.Hops += int64(h)
				out.DelayMS += recs[i].RedirectDelayMS
				out.DelayMaxMS += recs[i].RedirectDelayMaxMS
			}
		}
		out.RecordsScanned += len(recs)
		if next == nil {
			return nil
		}
		if out.RecordsScanned >= maxActivityRecords {
			out.Complete = false
			return nil
		}
		q.After = next
	}
}

// rowOf returns the row of server in rows, adding the one mk makes when
// there is none.
func rowOf[V any](rows map[string]V, server string, mk func() V) V {
	v, ok := rows[server]
	if !ok {
		v = mk()
		rows[server] = v
	}
	return v
}

// add counts the cache file close d.
func (c *CacheRow) add(d *record.CacheFileClose) {
	c.Files++
	c.HitBytes += d.BHit
	c.MissBytes += d.BMiss
	c.BypassBytes += d.BBypass
}

// add counts the third-party copy d.
func (c *CopyRow) add(d *record.TPCTransfer) {
	c.Copies++
	c.Bytes += int64(d.Size)
	if d.RC != 0 {
		c.Failed++
	}
	if dt := d.End.Sub(d.Begin).Seconds(); dt > 0 && d.Size > 0 {
		c.Seconds += dt
		c.TimedBytes += int64(d.Size)
	}
}

// sorted returns m's rows ordered by key.
func sorted[T any](m map[string]*T, key func(*T) string) []T {
	out := make([]T, 0, len(m))
	for _, v := range m {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b T) int { return cmp.Compare(key(&a), key(&b)) })
	return out
}
