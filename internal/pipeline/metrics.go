package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"
	xmetrics "github.com/xrdmon/xrdmon/internal/metrics"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/packet"
)

// metrics are the pipeline's own instruments plus a collector that exports
// the correlator shards' counters as of their last barrier.
type metrics struct {
	commitSeconds    prometheus.Histogram
	commitErrors     prometheus.Counter
	commitFailures   prometheus.Counter
	ackErrors        prometheus.Counter
	recordsCommitted prometheus.Counter
	eventsCommitted  prometheus.Counter
}

func newMetrics(p *Pipeline, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		commitSeconds:    xmetrics.NewHistogram("xrdmon_pipeline_commit_duration_seconds", "Time to name (DNS), store and acknowledge one commit of records.", prometheus.ExponentialBuckets(0.0005, 2, 16)),
		commitErrors:     xmetrics.NewCounter("xrdmon_pipeline_commit_errors_total", "Commits to the store that failed and were retried."),
		commitFailures:   xmetrics.NewCounter("xrdmon_pipeline_commit_failures_total", "Commits given up: the store refused them for good, or shutdown came while they were retried. Their input was not acknowledged."),
		ackErrors:        xmetrics.NewCounter("xrdmon_pipeline_ack_errors_total", "Input acknowledgements that failed (the input will be redelivered)."),
		recordsCommitted: xmetrics.NewCounter("xrdmon_pipeline_records_committed_total", "Transfer records committed to the store (before deduplication)."),
		eventsCommitted:  xmetrics.NewCounter("xrdmon_pipeline_events_committed_total", "g-stream events committed to the store (before deduplication)."),
	}
	ms := xmetrics.NewSet(reg)
	for _, c := range []prometheus.Collector{m.commitSeconds, m.commitErrors, m.commitFailures, m.ackErrors,
		m.recordsCommitted, m.eventsCommitted, &statsCollector{p: p}} {
		xmetrics.Add(ms, c)
	}
	return m, ms.Err()
}

var (
	descPackets = prometheus.NewDesc("xrdmon_packets_total",
		"Datagrams handled by the correlator, by outcome (accounted or rejected).", []string{"outcome"}, nil)
	descRejected = prometheus.NewDesc("xrdmon_packets_rejected_total",
		"Datagrams rejected, by reason.", []string{"reason"}, nil)
	descKind = prometheus.NewDesc("xrdmon_packets_accounted_total",
		"Datagrams accounted, by kind of packet.", []string{"kind"}, nil)
	descLost = prometheus.NewDesc("xrdmon_packets_lost_total",
		"Packets missing from the servers' sequence counters (gaps not filled within the 64-number horizon, the same for any arrival order), by counter domain.", []string{"domain"}, nil)
	descDup = prometheus.NewDesc("xrdmon_packets_duplicate_total",
		"The same datagram seen again within the reorder window (same sender, same bytes): accounted, not applied again.", nil, nil)
	descReordered = prometheus.NewDesc("xrdmon_packets_reordered_total",
		"Datagrams that arrived after a later one of their stream, within the 64-number horizon: they fill their gap (not loss; docs/records.md §2.1).", nil, nil)
	descCollisions = prometheus.NewDesc("xrdmon_packets_seq_collisions_total",
		"Datagrams whose sequence number was already seen within the window but whose content differs (a wrap, a server restart, a bus interleaving): applied, not taken for duplicates.", nil, nil)
	descStale = prometheus.NewDesc("xrdmon_packets_stale_total",
		"Datagrams later than the 64-number horizon (already counted lost), or repeats of a number older than the reorder window.", nil, nil)
	descRecords = prometheus.NewDesc("xrdmon_records_total",
		"Transfer records emitted, by kind (complete or partial) and reason.", []string{"kind", "reason"}, nil)
	descEvents = prometheus.NewDesc("xrdmon_events_total",
		"Events emitted (g-stream lines, FRM purges and transfers), by validity of their JSON.", []string{"valid"}, nil)
	descRestarts = prometheus.NewDesc("xrdmon_server_restarts_total",
		"XRootD server restarts seen (a new stod from a known server).", nil, nil)
	descPendingDropped = prometheus.NewDesc("xrdmon_pending_references_dropped_total",
		"References (paths, user attributes) that waited for their record past the TTL or the bound.", nil, nil)
	descProgressShed = prometheus.NewDesc("xrdmon_progress_shed_total",
		"Progress snapshots of open files not taken while the input was behind (their bytes count in the rollups at the file's next snapshot or its close, in a later minute).", nil, nil)
	descSessionsEvicted = prometheus.NewDesc("xrdmon_sessions_evicted_total",
		"Sessions forgotten before their time by a bound of the correlation state: entries or bytes (their open files lose their user fields), or the budget of disconnected sessions kept for late packets (their grace is cut short; nothing is lost unless a packet comes later still).", nil, nil)
	descStateBytes = prometheus.NewDesc("xrdmon_state_bytes",
		"Estimated heap bytes of the correlation state, by table (each bounded by its share of correlate.max_state_bytes).", []string{"table"}, nil)
	descTruncated = prometheus.NewDesc("xrdmon_fields_truncated_total",
		"Texts from packets longer than XRootD can send, cut to their cap, by field.", []string{"field"}, nil)
	descRedirects = prometheus.NewDesc("xrdmon_redirects_total",
		"Redirects of an open with a known client seen by the redirect linker, by outcome: linked (put on the record of the open they led to) or forgotten (no open matched within the window, or the record never came).", []string{"outcome"}, nil)
	descHeld = prometheus.NewDesc("xrdmon_records_held_for_redirects",
		"Transfer records the redirect linker holds until the redirects of their open can have come (at most twice correlate.redirect_window; docs/records.md §5.11).", nil, nil)
	descRedirected = prometheus.NewDesc("xrdmon_records_redirected_total",
		"Transfer records that got the redirection that led to their open (hops and delay).", nil, nil)
	descMissing = prometheus.NewDesc("xrdmon_packets_missing",
		"Sequence numbers known to be missing that may still arrive late (gaps within the 64-number horizon): counted lost if they do not.", nil, nil)
	descClockAhead = prometheus.NewDesc("xrdmon_records_clock_ahead_total",
		"Transfer records whose end is ahead of the collector's clock by more than correlate.clock_ahead_tolerance (the server's clock is wrong): written with clock_ahead set.", nil, nil)
	descState = prometheus.NewDesc("xrdmon_state_entries",
		"Correlation state held, by kind of entry.", []string{"kind"}, nil)
)

