package record

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

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
	// DimLocality says whether the client is in the server's domain:
	// "local", "remote", or "unknown" when either has no host name.
	DimLocality Dim = "locality"
)

// Dims lists every dimension, in the order help texts show them.
var Dims = []Dim{DimServer, DimSite, DimVO, DimUser, DimIdentity, DimDomain, DimProtocol, DimApp, DimDir, DimLocality}

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

// Part reports whether Record.Dim(d) can return a part of a longer
// string of the record (a directory of its path, the domain of a host
// name): what keeps such a value longer than the record copies it, not
// to keep the whole string alive. The other values are whole strings of
// the record (or constants), shared with it.
func (d Dim) Part() bool { return d == DimDir || d == DimDomain }

// Dim returns the record's value of dimension d ("" when unknown).
func (r *Record) Dim(d Dim) string {
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
		return domain(r.Client())
	case DimProtocol:
		return r.Protocol
	case DimApp:
		return r.AppName
	case DimDir:
		return dir(r.Path, 3)
	case DimLocality:
		return r.locality()
	}
	return ""
}

// DimsInto sets vals[i] to r.Dim(ds[i]) for each of ds, reading the
// client's host name once for its domain and the locality (the rollups
// ask for both of every record).
func (r *Record) DimsInto(vals []string, ds []Dim) {
	var client string
	var cname, split bool
	for i, d := range ds {
		if d != DimDomain && d != DimLocality {
			vals[i] = r.Dim(d)
			continue
		}
		if !split {
			client, cname = splitDomain(r.Client())
			split = true
		}
		if d == DimDomain {
			vals[i] = client
		} else {
			vals[i] = r.localityOf(client, cname)
		}
	}
}

// Client returns the client's host name, or its address when the name is
// unknown.
func (r *Record) Client() string { return cmp.Or(r.ClientName, r.ClientHost) }

// locality compares the client's domain with the server's.
func (r *Record) locality() string {
	return r.localityOf(splitDomain(r.Client()))
}

// localityOf is locality with the client's domain c given, and whether
// the client's host is a name with a domain (cname).
func (r *Record) localityOf(c string, cname bool) string {
	s, sname := splitDomain(r.ServerHost)
	if !cname || !sname {
		return "unknown"
	}
	if strings.EqualFold(c, s) {
		return "local"
	}
	return "remote"
}

// isAddr reports whether h is an IP address. A text that cannot be one
// (a host name has a letter or a hyphen and no colon) is not parsed: a
// failed parse allocates its error, and rollups ask this of every record.
func isAddr(h string) bool {
	if strings.IndexByte(h, ':') < 0 {
		for i := range len(h) { // a name's first byte is a letter: one step
			if c := h[i]; (c < '0' || c > '9') && c != '.' {
				return false
			}
		}
	}
	_, err := netip.ParseAddr(h)
	return err == nil
}

// trimBrackets is strings.Trim(s, "[]") (an IPv6 address in brackets)
// without building the cut set at each call: the rollups ask for the
// domain and locality of every record.
func trimBrackets(s string) string {
	for len(s) > 0 && (s[0] == '[' || s[0] == ']') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == '[' || s[len(s)-1] == ']') {
		s = s[:len(s)-1]
	}
	return s
}

// domain returns the domain of a host name (all but its first label), or
// the host itself when it is an address.
func domain(host string) string {
	d, _ := splitDomain(host)
	return d
}

// splitDomain returns domain(host) and whether host is a host name with a
// domain (not an address, not a bare name), looking at host once: the
// rollups ask for the domain and locality of every record.
func splitDomain(host string) (string, bool) {
	h := trimBrackets(host)
	if h == "" || isAddr(h) {
		return h, false
	}
	if i := strings.IndexByte(h, '.'); i >= 0 && i+1 < len(h) {
		return h[i+1:], i > 0
	}
	return h, false
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
