package main

import (
	"time"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/record"
)

// status is the answer of /api/v1/status (documented in
// internal/api/openapi.yaml).
type status struct {
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Packets       struct {
		Handled    uint64 `json:"handled"`
		Accounted  uint64 `json:"accounted"`
		Rejected   uint64 `json:"rejected"`
		Lost       uint64 `json:"lost"`
		Duplicates uint64 `json:"duplicates"`
		Reordered  uint64 `json:"reordered"`
		Stale      uint64 `json:"stale"`
		Missing    int    `json:"missing"`
	} `json:"packets"`
	Records struct {
		Complete   uint64 `json:"complete"`
		Partial    uint64 `json:"partial"`
		ClockAhead uint64 `json:"clock_ahead"`
	} `json:"records"`
	Events uint64 `json:"events"`
	State  struct {
		Servers   int   `json:"servers"`
		Sessions  int   `json:"sessions"`
		OpenFiles int   `json:"open_files"`
		Bytes     int64 `json:"bytes"`
	} `json:"state"`
	Store struct {
		LastSeq int64                 `json:"last_seq"`
		Sinks   map[string]sinkStatus `json:"sinks"`
	} `json:"store"`
}

type sinkStatus struct {
	Cursor  int64 `json:"cursor"`
	Backlog int64 `json:"backlog"`
}

func newStatus(started time.Time, st correlate.Stats, lastSeq int64, cursors map[string]int64) *status {
	s := &status{Started: started.UTC(), UptimeSeconds: time.Since(started).Seconds()}
	s.Packets.Handled, s.Packets.Accounted = st.Packets, st.Accounted
	s.Packets.Rejected, s.Packets.Lost = st.TotalRejected(), st.TotalLost()
	s.Packets.Duplicates, s.Packets.Reordered, s.Packets.Stale = st.Duplicates, st.Reordered, st.Stale
	s.Records.ClockAhead = st.ClockAhead
	s.Packets.Missing = st.Missing
	s.Records.Complete = st.RecordsFor(record.Complete)
	s.Records.Partial = st.TotalRecords() - s.Records.Complete
	s.Events = st.Events
	s.State.Servers, s.State.Sessions, s.State.OpenFiles = st.Servers, st.Sessions, st.OpenFiles
	s.State.Bytes = st.FileBytes + st.SessionBytes + st.PendingBytes + st.InternBytes
	s.Store.LastSeq = lastSeq
	s.Store.Sinks = make(map[string]sinkStatus, len(cursors))
	for name, c := range cursors {
		s.Store.Sinks[name] = sinkStatus{Cursor: c, Backlog: max(lastSeq-c, 0)}
	}
	return s
}