// statsCollector exports the shards' Stats.
type statsCollector struct{ p *Pipeline }

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPackets, descRejected, descKind, descLost, descDup, descReordered,
		descCollisions, descStale, descRecords, descEvents, descRestarts, descPendingDropped, descSessionsEvicted, descProgressShed, descState, descStateBytes, descTruncated, descRedirects, descRedirected, descClockAhead, descMissing, descHeld} {
		ch <- d
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.p.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter(descPackets, s.Accounted, "accounted")
	counter(descPackets, s.TotalRejected(), "rejected")
	for _, r := range correlate.RejectReasons() {
		counter(descRejected, s.Rejected[r], r.String())
	}
	for k := packet.KindMap; int(k) < correlate.NumKinds; k++ {
		counter(descKind, s.ByKind[k], k.String())
	}
	for d := correlate.Domain(0); d < correlate.NumDomains; d++ {
		counter(descLost, s.Lost[d], d.String())
	}
	counter(descDup, s.Duplicates)
	counter(descReordered, s.Reordered)
	counter(descStale, s.Stale)
	counter(descCollisions, s.SeqCollisions)
	counter(descClockAhead, s.ClockAhead)
	gauge(descMissing, s.Missing)
	for i, r := range correlate.RecordReasons {
		kind, reason := "partial", string(r)
		if r == "" {
			kind, reason = "complete", "none"
		}
		counter(descRecords, s.Records[i], kind, reason)
	}
	invalid := s.InvalidEvents
	counter(descEvents, s.Events-min(invalid, s.Events), "true")
	counter(descEvents, invalid, "false")
	counter(descRestarts, s.Restarts)
	counter(descPendingDropped, s.PendingDropped)
	counter(descSessionsEvicted, s.EvictedSess)
	counter(descProgressShed, s.ProgressShed)
	gauge(descState, s.Servers, "servers")
	gauge(descState, s.Sessions, "sessions")
	gauge(descState, s.OpenFiles, "open_files")
	gauge(descState, s.PendingRefs, "pending_references")
	gauge(descStateBytes, int(s.FileBytes), "open_files")
	gauge(descStateBytes, int(s.SessionBytes), "sessions")
	gauge(descStateBytes, int(s.PendingBytes), "pending_references")
	gauge(descStateBytes, int(s.InternBytes), "interned")
	for f := correlate.Field(0); f < correlate.NumFields; f++ {
		counter(descTruncated, s.Truncated[f], f.String())
	}
	ls := c.p.linkStats.Load()
	counter(descRedirects, ls.Hops, "linked")
	counter(descRedirects, ls.Forgotten, "forgotten")
	counter(descRedirected, ls.Linked)
	gauge(descHeld, ls.Holding)
}
