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
