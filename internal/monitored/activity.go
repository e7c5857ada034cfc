package monitored

import (
	"cmp"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/record"
)

// The streams a server is heard on: the correlator's, and the summaries
// (xrd.report), which the writer sees as events.
const (
	streamSummary = int(correlate.NumStreams)
	numStreams    = streamSummary + 1
)

// StreamName returns the name of stream i (0 <= i < NumStreams()).
func StreamName(i int) string {
	if i == streamSummary {
		return "summary"
	}
	return correlate.Stream(i).String()
}

// NumStreams is the number of streams a server is heard on.
func NumStreams() int { return numStreams }

// The silence rules. A server is silent when nothing came from it for
// longer than SilenceFactor times its usual interval between datagrams
// (any stream), and at least MinSilence; while fewer than three intervals
// are known, after NewServerSilence. A server silent for longer than
// RecentSilence is no longer flagged (retired, or long known), and one
// silent for ForgetAfter is forgotten. At most MaxTracked servers are
// tracked.
const (
	SilenceFactor    = 4
	MinSilence       = 2 * time.Minute
	NewServerSilence = 10 * time.Minute
	RecentSilence    = 24 * time.Hour
	ForgetAfter      = 7 * 24 * time.Hour
	MaxTracked       = 10000
	minIntervals     = 3
)

// server is what the Monitor knows of one server address.
type server struct {
	ip, host, site string
	heard          [numStreams]int64 // Unix s, 0: never
	last           int64             // the latest of heard
	usual          float64           // moving average of the intervals between news, s
	intervals      int
	open           int    // files open, summed over the address's incarnations
	lost           uint64 // datagrams lost, summed over the address's incarnations now
	gen            uint64 // the Observe that last reported it (open and lost count then only)
}

func (m *Monitor) server(ip string) *server {
	s := m.servers[ip]
	if s == nil && len(m.servers) < MaxTracked {
		s = &server{ip: ip}
		m.servers[ip] = s
	}
	return s
}

// hear takes the latest times reported for s.
func (s *server) hear(heard *[numStreams]int64) {
	latest := s.last
	for k, t := range heard {
		if t > s.heard[k] {
			s.heard[k] = t
		}
		latest = max(latest, t)
	}
	if latest <= s.last {
		return
	}
	if s.last > 0 {
		gap := float64(latest - s.last)
		if s.intervals == 0 {
			s.usual = gap
		} else {
			s.usual = 0.8*s.usual + 0.2*gap
		}
		s.intervals++
	}
	s.last = latest
}

// activity takes one commit's server activity and summaries. Call with
// m.mu held.
func (m *Monitor) activity(act []correlate.ServerActivity, evs []record.Event) {
	m.gen++
	var heard [numStreams]int64
	for i := range act {
		a := &act[i]
		s := m.server(a.ServerIP)
		if s == nil {
			continue
		}
		if a.Host != "" {
			s.host = a.Host
		}
		if a.Site != "" {
			s.site = a.Site
		}
		if s.gen != m.gen {
			s.gen, s.open, s.lost = m.gen, 0, 0
		}
		s.open += a.OpenFiles
		s.lost += a.Lost
		copy(heard[:], a.Heard[:])
		heard[streamSummary] = 0
		s.hear(&heard)
	}
	for i := range evs {
		e := &evs[i]
		if e.Type != record.EventSummary {
			continue
		}
		s := m.server(e.ServerIP)
		if s == nil {
			continue
		}
		if s.site == "" {
			s.site = e.Site
		}
		if s.host == "" {
			s.host = e.ServerHost
		}
		clear(heard[:])
		heard[streamSummary] = e.Received.Unix()
		s.hear(&heard)
	}
	if m.gen%4096 == 0 {
		m.forget(m.now())
	}
}

// forget drops the servers silent for ForgetAfter.
func (m *Monitor) forget(now time.Time) {
	for ip, s := range m.servers {
		if now.Unix()-s.last > int64(ForgetAfter/time.Second) {
			delete(m.servers, ip)
		}
	}
}

