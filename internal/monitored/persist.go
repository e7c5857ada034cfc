package monitored

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/xrdmon/xrdmon/internal/atomicfile"
)

// savedServer is a server as the file keeps it.
type savedServer struct {
	IP        string           `json:"ip"`
	Host      string           `json:"host,omitempty"`
	Site      string           `json:"site,omitempty"`
	Heard     map[string]int64 `json:"heard"`
	Usual     float64          `json:"usual"`
	Intervals int              `json:"intervals"`
}

// maxServersFile bounds the file Restore reads.
const maxServersFile = 64 << 20

// Restore makes m keep the servers it has heard (their last-heard times
// and usual intervals) in the file path across restarts: it reads what a
// previous process saved there, and Run saves there. A server silent when
// the collector stopped is then still flagged after a restart. A missing
// file is a first start.
func (m *Monitor) Restore(path string, log *slog.Logger) error {
	m.file = atomicfile.State{Path: path, Log: log, Lost: "Servers heard not saved; after a restart they are listed again once heard"}
	var saved []savedServer
	found, err := atomicfile.ReadJSON(path, maxServersFile, &saved)
	if err != nil {
		return fmt.Errorf("restore servers heard: %w", err)
	}
	if !found {
		return nil
	}
	names := map[string]int{}
	for i := range numStreams {
		names[StreamName(i)] = i
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range saved {
		s := m.server(v.IP)
		if s == nil {
			break
		}
		s.host, s.site, s.usual, s.intervals = v.Host, v.Site, v.Usual, v.Intervals
		for name, t := range v.Heard {
			if k, ok := names[name]; ok {
				s.heard[k] = t
				s.last = max(s.last, t)
			}
		}
	}
	return nil
}

// Run saves the servers heard to the Restore file every minute and when
// ctx ends; without a file it only waits.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.file.SaveOrLog(m.saved)
			return nil
		case <-t.C:
			m.file.SaveOrLog(m.saved)
		}
	}
}

// saved is what the file keeps: the servers heard.
func (m *Monitor) saved() any {
	m.mu.Lock()
	saved := make([]savedServer, 0, len(m.servers))
	for _, s := range m.servers {
		v := savedServer{IP: s.ip, Host: s.host, Site: s.site, Heard: map[string]int64{}, Usual: s.usual, Intervals: s.intervals}
		for k, t := range s.heard {
			if t > 0 {
				v.Heard[StreamName(k)] = t
			}
		}
		saved = append(saved, v)
	}
	m.mu.Unlock()
	return saved
}
