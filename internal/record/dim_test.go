package record

import (
	"slices"
	"testing"
)

func TestParseDims(t *testing.T) {
	got, err := ParseDims("site,VOs, users,identities")
	if err != nil || !slices.Equal(got, []Dim{DimSite, DimVO, DimUser, DimIdentity}) {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := ParseDims("nope"); err == nil {
		t.Error("unknown dimension accepted")
	}
	if _, err := ParseDims(""); err == nil {
		t.Error("empty list accepted")
	}
}

func TestDim(t *testing.T) {
	r := &Record{ClientName: "wn17.farm.example.edu", ClientHost: "[2001:db8::1]", Path: "/store/data/Run2026A/x/y.root", DN: "/CN=a", User: "cms001"}
	for d, want := range map[Dim]string{
		DimDomain: "farm.example.edu", DimDir: "/store/data/Run2026A", DimIdentity: "/CN=a", DimUser: "cms001",
	} {
		if got := r.Dim(d); got != want {
			t.Errorf("%s: %q, want %q", d, got, want)
		}
	}
	r.ClientName, r.Path = "", "/short/f.root"
	if got := r.Dim(DimDomain); got != "2001:db8::1" {
		t.Errorf("domain of an address: %q", got)
	}
	if got := r.Dim(DimDir); got != "/short" {
		t.Errorf("dir of a short path: %q", got)
	}
}

// TestDimsInto: DimsInto gives each dimension what Dim gives, in any
// order and with the domain and locality asked for together or alone.
func TestDimsInto(t *testing.T) {
	recs := []Record{
		{ClientName: "wn17.farm.example.edu", ServerHost: "xrd1.farm.example.edu", Path: "/store/a/b/c.root", Site: "T2", User: "u"},
		{ClientName: "wn1.other.org", ServerHost: "xrd1.farm.example.edu", VO: "cms"},
		{ClientHost: "[2001:db8::1]", ServerHost: "xrd1.farm.example.edu"},
		{ClientHost: "10.0.0.1", ServerIP: "10.0.0.2"},
		{ClientName: "bare", ServerHost: "xrd.example.org"},
		{},
	}
	orders := [][]Dim{Dims, {DimLocality, DimDomain}, {DimLocality}, {DimDomain, DimUser}, slices.Clone(Dims)}
	slices.Reverse(orders[len(orders)-1])
	for i := range recs {
		r := &recs[i]
		for _, ds := range orders {
			vals := make([]string, len(ds))
			r.DimsInto(vals, ds)
			for j, d := range ds {
				if want := r.Dim(d); vals[j] != want {
					t.Errorf("record %d, %s: %q, want %q", i, d, vals[j], want)
				}
			}
		}
	}
}
