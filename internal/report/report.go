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
	"fmt"
	"net/netip"
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

// Dim is a dimension records are grouped by.
type Dim string

// The dimensions of a report.
const (
	DimServer   Dim = "server"
	DimSite     Dim = "site"
	DimVO       Dim = "vo"
	DimUser     Dim = "user"     // the client's user name (the login's)
	DimIdentity Dim = "identity" // who, for accounting: the token subject, else the certificate DN, else the user name
	DimDomain   Dim = "domain"   // the client's domain (from its reverse-DNS name, else its host)
	DimProtocol Dim = "protocol"
	DimApp      Dim = "app"
	DimDir      Dim = "dir" // the path's first three levels
)

// Dims lists every dimension, in the order help texts show them.
var Dims = []Dim{DimServer, DimSite, DimVO, DimUser, DimIdentity, DimDomain, DimProtocol, DimApp, DimDir}

// ParseDims reads a comma-separated list of dimensions ("site,vo"); the
// plural forms ("users") are accepted too.
func ParseDims(s string) ([]Dim, error) {
	var out []Dim
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		d := Dim(strings.ToLower(f))
		switch d {
		case "identities":
			d = DimIdentity
		case "vos":
			d = DimVO
		default:
			if !slices.Contains(Dims, d) {
				d = Dim(strings.TrimSuffix(string(d), "s"))
			}
		}
		if !slices.Contains(Dims, d) {
			return nil, fmt.Errorf("unknown dimension %q (want %s)", f, dimList())
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no dimension (want %s)", dimList())
	}
	return out, nil
}

func dimList() string {
	s := make([]string, len(Dims))
	for i, d := range Dims {
		s[i] = string(d)
	}
	return strings.Join(s, ", ")
}

// Value returns the record's value of dimension d ("" when unknown).
func Value(r *record.Record, d Dim) string {
	switch d {
	case DimServer:
		return cmp.Or(r.ServerHost, r.ServerIP)
	case DimSite:
		return r.Site
	case DimVO:
		return r.VO
	case DimUser:
		return r.User
	case DimIdentity:
		return cmp.Or(r.TokenSubject, r.DN, r.User)
	case DimDomain:
		return domain(cmp.Or(r.ClientName, r.ClientHost))
	case DimProtocol:
		return r.Protocol
	case DimApp:
		return r.AppName
	case DimDir:
		return dir(r.Path, 3)
	}
	return ""
}

// domain returns the domain of a host name (all but its first label), or
// the host itself when it is an address.
func domain(host string) string {
	h := strings.Trim(host, "[]")
	if _, err := netip.ParseAddr(h); err == nil {
		return h
	}
	if i := strings.IndexByte(h, '.'); i >= 0 && i+1 < len(h) {
		return h[i+1:]
	}
	return h
}

// dir returns the first n levels of path p ("/store/data/Run2026A").
func dir(p string, n int) string {
	if !strings.HasPrefix(p, "/") {
		return p
	}
	i, k := 1, 0
	for ; i < len(p); i++ {
		if p[i] == '/' {
			if k++; k == n {
				break
			}
		}
	}
	if i >= len(p) { // fewer levels: drop the file name
		if j := strings.LastIndexByte(p, '/'); j > 0 {
			return p[:j]
		}
		return "/"
	}
	return p[:i]
}

// Row is one group of a report: its dimension values and sums.
type Row struct {
	Keys       []string `json:"keys"`
	Transfers  int64    `json:"transfers"`
	Partial    int64    `json:"partial"`
	ReadBytes  int64    `json:"read_bytes"` // read and readv
	WriteBytes int64    `json:"write_bytes"`
	Users      int      `json:"users"`   // distinct identities (DimIdentity)
	Seconds    float64  `json:"seconds"` // transfer time, summed
	users      map[string]struct{}
}

// Bytes returns the bytes moved, read and written.
func (r *Row) Bytes() int64 { return r.ReadBytes + r.WriteBytes }

// Summary is the answer of Summarize.
type Summary struct {
	From, To time.Time
	By       []Dim
	Rows     []Row // by bytes moved, most first
	Total    Row
}

// Summarize groups the records of q by the dimensions by and sums them;
// top > 0 keeps only the top rows by bytes moved.
func Summarize(ctx context.Context, src Source, q store.Query, by []Dim, top int) (*Summary, error) {
	groups := make(map[string]*Row)
	total := Row{users: make(map[string]struct{})}
	var key strings.Builder
	err := src.Records(ctx, q, func(r *record.Record) error {
		key.Reset()
		for i, d := range by {
			if i > 0 {
				key.WriteByte(0)
			}
			key.WriteString(Value(r, d))
		}
		g := groups[key.String()]
		if g == nil {
			g = &Row{Keys: make([]string, len(by)), users: make(map[string]struct{})}
			for i, d := range by {
				g.Keys[i] = Value(r, d)
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
	row.ReadBytes += r.ReadBytes + r.ReadvBytes
	row.WriteBytes += r.WriteBytes
	if !r.Start.IsZero() && r.End.After(r.Start) {
		row.Seconds += r.End.Sub(r.Start).Seconds()
	}
	row.users[Value(r, DimIdentity)] = struct{}{}
}