// silenceAfter is how long s may be quiet before it is silent.
func (s *server) silenceAfter() time.Duration {
	if s.intervals < minIntervals {
		return NewServerSilence
	}
	return max(MinSilence, time.Duration(SilenceFactor*s.usual*float64(time.Second)))
}

// silent reports whether s is silent at now, as the rules say.
func (s *server) silent(now time.Time) bool {
	idle := now.Sub(time.Unix(s.last, 0))
	return s.last > 0 && idle > s.silenceAfter() && idle <= RecentSilence
}

// Server is what the Monitor knows of one server address (the API's
// /servers).
type Server struct {
	ServerIP string `json:"server_ip"`
	Host     string `json:"host,omitempty"`
	Site     string `json:"site,omitempty"`
	// Heard is the last time each stream was heard (streams never heard
	// are absent); LastHeard the latest of them.
	Heard     map[string]time.Time `json:"heard"`
	LastHeard time.Time            `json:"last_heard"`
	// UsualIntervalSeconds is the moving average of the intervals between
	// the server's datagrams (0 until one is known); SilentAfterSeconds
	// the quiet time after which it counts as silent.
	UsualIntervalSeconds float64 `json:"usual_interval_seconds"`
	SilentAfterSeconds   float64 `json:"silent_after_seconds"`
	Silent               bool    `json:"silent"`
	OpenFiles            int     `json:"open_files"`
	// LostPackets is the datagrams missing from the sequence counters of
	// the server's current incarnations (while the collector holds its
	// state: a server idle for the session TTL starts again at 0).
	LostPackets uint64 `json:"lost_packets"`
}

// Servers returns every tracked server, silent ones first, then by name.
func (m *Monitor) Servers() []Server {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Server, 0, len(m.servers))
	for _, s := range m.servers {
		v := Server{ServerIP: s.ip, Host: s.host, Site: s.site, Heard: map[string]time.Time{},
			LastHeard: time.Unix(s.last, 0).UTC(), UsualIntervalSeconds: s.usual,
			SilentAfterSeconds: s.silenceAfter().Seconds(), Silent: s.silent(now)}
		if s.gen == m.gen {
			v.OpenFiles, v.LostPackets = s.open, s.lost
		}
		for k, t := range s.heard {
			if t > 0 {
				v.Heard[StreamName(k)] = time.Unix(t, 0).UTC()
			}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b Server) int {
		if a.Silent != b.Silent {
			if a.Silent {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(serverLabel(a.Host, a.ServerIP), serverLabel(b.Host, b.ServerIP)), cmp.Compare(a.ServerIP, b.ServerIP))
	})
	return out
}

// Silent returns the names of the servers silent now, for the keeping-up
// verdict.
func (m *Monitor) Silent() []string {
	var out []string
	for _, s := range m.Servers() {
		if !s.Silent {
			break
		}
		out = append(out, serverLabel(s.Host, s.ServerIP))
	}
	return out
}

// collectActivity sends the per-server gauges. Call with m.mu held.
func (m *Monitor) collectActivity(ch chan<- prometheus.Metric) {
	d := &m.descs
	now := m.now()
	silent := 0
	type ss struct{ server, site string }
	open := map[ss]int{}
	for _, s := range m.servers {
		if s.silent(now) {
			silent++
		}
		name := m.admit(0, serverLabel(s.host, s.ip), MaxServers)
		if s.gen == m.gen {
			open[ss{name, m.admit(1, s.site, MaxSites)}] += s.open
		}
		if name == Other {
			continue // a time summed or mixed over servers says nothing
		}
		for k, t := range s.heard {
			if t > 0 {
				send(ch, d.heard, prometheus.GaugeValue, float64(t), name, StreamName(k))
			}
		}
		if s.intervals > 0 {
			send(ch, d.usual, prometheus.GaugeValue, s.usual, name)
		}
	}
	for k, n := range open {
		send(ch, d.open, prometheus.GaugeValue, float64(n), k.server, k.site)
	}
	send(ch, d.silent, prometheus.GaugeValue, float64(silent))
}
