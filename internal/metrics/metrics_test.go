package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func counter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "xrdmon_test_total", Help: "A test counter."})
}

// Two components registering the same metric share it; a conflicting one
// is an error; Unregister frees what a Set registered.
func TestSet(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := NewSet(reg), NewSet(reg)
	ca := Add(a, counter())
	cb := Add(b, counter())
	if ca != cb || a.Err() != nil || b.Err() != nil {
		t.Fatalf("not shared: %v %v", a.Err(), b.Err())
	}
	cb.Inc()
	c := NewSet(reg)
	Add(c, prometheus.NewGauge(prometheus.GaugeOpts{Name: "xrdmon_test_total", Help: "Another shape."}))
	if c.Err() == nil {
		t.Fatal("a gauge under a counter's name was accepted")
	}
	Add(c, counter()) // after an error nothing more is registered
	a.Unregister()
	d := NewSet(reg)
	if Add(d, counter()) == ca || d.Err() != nil {
		t.Fatalf("not unregistered: %v", d.Err())
	}
	n := NewSet(nil)
	if Add(n, counter()) == nil || n.Err() != nil {
		t.Fatal("a nil registerer must register nothing, without error")
	}
	n.Unregister()
}
