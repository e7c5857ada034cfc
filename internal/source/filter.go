package source

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/xrdmon/xrdmon/internal/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// FilterConfig is the sender handling shared by all sources.
type FilterConfig struct {
	// Allow lists the CIDR prefixes (or bare addresses) packets may come
	// from. Empty accepts every sender. It is checked against the address as
	// received (before Map): the network-level sender for UDP, the shoveler's
	// "remote" for AMQP and files.
	Allow []string `yaml:"allow"`
	// Map rewrites sender addresses, like the shoveler's "map" setting: from
	// an IP (or a non-IP shoveler "remote" host name) to the IP to use. The
	// port is kept. Useful when the servers sit behind a NAT.
	Map map[string]string `yaml:"map"`
	// MapAll, when set, replaces every sender IP (the shoveler's "map.all").
	MapAll string `yaml:"map_all"`
}

// ParseAllow parses an entry of FilterConfig.Allow: a CIDR prefix or a
// single address (IPv4-mapped IPv6 ones as IPv4), masked.
func ParseAllow(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix", s)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR prefix", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Filter applies a FilterConfig to senders. It is safe for concurrent use
// (it is read-only after NewFilter) and does not allocate.
type Filter struct {
	allow      []netip.Prefix
	addrMap    map[netip.Addr]netip.Addr
	hostMap    map[string]netip.Addr
	mapAll     netip.Addr
	denied     prometheus.Counter
	unresolved prometheus.Counter
}

// NewFilter builds the filter of the source named source (the value of the
// "source" label of xrdmon_packets_denied_total) and registers its metrics on
// reg (nil: none).
func NewFilter(cfg FilterConfig, source string, reg prometheus.Registerer) (*Filter, error) {
	f := &Filter{addrMap: make(map[netip.Addr]netip.Addr), hostMap: make(map[string]netip.Addr)}
	var errs []error
	for _, s := range cfg.Allow {
		p, err := ParseAllow(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("allow: %w", err))
			continue
		}
		f.allow = append(f.allow, p)
		// An IPv6 prefix wider than the IPv4-mapped range (::/0, ::/80)
		// covers every IPv4 sender, which arrives unmapped: add 0.0.0.0/0.
		if p.Addr().Is6() && p.Bits() < 96 && p.Masked().Contains(netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff})) {
			f.allow = append(f.allow, netip.PrefixFrom(netip.IPv4Unspecified(), 0))
		}
	}
	for from, to := range cfg.Map {
		toAddr, err := netip.ParseAddr(strings.TrimSpace(to))
		if err != nil {
			errs = append(errs, fmt.Errorf("map %q: target: %w", from, err))
			continue
		}
		if fromAddr, err := netip.ParseAddr(strings.TrimSpace(from)); err == nil {
			f.addrMap[fromAddr.Unmap()] = toAddr.Unmap()
		} else {
			f.hostMap[strings.ToLower(strings.TrimSpace(from))] = toAddr.Unmap()
		}
	}
	if cfg.MapAll != "" {
		a, err := netip.ParseAddr(strings.TrimSpace(cfg.MapAll))
		if err != nil {
			errs = append(errs, fmt.Errorf("map_all: %w", err))
		}
		f.mapAll = a.Unmap()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("source filter: %w", err)
	}

	ms := metrics.NewSet(reg)
	denied := metrics.CounterVec(ms, "xrdmon_packets_denied_total", "Packets dropped because their sender is not in the source's allow-list.", "source")
	unresolved := metrics.CounterVec(ms, "xrdmon_packets_unresolved_total", "Relayed packets dropped because their remote is a host name with no entry in the address map.", "source")
	if err := ms.Err(); err != nil {
		return nil, fmt.Errorf("source filter: %w", err)
	}
	f.denied = denied.WithLabelValues(source)
	f.unresolved = unresolved.WithLabelValues(source)
	return f, nil
}

// Accept reports whether a packet from sender may pass and returns the
// sender to record: unmapped to IPv4 and rewritten by the address map.
// A rejected packet is counted.
func (f *Filter) Accept(sender netip.AddrPort) (netip.AddrPort, bool) {
	addr := sender.Addr().Unmap()
	if len(f.allow) > 0 && !f.allowed(addr) {
		f.denied.Inc()
		return netip.AddrPort{}, false
	}
	if f.mapAll.IsValid() {
		addr = f.mapAll
	} else if len(f.addrMap) > 0 {
		if to, ok := f.addrMap[addr]; ok {
			addr = to
		}
	}
	return netip.AddrPortFrom(addr, sender.Port()), true
}

// AcceptHost is Accept for a relayed packet whose remote is a host name
// rather than an IP: it passes only when the address map names the host
// (case-insensitive) or MapAll is set. The allow-list is then checked against
// the mapped address. Dropped packets are counted.
func (f *Filter) AcceptHost(host []byte, port uint16) (netip.AddrPort, bool) {
	addr := f.mapAll
	if !addr.IsValid() {
		a, ok := f.hostMap[string(host)]
		if !ok && hasUpper(host) {
			a, ok = f.hostMap[strings.ToLower(string(host))]
		}
		if !ok {
			f.unresolved.Inc()
			return netip.AddrPort{}, false
		}
		addr = a
	}
	if len(f.allow) > 0 && !f.allowed(addr) {
		f.denied.Inc()
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(addr, port), true
}

func (f *Filter) allowed(addr netip.Addr) bool {
	for _, p := range f.allow {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func hasUpper(b []byte) bool {
	for _, c := range b {
		if 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}
