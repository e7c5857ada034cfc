package rollup

import (
	"github.com/prometheus/client_golang/prometheus"

	xmetrics "github.com/xrdmon/xrdmon/internal/metrics"
)

// metrics are the rollup builder's metrics.
type metrics struct {
	records, progress, invalid, openEvicted prometheus.Counter
	feedDropped, yields, yieldSeconds       prometheus.Counter
	flushes, compactions, errors            prometheus.Counter
	flushSeconds                            prometheus.Histogram
	cursor, headBytes, openBytes            prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_rollup_records_total",
			Help: "Records summed into the rollups.",
		}),
		progress: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_rollup_progress_total",
			Help: "Progress events (isXfr updates of open files) that added bytes to the rollups.",
		}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_rollup_invalid_total",
			Help: "Progress events the rollup builder could not read (skipped).",
		}),
		openEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_rollup_open_evicted_total",
			Help: "Progress events not counted because the rollup builder's table of open accesses was at rollup.max_open_bytes; their bytes count at the close.",
		}),
		feedDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_rollup_feed_dropped_total",
			Help: "Batches of committed entries the rollups could not queue (they were behind); those entries are read back from the store instead.",
		}),
		yields: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_rollup_yields_total",
			Help: "Times the rollups paused because the UDP input was behind (rollup.max_yield).",
		}),
		yieldSeconds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_rollup_yield_seconds_total",
			Help: "Time the rollups spent paused for the UDP input; they catch up from the store's log after.",
		}),
		flushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_rollup_flushes_total",
			Help: "Rollup head flushes: parts, state and cursor committed to the store.",
		}),
		compactions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_rollup_compactions_total",
			Help: "Rollup buckets whose parts were merged into one.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xrdmon_rollup_errors_total",
			Help: "Failed rollup steps (reading the log or committing; retried).",
		}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "xrdmon_rollup_flush_duration_seconds",
			Help:    "Time to encode, compact and commit one rollup flush.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		cursor: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xrdmon_rollup_cursor",
			Help: "The sequence number of the last log entry summed into the rollups.",
		}),
		headBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xrdmon_rollup_head_bytes",
			Help: "Estimated bytes of rollup sums held in memory, not yet flushed.",
		}),
		openBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xrdmon_rollup_open_bytes",
			Help: "Estimated bytes of the rollup builder's table of open accesses (bytes counted so far).",
		}),
	}
	ms := xmetrics.NewSet(reg)
	for _, c := range []prometheus.Collector{m.records, m.progress, m.invalid, m.openEvicted, m.feedDropped, m.yields, m.yieldSeconds, m.flushes, m.compactions, m.errors, m.flushSeconds, m.cursor, m.headBytes, m.openBytes} {
		xmetrics.Add(ms, c)
	}
	return m, ms.Err()
}
