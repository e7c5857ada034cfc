package sinktest

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/record"
)

// echoServer accepts connections on loopback and echoes what they send.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes msg on c and reads len(msg) bytes back.
func roundTrip(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read back %q: %v", msg, err)
	}
	return string(buf)
}

func TestProxy(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		_ = c.Close()
		t.Fatal("connected before Start")
	}
	p.Start()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if got := roundTrip(t, c, "hello"); got != "hello" {
		t.Fatalf("echo %q, want hello", got)
	}

	// Paused, the echo is held back, not dropped.
	p.Pause()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var ne net.Error
	if n, err := c.Read(make([]byte, 4)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %d bytes (err %v) while paused", n, err)
	}
	p.Resume()
	buf := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after resume: %q, %v", buf, err)
	}

	// Cut closes the proxied connection and stops listening.
	p.Cut()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(buf); err == nil {
		t.Fatal("read on a cut connection")
	}
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		_ = c.Close()
		t.Fatal("connected after Cut")
	}

	// Started again, it proxies new connections.
	p.Start()
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c2.Close() }()
	if got := roundTrip(t, c2, "again"); got != "again" {
		t.Fatalf("echo %q, want again", got)
	}
}

type runner struct{ err error }

func (r runner) Run(ctx context.Context) error {
	<-ctx.Done()
	return r.err
}

func TestStop(t *testing.T) {
	want := errors.New("boom")
	stop := Start(t, runner{want})
	if err := stop(); err != want {
		t.Fatalf("stop: %v, want %v", err, want)
	}
	if err := stop(); err != want {
		t.Fatalf("second stop: %v, want %v", err, want)
	}
	RunSink(t, runner{})() // a nil error is not reported
}

func TestRecordsAndStore(t *testing.T) {
	recs := Records(0, 100, func(i int) record.Record { return Record(i, time.Second) })
	ids := map[string]bool{}
	for i, r := range recs {
		ids[r.RecordID] = true
		if want := T0.Add(time.Duration(i) * time.Second); !r.End.Equal(want) {
			t.Fatalf("record %d ends %s, want %s", i, r.End, want)
		}
	}
	if len(ids) != len(recs) {
		t.Fatalf("%d distinct ids in %d records", len(ids), len(recs))
	}
	st := OpenStore(t)
	ctx := context.Background()
	if err := st.Append(ctx, recs, []record.Event{Event(1, record.EventTPC)}); err != nil {
		t.Fatal(err)
	}
	if got := LastSeq(t, st); got != 101 {
		t.Fatalf("last seq %d, want 101", got)
	}
	if got := Cursor(t, st, "nobody"); got != 0 {
		t.Fatalf("cursor of an unknown sink %d, want 0", got)
	}
}

func TestSinkCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"sink"})
	reg.MustRegister(c)
	c.WithLabelValues("a").Add(3)
	if got := SinkCounter(t, reg, "x_total", "a"); got != 3 {
		t.Fatalf("a = %v, want 3", got)
	}
	if got := SinkCounter(t, reg, "x_total", "b"); got != 0 {
		t.Fatalf("b = %v, want 0", got)
	}
}
