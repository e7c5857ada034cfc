// Package report answers an operator's questions about the records a
// collector kept: the records themselves (xrdmon records) and sums by
// dimension (xrdmon report), as aligned tables for people, CSV and JSON
// for programs. Records come from the local store (safely while a
// collector writes it) or from a running collector's API.
//
// Sums are computed from the records of the window; rollups kept by the
// collector are the faster source for long windows once they exist.
package report

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// Source yields the records of a query, oldest first, to fn, page by page.
type Source interface {
	Records(ctx context.Context, q store.Query, fn func(*record.Record) error) error
}

// Row is one group of a report: its dimension values and sums.
type Row struct {
	Keys       []string `json:"keys"`
	Transfers  int64    `json:"transfers"`
	Partial    int64    `json:"partial"`
	ReadBytes  int64    `json:"read_bytes"`  // read() only, as everywhere (docs/records.md §1)
	ReadvBytes int64    `json:"readv_bytes"` // readv()
	WriteBytes int64    `json:"write_bytes"`
	Users      int      `json:"users"`   // distinct identities (DimIdentity)
	Seconds    float64  `json:"seconds"` // transfer time, summed
	users      map[string]struct{}
}

// Bytes returns the bytes moved: read (read and readv) and written.
func (r *Row) Bytes() int64 { return r.ReadBytes + r.ReadvBytes + r.WriteBytes }

// Summary is the answer of Summarize.
type Summary struct {
	From, To time.Time
	By       []record.Dim
	Rows     []Row // by bytes moved, most first
	Total    Row
}

// Summarize groups the records of q by the dimensions by and sums them;
// top > 0 keeps only the top rows by bytes moved.
func Summarize(ctx context.Context, src Source, q store.Query, by []record.Dim, top int) (*Summary, error) {
	groups := make(map[string]*Row)
	total := Row{users: make(map[string]struct{})}
	var key strings.Builder
	err := src.Records(ctx, q, func(r *record.Record) error {
		key.Reset()
		for i, d := range by {
			if i > 0 {
				key.WriteByte(0)
			}
			key.WriteString(r.Dim(d))
		}
		g := groups[key.String()]
		if g == nil {
			g = &Row{Keys: make([]string, len(by)), users: make(map[string]struct{})}
			for i, d := range by {
				g.Keys[i] = r.Dim(d)
			}
			groups[key.String()] = g
		}
		for _, row := range [...]*Row{g, &total} {
			row.add(r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s := &Summary{From: q.From, To: q.To, By: by, Total: total}
	for _, g := range groups {
		g.Users, g.users = len(g.users), nil
		s.Rows = append(s.Rows, *g)
	}
	s.Total.Users, s.Total.users = len(total.users), nil
	slices.SortFunc(s.Rows, func(a, b Row) int {
		if c := cmp.Compare(b.Bytes(), a.Bytes()); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Transfers, a.Transfers); c != 0 {
			return c
		}
		return slices.Compare(a.Keys, b.Keys)
	})
	if top > 0 && len(s.Rows) > top {
		s.Rows = s.Rows[:top]
	}
	return s, nil
}

func (row *Row) add(r *record.Record) {
	row.Transfers++
	if r.Partial() {
		row.Partial++
	}
	row.ReadBytes += r.ReadBytes
	row.ReadvBytes += r.ReadvBytes
	row.WriteBytes += r.WriteBytes
	if !r.Start.IsZero() && r.End.After(r.Start) {
		row.Seconds += r.End.Sub(r.Start).Seconds()
	}
	row.users[r.Dim(record.DimIdentity)] = struct{}{}
}
