package report

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/rollup"
)

// ErrNoRollups is returned by a RollupSource that cannot answer a
// question: no rollups kept, or not by those dimensions. The caller sums
// records instead.
var ErrNoRollups = errors.New("not answerable from the rollups")

// RollupSource answers Summarize's question from a collector's rollups:
// sums kept by the minute, hour and day, so a month of a federation is as
// fast as an hour of a site. The window is rounded out to whole buckets
// (minutes; hours or days beyond the minutes' retention), bytes of long
// transfers count in the minutes they flowed, and distinct users are
// exact up to 256, then estimated (about 1.6 %).
type RollupSource interface {
	Rollups(ctx context.Context, by []record.Dim, from, to time.Time, top int) (*Summary, error)
}

// Rollups implements RollupSource with the store's rollups
// (rollup.NewReader).
func (s StoreSource) Rollups(ctx context.Context, by []record.Dim, from, to time.Time, top int) (*Summary, error) {
	b, err := rollup.NewReader(ctx, s.R)
	if errors.Is(err, rollup.ErrNoRollups) {
		return nil, fmt.Errorf("%w: %v", ErrNoRollups, err)
	}
	if err != nil {
		return nil, err
	}
	rows, total, err := b.Top(ctx, by, from, to, rollup.ByBytes, top)
	if errors.Is(err, rollup.ErrNotRolledUp) {
		return nil, fmt.Errorf("%w: %v", ErrNoRollups, err)
	}
	if err != nil {
		return nil, err
	}
	sum := &Summary{From: from, To: to, By: by, Total: rowOf(nil, total.Summary()), Rows: make([]Row, len(rows))}
	for i := range rows {
		sum.Rows[i] = rowOf(rows[i].Keys, rows[i].Summary())
	}
	return sum, nil
}

// rowOf is a report row from rollup sums.
func rowOf(keys []string, s rollup.Summary) Row {
	return Row{
		Keys: keys, Transfers: s.Transfers + s.Partial, Partial: s.Partial,
		ReadBytes: s.ReadBytes, ReadvBytes: s.ReadvBytes, WriteBytes: s.WriteBytes,
		Users: int(s.Users), Seconds: float64(s.DurationMSSum) / 1000,
	}
}

// maxTopRows is the most rows the API's /top gives.
const maxTopRows = 10000

// Rollups implements RollupSource with the collector's /api/v1/top.
func (s APISource) Rollups(ctx context.Context, by []record.Dim, from, to time.Time, top int) (*Summary, error) {
	v := url.Values{}
	v.Set("by", string(rollup.SpecOf(by)))
	v.Set("from", from.UTC().Format(time.RFC3339Nano))
	v.Set("to", to.UTC().Format(time.RFC3339Nano))
	if top <= 0 || top > maxTopRows {
		top = maxTopRows
	}
	v.Set("n", fmt.Sprint(top))
	var ans struct {
		Rows []struct {
			Keys []string `json:"keys"`
			rollup.Summary
		} `json:"rows"`
		Total rollup.Summary `json:"total"`
	}
	status, err := s.getJSON(ctx, strings.TrimRight(s.URL, "/")+"/api/v1/top?"+v.Encode(), &ans)
	if status == http.StatusNotFound || status == http.StatusBadRequest {
		// Rollups off, or not by these dimensions.
		return nil, fmt.Errorf("%w: %v", ErrNoRollups, err)
	}
	if err != nil {
		return nil, err
	}
	sum := &Summary{From: from, To: to, By: by, Total: rowOf(nil, ans.Total), Rows: make([]Row, len(ans.Rows))}
	for i, r := range ans.Rows {
		sum.Rows[i] = rowOf(r.Keys, r.Summary)
	}
	return sum, nil
}
