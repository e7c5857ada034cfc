package source

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRelayOptionsFill(t *testing.T) {
	o := RelayOptions{BatchSize: 1000, ReconnectMin: time.Minute}
	o.Fill(100)
	d := DefaultRelayOptions()
	if o.BatchSize != 100 || o.BatchWait != d.BatchWait || o.ReconnectMax != time.Minute || o.DrainTimeout != d.DrainTimeout {
		t.Fatalf("filled %+v", o)
	}
	var z RelayOptions
	z.Fill(20000)
	if z != d {
		t.Fatalf("zero filled %+v, want %+v", z, d)
	}
}

func TestBatcher(t *testing.T) {
	o := RelayOptions{BatchSize: 2, BatchWait: time.Hour}
	out := make(chan *Batch, 1)
	stop := make(chan struct{})
	failed := prometheus.NewCounter(prometheus.CounterOpts{Name: "failed"})
	bt := NewBatcher(&o, NewBatchPool(4, 4*MaxDatagram), out, stop, failed)
	ctx := context.Background()
	add := func() bool {
		bt.Batch().Append([]byte("x"), netip.AddrPort{}, time.Time{})
		return bt.Added()
	}
	if b := bt.Batch(); bt.Batch() != b || add() || !add() {
		t.Fatal("Batch started a second batch, or a batch of two is not due after its second message")
	}
	acked := 0
	ack := func() error { acked++; return errors.New("gone") }
	if err := bt.Hand(ctx, bt.Take(), ack, nil); err != nil {
		t.Fatal(err)
	}
	b := <-out
	if len(b.Packets) != 2 || b.Ack() == nil || acked != 1 || testutil.ToFloat64(failed) != 1 {
		t.Fatalf("handed %d packets, acked %d, failed %v", len(b.Packets), acked, testutil.ToFloat64(failed))
	}
	if bt.Take() != nil {
		t.Fatal("a batch after Take")
	}
	// A batch without packets is acknowledged at once.
	bt.Batch()
	if err := bt.Hand(ctx, bt.Take(), ack, nil); err == nil || acked != 2 || testutil.ToFloat64(failed) != 1 {
		t.Fatalf("empty batch: %v, acked %d", err, acked)
	}
	// Not taken: stop closed, the batch is freed and unsent is called.
	out <- &Batch{}
	close(stop)
	add()
	unsent := false
	if err := bt.Hand(ctx, bt.Take(), ack, func() { unsent = true }); !errors.Is(err, ErrAbandoned) || !unsent {
		t.Fatalf("abandoned: %v, unsent %v", err, unsent)
	}
}
