package rollup

import (
	"github.com/prometheus/client_golang/prometheus"

	xmetrics "github.com/xrdmon/xrdmon/internal/metrics"
)

// metrics are the rollup builder's metrics.
type metrics struct {
	records, progress, openEvicted prometheus.Counter
	feedDropped, readBack          prometheus.Counter
	yields, yieldSeconds           prometheus.Counter
	flushes, compactions, errors   prometheus.Counter
	flushSeconds                   prometheus.Histogram
	cursor, headBytes, openBytes   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records:      xmetrics.NewCounter("xrdmon_rollup_records_total", "Records summed into the rollups."),
		progress:     xmetrics.NewCounter("xrdmon_rollup_progress_total", "Progress events (isXfr updates of open files) that added bytes to the rollups."),
		openEvicted:  xmetrics.NewCounter("xrdmon_rollup_open_evicted_total", "Progress events not counted because the rollup builder's table of open accesses was at rollup.max_open_bytes; their bytes count at the close."),
		feedDropped:  xmetrics.NewCounter("xrdmon_rollup_feed_dropped_total", "Batches of committed entries the rollups could not queue (rollup.max_queue_bytes full: they were behind); those entries are read back from the store instead."),
		readBack:     xmetrics.NewCounter("xrdmon_rollup_read_back_total", "Committed entries the rollups read back from the store's log instead of being fed them (at start, after a dropped batch): each costs about twice a fed one."),
		yields:       xmetrics.NewCounter("xrdmon_rollup_yields_total", "Times the rollups paused because the UDP input was behind (rollup.max_yield)."),
		yieldSeconds: xmetrics.NewCounter("xrdmon_rollup_yield_seconds_total", "Time the rollups spent paused for the UDP input; they catch up from the store's log after."),
		flushes:      xmetrics.NewCounter("xrdmon_rollup_flushes_total", "Rollup head flushes: parts, state and cursor committed to the store."),
		compactions:  xmetrics.NewCounter("xrdmon_rollup_compactions_total", "Rollup buckets whose parts were merged into one."),
		errors:       xmetrics.NewCounter("xrdmon_rollup_errors_total", "Failed rollup steps (reading the log or committing; retried)."),
		flushSeconds: xmetrics.NewHistogram("xrdmon_rollup_flush_duration_seconds", "Time to encode, compact and commit one rollup flush.", prometheus.ExponentialBuckets(0.001, 2, 14)),
		cursor:       xmetrics.NewGauge("xrdmon_rollup_cursor", "The sequence number of the last log entry summed into the rollups."),
		headBytes:    xmetrics.NewGauge("xrdmon_rollup_head_bytes", "Estimated bytes of rollup sums held in memory, not yet flushed."),
		openBytes:    xmetrics.NewGauge("xrdmon_rollup_open_bytes", "Estimated bytes of the rollup builder's table of open accesses (bytes counted so far)."),
	}
	ms := xmetrics.NewSet(reg)
	for _, c := range []prometheus.Collector{m.records, m.progress, m.openEvicted, m.feedDropped, m.readBack, m.yields, m.yieldSeconds, m.flushes, m.compactions, m.errors, m.flushSeconds, m.cursor, m.headBytes, m.openBytes} {
		xmetrics.Add(ms, c)
	}
	return m, ms.Err()
}
