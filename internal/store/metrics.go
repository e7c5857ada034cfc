package store

import (
	"github.com/prometheus/client_golang/prometheus"
	xmetrics "github.com/xrdmon/xrdmon/internal/metrics"
)

type metrics struct {
	batchDuration    prometheus.Histogram
	recordsAppended  prometheus.Counter
	eventsAppended   prometheus.Counter
	duplicates       prometheus.Counter
	timesClamped     prometheus.Counter
	appendErrors     prometheus.Counter
	fullRefusals     prometheus.Counter
	retentionDeleted prometheus.Counter
	maxBytesDropped  prometheus.Counter
	blockBytes       prometheus.Histogram
	postDuration     prometheus.Histogram
	bytes            prometheus.GaugeFunc
	lastSeq          prometheus.GaugeFunc
	backlog          *backlogCollector

	reg prometheus.Registerer // where register put them
	set *xmetrics.Set
}

func newMetrics(s *Store) *metrics {
	return &metrics{
		batchDuration:    xmetrics.NewHistogram("xrdmon_store_batch_duration_seconds", "Time to append one batch to the store, from encoding to durable commit.", prometheus.ExponentialBuckets(0.0005, 2, 14)),
		recordsAppended:  xmetrics.NewCounter("xrdmon_store_records_appended_total", "Records appended to the store (duplicates excluded)."),
		eventsAppended:   xmetrics.NewCounter("xrdmon_store_events_appended_total", "G-stream events appended to the store (duplicates excluded)."),
		duplicates:       xmetrics.NewCounter("xrdmon_store_duplicates_total", "Records and events not appended because their id was already stored."),
		timesClamped:     xmetrics.NewCounter("xrdmon_store_times_clamped_total", "Records and events whose time lay more than an hour after their receive time (a server clock or a forged packet in the future), indexed and retained at that bound."),
		appendErrors:     xmetrics.NewCounter("xrdmon_store_append_errors_total", "Append transactions that failed and were rolled back."),
		fullRefusals:     xmetrics.NewCounter("xrdmon_store_full_total", "Appends refused with ErrFull (max bytes reached or disk full)."),
		retentionDeleted: xmetrics.NewCounter("xrdmon_store_retention_deleted_total", "Entries deleted by retention passes (age or max bytes)."),
		maxBytesDropped:  xmetrics.NewCounter("xrdmon_store_max_bytes_dropped_total", "Delivered entries deleted before their retention time to stay under max bytes."),
		blockBytes:       xmetrics.NewHistogram("xrdmon_store_block_bytes", "Compressed size of the blocks written to the store (up to 4096 entries or 4 MiB of entries each).", prometheus.ExponentialBuckets(256, 4, 9)),
		postDuration:     xmetrics.NewHistogram("xrdmon_store_posting_pass_duration_seconds", "Time of one posting pass (the name postings of the blocks written since the last one, every 10 s).", prometheus.ExponentialBuckets(0.001, 2, 14)),
		bytes:            xmetrics.NewGaugeFunc("xrdmon_store_bytes", "Size of the store's database and WAL files on disk.", func() float64 { return float64(s.diskBytes()) }),
		lastSeq:          xmetrics.NewGaugeFunc("xrdmon_store_last_seq", "Sequence number of the last entry appended to the store.", func() float64 { return float64(s.lastSeq.Load()) }),
		backlog: &backlogCollector{s: s, desc: prometheus.NewDesc("xrdmon_sink_backlog_records",
			"Entries (records and events) in the store that the sink has not yet delivered.",
			[]string{"sink"}, nil)},
	}
}

// register registers the metrics on reg (through metrics.Set: names a
// store already registered on reg are shared).
func (m *metrics) register(reg prometheus.Registerer) error {
	m.reg, m.set = reg, xmetrics.NewSet(reg)
	for _, c := range []prometheus.Collector{m.batchDuration, m.recordsAppended, m.eventsAppended,
		m.duplicates, m.timesClamped, m.appendErrors, m.fullRefusals, m.retentionDeleted, m.maxBytesDropped,
		m.blockBytes, m.postDuration, m.bytes, m.lastSeq, m.backlog} {
		xmetrics.Add(m.set, c)
	}
	if err := m.set.Err(); err != nil {
		m.unregister()
		return err
	}
	return nil
}

// unregister removes the metrics, so a store can be reopened on the same
// registry (tests, restarts in process).
func (m *metrics) unregister() {
	if m.set != nil {
		m.set.Unregister()
	}
}

// backlogCollector reports, at scrape time, LastSeq - cursor for every
// registered sink, so the backlog grows while a sink is down.
type backlogCollector struct {
	s    *Store
	desc *prometheus.Desc
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	last := c.s.lastSeq.Load()
	for sink, cur := range c.s.Sinks() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(max(last-cur, 0)), sink)
	}
}
