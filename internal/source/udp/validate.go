package udp

import (
	"fmt"
	"net/netip"

	"github.com/xrdmon/xrdmon/internal/confcheck"
	"github.com/xrdmon/xrdmon/internal/source"
)

// Validate checks c, the listen section.
func (c Config) Validate() error {
	var p confcheck.Problems
	if c.UDP != "" {
		p.HostPort("udp", c.UDP)
	}
	if c.Summary != "" {
		p.HostPort("summary", c.Summary)
	}
	p.Check(c.Readers >= 0, "readers", "must be >= 0 (0 means GOMAXPROCS, at most 4)")
	p.Check(c.BatchSize >= 1 && c.BatchSize <= 1024, "batch_size", "must be between 1 and 1024")
	p.Check(c.RcvBuf > 0, "rcvbuf", "must be > 0")
	for i, a := range c.Allow {
		if _, err := source.ParseAllow(a); err != nil {
			p.Add(fmt.Sprintf("allow[%d]", i), err.Error())
		}
	}
	for from, to := range c.NAT {
		if from != "all" {
			if _, err := netip.ParseAddr(from); err != nil {
				p.Add("nat", fmt.Sprintf("key %q is not an IP address or \"all\"", from))
			}
		}
		if _, err := netip.ParseAddr(to); err != nil {
			p.Add("nat", fmt.Sprintf("value %q for %q is not an IP address", to, from))
		}
	}
	return p.Err()
}
