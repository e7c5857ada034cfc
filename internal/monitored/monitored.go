// Package monitored exports what the servers report, not how xrdmon runs:
// bytes read and written, transfers, partial transfers by reason,
// redirects and cache hits and misses as Prometheus counters by server,
// site and VO, files open now by server, and when each server was last
// heard on each stream (with the servers silent beyond their usual
// interval). Sites that run Prometheus and Grafana get the monitored data
// without a database in between.
//
// Cardinality is bounded: at most MaxServers server, MaxSites site and
// MaxVOs VO label values each; a value seen after its label is full is
// exported as "other" (docs/metrics.md). Packet strings become label
// values only through those caps.
//
// The writer feeds a Monitor once per commit (Observe), off the packet
// path; an Observe of records whose labels were seen before allocates
// nothing.
package monitored

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/atomicfile"
	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/metrics"
	"github.com/xrdmon/xrdmon/internal/record"
)

// The label caps: the distinct values each label takes before further
// ones are exported as Other.
const (
	MaxServers = 500
	MaxSites   = 100
	MaxVOs     = 50
	// MaxSeries bounds the (server, site, VO) combinations; one beyond it
	// is counted under server, site and VO "other".
	MaxSeries = 5000
)

// Other is the label value of everything beyond a cap.
const Other = "other"

// key is one series of the by-server-site-VO families.
type key struct{ server, site, vo string }

// cell holds one series' counts.
type cell struct {
	read, readv, written, transfers uint64
	partial                         [numReasons]uint64
	redirects                       uint64
	cacheHit, cacheMiss             uint64
}

var reasons = record.Reasons

const numReasons = 6

func reasonIndex(r record.Reason) int {
	switch r {
	case record.Timeout:
		return 0
	case record.Disconnect:
		return 1
	case record.ServerRestart:
		return 2
	case record.Evicted:
		return 3
	case record.NoOpen:
		return 4
	default:
		return 5
	}
}

// Monitor keeps the monitored counters and the servers' activity. It is
// safe for concurrent use: the writer calls Observe, a scrape Collect, the
// API Servers and Silent.
type Monitor struct {
	now func() time.Time

	mu      sync.Mutex
	cells   map[key]*cell
	last    key // the key of the last record, and its cell: records of one
	lastC   *cell
	labels  [3]map[string]struct{} // admitted server, site and VO values
	servers map[string]*server     // by address (activity.go)
	gen     uint64                 // commits with activity seen

	file atomicfile.State // where the servers heard are kept (Restore)

	descs descs
}

type descs struct {
	read, readv, written, transfers, partial, redirects, cacheHit, cacheMiss *prometheus.Desc
	open, heard, silent, usual                                               *prometheus.Desc
}

