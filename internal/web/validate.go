package web

import "github.com/xrdmon/xrdmon/internal/confcheck"

// Validate checks c, the http section.
func (c Config) Validate() error {
	var p confcheck.Problems
	if c.PProf && !Loopback(c.Address) {
		p.Add("pprof", "needs a loopback http.address (127.0.0.1:PORT or [::1]:PORT): profiles show the process's memory; reach them through an SSH tunnel")
	}
	if c.Address != "" {
		p.HostPort("address", c.Address)
	}
	return p.Err()
}
