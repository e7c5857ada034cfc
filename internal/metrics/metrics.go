// Package metrics is the one way xrdmon registers Prometheus metrics.
//
// The rule: a component takes a prometheus.Registerer (nil: its metrics
// are not registered, as in most tests), keeps its metrics in one
// unexported struct, and registers every collector through a Set:
//
//	s := metrics.NewSet(reg)
//	m := &metrics{
//		records: metrics.Counter(s, "xrdmon_..._total", "Help text."),
//		queued:  metrics.Add(s, prometheus.NewGaugeVec(...)),
//	}
//	return m, s.Err()
//
// Counter, CounterVec, Gauge, GaugeFunc and Histogram make and register
// the common kinds in one line; Add registers any other collector. A
// component that registers its metrics after making them (a store that
// may be opened without a registry) makes them with NewCounter, NewGauge,
// NewHistogram and NewGaugeFunc.
//
// A collector whose name is already registered with the same shape is
// reused, so that several instances of a component (two UDP listeners,
// a store reopened in a test) share their vectors; any other conflict is
// an error, reported once by Err. Every exported metric is documented in
// docs/metrics.md (TestMetricsDocumented).
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Set registers collectors on one Registerer with a sticky error.
type Set struct {
	reg        prometheus.Registerer
	err        error
	registered []prometheus.Collector
}

// NewSet returns a Set registering on reg (nil: nothing is registered).
func NewSet(reg prometheus.Registerer) *Set { return &Set{reg: reg} }

// Add registers c on s's Registerer and returns it, or the collector
// already registered under its name when that has c's type. After the
// first error, Add registers nothing more.
func Add[T prometheus.Collector](s *Set, c T) T {
	if s.reg == nil || s.err != nil {
		return c
	}
	if err := s.reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing
			}
		}
		s.err = fmt.Errorf("register metric: %w", err)
		return c
	}
	s.registered = append(s.registered, c)
	return c
}

// Err returns the first registration error.
func (s *Set) Err() error { return s.err }

// Unregister removes what s registered itself (not the collectors it
// reused), for a component that closes while the process goes on.
func (s *Set) Unregister() {
	if s.reg == nil {
		return
	}
	for _, c := range s.registered {
		s.reg.Unregister(c)
	}
	s.registered = nil
}

// NewCounter returns an unregistered counter named name with the help text
// help.
func NewCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// NewGauge returns an unregistered gauge named name with the help text help.
func NewGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// NewHistogram returns an unregistered histogram named name with the help
// text help and the bucket bounds buckets.
func NewHistogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// NewGaugeFunc returns an unregistered gauge named name with the help text
// help whose value is f's at scrape time.
func NewGaugeFunc(name, help string, f func() float64) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
}

// Counter registers NewCounter(name, help) through Add.
func Counter(s *Set, name, help string) prometheus.Counter {
	return Add(s, NewCounter(name, help))
}

// CounterVec registers, through Add, a counter vector named name with the
// help text help and the labels labels.
func CounterVec(s *Set, name, help string, labels ...string) *prometheus.CounterVec {
	return Add(s, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// Gauge registers NewGauge(name, help) through Add.
func Gauge(s *Set, name, help string) prometheus.Gauge {
	return Add(s, NewGauge(name, help))
}

// GaugeFunc registers NewGaugeFunc(name, help, f) through Add.
func GaugeFunc(s *Set, name, help string, f func() float64) prometheus.GaugeFunc {
	return Add(s, NewGaugeFunc(name, help, f))
}

// Histogram registers NewHistogram(name, help, buckets) through Add.
func Histogram(s *Set, name, help string, buckets []float64) prometheus.Histogram {
	return Add(s, NewHistogram(name, help, buckets))
}
