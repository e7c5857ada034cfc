package deliver

import (
	xmetrics "github.com/xrdmon/xrdmon/internal/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one loop's delivery metrics: its children of vectors shared
// by every sink.
type metrics struct {
	delivered prometheus.Counter
	errors    prometheus.Counter
	dead      prometheus.Counter
	duration  prometheus.Observer
}

// newMetrics returns the metrics of sink name. When a vector is already
// registered on reg (by another sink) the existing one is used.
func newMetrics(reg prometheus.Registerer, name string) (*metrics, error) {
	ms := xmetrics.NewSet(reg)
	delivered := xmetrics.CounterVec(ms, "xrdmon_sink_delivered_total",
		"Entries (records and events) a sink has delivered and its destination has acknowledged.", "sink")
	errs := xmetrics.CounterVec(ms, "xrdmon_sink_errors_total",
		"Failed delivery attempts of a sink (each is retried).", "sink")
	dead := xmetrics.CounterVec(ms, "xrdmon_sink_dead_letters_total",
		"Entries a sink's destination refused for good, set aside in the store's dead letters (xrdmon deadletters) instead of being retried.", "sink")
	dur := xmetrics.Add(ms, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "xrdmon_sink_batch_duration_seconds",
		Help:    "Time to deliver one batch, from the first write to the destination's acknowledgement.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"sink"}))
	if err := ms.Err(); err != nil {
		return nil, err
	}
	return &metrics{
		delivered: delivered.WithLabelValues(name),
		errors:    errs.WithLabelValues(name),
		dead:      dead.WithLabelValues(name),
		duration:  dur.WithLabelValues(name),
	}, nil
}
