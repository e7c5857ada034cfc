// Package confcheck collects the problems of a configuration. Each
// component's Config has a Validate method that reports the problems of
// its own keys, relative to its section ("rcvbuf: must be > 0"); the
// configuration loader (internal/config) prefixes them with the section's
// name and adds the rules that span sections, so that a user sees every
// problem at once, each naming its full key ("listen.rcvbuf: must be > 0").
package confcheck

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Error lists every problem found in a configuration, each starting with
// the key it is about.
type Error struct {
	Problems []string
}

// Error returns the problems, one per line when there are several.
func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return "config: " + e.Problems[0]
	}
	return "config: " + strconv.Itoa(len(e.Problems)) + " problems:\n  " + strings.Join(e.Problems, "\n  ")
}

// Problems accumulates problems, each "key: message".
type Problems []string

// Add adds the problem msg of key.
func (p *Problems) Add(key, msg string) { *p = append(*p, key+": "+msg) }

// Check adds the problem msg of key unless ok.
func (p *Problems) Check(ok bool, key, msg string) {
	if !ok {
		p.Add(key, msg)
	}
}

// Sub adds the problems of err, the result of a part's Validate (an
// *Error, or a plain error about the part as a whole), under key: a
// problem "rcvbuf: must be > 0" of key "listen" becomes "listen.rcvbuf:
// must be > 0". With key "" the part's keys are the caller's own (an
// embedded part).
func (p *Problems) Sub(key string, err error) {
	if err == nil {
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		p.Add(key, err.Error())
		return
	}
	for _, q := range e.Problems {
		if key != "" {
			q = key + "." + q
		}
		*p = append(*p, q)
	}
}

// Err returns the problems as an *Error, or nil when there are none.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	return &Error{Problems: slices.Clone(p)}
}

// HostPort checks that addr is host:port with a port from 0 to 65535.
func (p *Problems) HostPort(key, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.Add(key, fmt.Sprintf("%q is not host:port", addr))
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		p.Add(key, fmt.Sprintf("port %q must be a number from 0 to 65535", port))
	}
}

// URL checks that raw is a URL with a host and one of schemes; an empty
// raw is a problem only when required. Passwords are never shown.
func (p *Problems) URL(key, raw string, required bool, schemes ...string) {
	if raw == "" {
		if required {
			p.Add(key, "required when enabled")
		}
		return
	}
	u, err := url.Parse(raw)
	if err != nil {
		p.Add(key, "invalid URL: "+RedactURL(raw))
		return
	}
	if !slices.Contains(schemes, u.Scheme) {
		p.Add(key, fmt.Sprintf("scheme must be %s, not %q", strings.Join(schemes, " or "), u.Scheme))
	}
	if u.Host == "" {
		p.Add(key, "missing host")
	}
}

// dsnPassword finds the password of a key=value connection string.
var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// RedactURL hides the password in a URL (scheme://user:pass@host) or in a
// key=value connection string (password=...).
func RedactURL(s string) string {
	if s == "" {
		return s
	}
	if strings.Contains(s, "://") {
		if u, err := url.Parse(s); err == nil {
			if q := u.Query(); q.Has("password") {
				q.Set("password", "xxxxx")
				u.RawQuery = q.Encode()
			}
			return u.Redacted()
		}
		// Unparseable: hide everything between "://" and "@".
		scheme, rest, _ := strings.Cut(s, "://")
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			return scheme + "://xxxxx@" + rest[at+1:]
		}
		return s
	}
	return dsnPassword.ReplaceAllString(s, "${1}xxxxx")
}