// New returns a Monitor registered on reg (nil: not registered), judging
// silence on now (nil: time.Now).
func New(reg prometheus.Registerer, now func() time.Time) (*Monitor, error) {
	if now == nil {
		now = time.Now
	}
	m := &Monitor{now: now, cells: map[key]*cell{}, servers: map[string]*server{}}
	for i := range m.labels {
		m.labels[i] = map[string]struct{}{}
	}
	ssv := []string{"server", "site", "vo"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	m.descs = descs{
		read:      d("xrdmon_monitored_read_bytes_total", "Bytes read by clients with read() (vector reads are readv_bytes: docs/records.md), from the transfer records, by server, site and VO.", ssv...),
		readv:     d("xrdmon_monitored_readv_bytes_total", "Bytes read by clients with readv() (vector reads), from the transfer records, by server, site and VO.", ssv...),
		written:   d("xrdmon_monitored_written_bytes_total", "Bytes written by clients, from the transfer records, by server, site and VO.", ssv...),
		transfers: d("xrdmon_monitored_transfers_total", "Transfers (file accesses) ended, complete or partial, by server, site and VO.", ssv...),
		partial:   d("xrdmon_monitored_partial_transfers_total", "Transfers ended as partial records, by server, site, VO and reason.", append(ssv, "reason")...),
		redirects: d("xrdmon_monitored_redirects_total", "Redirects sent by redirectors (r-stream), by redirector and site.", "server", "site"),
		cacheHit:  d("xrdmon_monitored_cache_hit_bytes_total", "Bytes served from XCache's disk (file closes of the g-stream), by cache and site.", "server", "site"),
		cacheMiss: d("xrdmon_monitored_cache_miss_bytes_total", "Bytes XCache fetched from the remote (file closes of the g-stream), by cache and site.", "server", "site"),
		open:      d("xrdmon_monitored_files_open", "Files open now, by server and site (the correlator's open files).", "server", "site"),
		heard:     d("xrdmon_monitored_last_heard_timestamp_seconds", "When a server was last heard on a stream (Unix time, the collector's clock).", "server", "stream"),
		usual:     d("xrdmon_monitored_usual_interval_seconds", "A server's usual interval between datagrams (any stream), which its silence is judged by.", "server"),
		silent:    d("xrdmon_monitored_servers_silent", "Servers silent beyond their usual interval (and heard in the last day).", nil...),
	}
	ms := metrics.NewSet(reg)
	metrics.Add(ms, prometheus.Collector(m))
	return m, ms.Err()
}

// admit returns v, or Other when label i is full and v is new to it. A
// value that is not UTF-8 (from a packet) is admitted with its bad bytes
// replaced: Prometheus takes UTF-8 label values only.
func (m *Monitor) admit(i int, v string, max int) string {
	if !utf8.ValidString(v) {
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	if _, ok := m.labels[i][v]; ok {
		return v
	}
	if len(m.labels[i]) >= max {
		return Other
	}
	m.labels[i][v] = struct{}{}
	return v
}

// cellOf returns the cell of (server, site, vo), admitting the values
// through the caps. Call with m.mu held.
func (m *Monitor) cellOf(server, site, vo string) *cell {
	k := key{server, site, vo}
	if m.lastC != nil && m.last == k {
		return m.lastC
	}
	c := m.cells[k]
	if c == nil {
		// A new combination: its values through the caps (a value
		// beyond a cap shares the Other cell).
		a := key{m.admit(0, server, MaxServers), m.admit(1, site, MaxSites), m.admit(2, vo, MaxVOs)}
		if c = m.cells[a]; c == nil && len(m.cells) >= MaxSeries {
			a = key{Other, Other, Other}
			c = m.cells[a]
		}
		if c == nil {
			c = &cell{}
			m.cells[a] = c
		}
		if a == k {
			m.cells[k] = c
		}
	}
	m.last, m.lastC = k, c
	return c
}

// serverLabel is a server's label value: its host name when known (the
// records' reverse DNS or '=' host), else its address.
func serverLabel(host, ip string) string {
	if host != "" {
		return host
	}
	return ip
}

// Observe counts one commit: its record chunks and events (as the store
// holds them: typed, named) and the servers' activity at its barrier.
func (m *Monitor) Observe(recs [][]record.Record, evs []record.Event, act []correlate.ServerActivity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, chunk := range recs {
		for i := range chunk {
			r := &chunk[i]
			c := m.cellOf(serverLabel(r.ServerHost, r.ServerIP), r.Site, r.VO)
			c.read += uint64(max(0, r.ReadBytes))
			c.readv += uint64(max(0, r.ReadvBytes))
			c.written += uint64(max(0, r.WriteBytes))
			c.transfers++
			if r.Reason != record.Complete {
				c.partial[reasonIndex(r.Reason)]++
			}
		}
	}
	for i := range evs {
		m.event(&evs[i])
	}
	m.activity(act, evs)
}

var (
	hitKey  = []byte(`,"b_hit":`)
	missKey = []byte(`,"b_miss":`)
)

func (m *Monitor) event(e *record.Event) {
	switch e.Type {
	case record.EventRedirect:
		m.cellOf(serverLabel(e.ServerHost, e.ServerIP), e.Site, "").redirects++
	case record.EventCacheFileClose:
		c := m.cellOf(serverLabel(e.ServerHost, e.ServerIP), e.Site, "")
		c.cacheHit += member(e.Data, hitKey)
		c.cacheMiss += member(e.Data, missKey)
	}
}

// member returns the non-negative integer after the last k in data, a
// cache_file_close payload as record.ParseEvent writes it (b_hit and
// b_miss come after every string member, and a string's quotes are
// escaped, so k cannot match inside one); 0 when absent.
func member(data, k []byte) uint64 {
	i := bytes.LastIndex(data, k)
	if i < 0 {
		return 0
	}
	rest := data[i+len(k):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	v, err := strconv.ParseUint(string(rest[:n]), 10, 64) // the conversion does not allocate
	if err != nil {
		return 0
	}
	return v
}

// Describe sends the descriptors of every family.
func (m *Monitor) Describe(ch chan<- *prometheus.Desc) {
	d := &m.descs
	for _, x := range []*prometheus.Desc{d.read, d.readv, d.written, d.transfers, d.partial, d.redirects, d.cacheHit, d.cacheMiss, d.open, d.heard, d.usual, d.silent} {
		ch <- x
	}
}

// Collect sends the current values.
func (m *Monitor) Collect(ch chan<- prometheus.Metric) {
	m.collect(ch)
}

// send sends one sample; label values are UTF-8 (admit), so it cannot
// fail, and would drop the sample rather than panic if it did.
func send(ch chan<- prometheus.Metric, desc *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	if mt, err := prometheus.NewConstMetric(desc, t, v, labels...); err == nil {
		ch <- mt
	}
}

func (m *Monitor) collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := &m.descs
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		send(ch, desc, prometheus.CounterValue, float64(v), labels...)
	}
	// Every key of cells is admitted (or Other): one series each.
	type ss struct{ server, site string }
	byServer := map[ss]*cell{}
	for k, c := range m.cells {
		if c.transfers > 0 {
			counter(d.read, c.read, k.server, k.site, k.vo)
			counter(d.readv, c.readv, k.server, k.site, k.vo)
			counter(d.written, c.written, k.server, k.site, k.vo)
			counter(d.transfers, c.transfers, k.server, k.site, k.vo)
			for i, n := range c.partial {
				if n > 0 {
					counter(d.partial, n, k.server, k.site, k.vo, string(reasons[i]))
				}
			}
		}
		if c.redirects > 0 || c.cacheHit > 0 || c.cacheMiss > 0 {
			s := ss{k.server, k.site}
			if byServer[s] == nil {
				byServer[s] = &cell{}
			}
			byServer[s].redirects += c.redirects
			byServer[s].cacheHit += c.cacheHit
			byServer[s].cacheMiss += c.cacheMiss
		}
	}
	for s, c := range byServer {
		if c.redirects > 0 {
			counter(d.redirects, c.redirects, s.server, s.site)
		}
		if c.cacheHit > 0 || c.cacheMiss > 0 {
			counter(d.cacheHit, c.cacheHit, s.server, s.site)
			counter(d.cacheMiss, c.cacheMiss, s.server, s.site)
		}
	}
	m.collectActivity(ch)
}
