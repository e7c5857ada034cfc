//go:build crash

package crash

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// udpLoad runs loadgen over UDP to addr in the background (paced by
// cfg.Rate); call the returned function to wait for its truth.
func udpLoad(t *testing.T, addr string, cfg loadgen.Config) func() *loadgen.Truth {
	t.Helper()
	g, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := loadgen.NewUDP(addr)
	if err != nil {
		t.Fatal(err)
	}
	var truth *loadgen.Truth
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		truth, runErr = g.Run(context.Background(), out)
		out.Close()
	}()
	return func() *loadgen.Truth {
		t.Helper()
		<-done
		if runErr != nil {
			t.Fatalf("loadgen over UDP: %v", runErr)
		}
		if out.Failed > 0 {
			t.Errorf("loadgen: %d datagrams refused", out.Failed)
		}
		return truth
	}
}

// udpLoadConfig is a paced UDP stream of about 13,000 packets over ~40 s.
func udpLoadConfig(seed uint64) loadgen.Config {
	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients = 40, 16
	cfg.Duration = 10 * time.Minute
	cfg.Seed = seed
	cfg.Rate = 320
	return cfg
}

// waitStored waits until the collector has stored everything it received
// and its outputs have delivered it: the store's last sequence stable for
// 3 s and no sink backlog.
func waitStored(t *testing.T, c *collector, timeout time.Duration) {
	t.Helper()
	var last float64 = -1
	stableSince := time.Now()
	ok := waitFor(timeout, 250*time.Millisecond, func() bool {
		if !c.running() {
			t.Fatalf("collector exited: %v\n%s", c.err, tail(c.log, 30))
		}
		m, err := c.metrics()
		if err != nil {
			return false
		}
		seq := m["xrdmon_store_last_seq"]
		if seq != last || sumPrefix(m, "xrdmon_sink_backlog_records") > 0 {
			last, stableSince = seq, time.Now()
			return false
		}
		return time.Since(stableSince) > 3*time.Second
	})
	if !ok {
		m, _ := c.metrics()
		t.Fatalf("outputs not caught up within %s (last seq %v, backlog %v)\n%s", timeout,
			m["xrdmon_store_last_seq"], sumPrefix(m, "xrdmon_sink_backlog_records"), tail(c.log, 20))
	}
}

// catchUp waits until the sink's backlog is down to about one commit's
// worth (new records keep arriving) and returns the time since back.
func catchUp(t *testing.T, c *collector, sink string, back time.Time) time.Duration {
	t.Helper()
	if !waitFor(2*time.Minute, 100*time.Millisecond, func() bool {
		m, err := c.metrics()
		return err == nil && m[`xrdmon_sink_backlog_records{sink="`+sink+`"}`] < 100
	}) {
		t.Fatalf("%s output did not catch up within 2 minutes\n%s", sink, tail(c.log, 20))
	}
	return time.Since(back)
}

// TestRabbitMQOutage is issue "Nothing lost", part (b): RabbitMQ is stopped
// for 30 s while the AMQP output publishes; when it is back, every record
// arrives (at least once) in the queue bound to the output exchange. Input
// is UDP, since the broker is down for part of the run.
func TestRabbitMQOutage(t *testing.T) {
	url := testenv.AMQPURL(t)
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		testenv.Unavailable(t, "rabbitmqctl not found: cannot stop RabbitMQ")
	}
	hostPort := amqpHostPort(t, url)
	outage := 30 * time.Second
	t0 := time.Now()

	outX, outQ := testenv.Uniq("xrdmon-crash-out"), testenv.Uniq("xrdmon-crash-outq")
	declareOutput(t, url, outX, outQ)
	dir := t.TempDir()
	udpAddr := freeUDPAddr(t)
	c := startCollector(t, dir, filepath.Join(t.TempDir(), "collector.log"),
		append([]string{"--listen.udp=" + udpAddr, "--listen.rcvbuf=8MiB"}, outputFlags(url, outX)...)...)
	load := udpLoad(t, udpAddr, udpLoadConfig(21))

	// Let the output publish for a while, then stop the broker.
	if !waitFor(20*time.Second, 100*time.Millisecond, func() bool {
		m, err := c.metrics()
		return err == nil && m["xrdmon_store_last_seq"] > 500
	}) {
		t.Fatalf("no records stored after 20 s\n%s", tail(c.log, 20))
	}
	t.Cleanup(func() {
		// Whatever happened, leave the broker running.
		if _, err := run("rabbitmqctl", "start_app"); err != nil {
			t.Logf("cleanup: %v", err)
		}
		if !waitPort(hostPort, time.Minute) {
			t.Errorf("cleanup: RabbitMQ does not answer at %s", hostPort)
		}
	})
	atStop := c.metric("xrdmon_store_last_seq")
	tStop := time.Now()
	if _, err := run("rabbitmqctl", "stop_app"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outage - time.Since(tStop))
	backlog := c.metric(`xrdmon_sink_backlog_records{sink="amqp"}`)
	atStart := c.metric("xrdmon_store_last_seq")
	if _, err := run("rabbitmqctl", "start_app"); err != nil {
		t.Fatal(err)
	}
	if !waitPort(hostPort, time.Minute) {
		t.Fatalf("RabbitMQ does not answer at %s after start_app", hostPort)
	}
	down := time.Since(tStop)
	if !c.running() {
		t.Fatalf("collector exited during the outage: %v\n%s", c.err, tail(c.log, 30))
	}
	tBack := time.Now()
	if backlog == 0 {
		t.Errorf("output backlog 0 after %s without a broker: the outage was not seen", outage)
	}

	caughtUp := catchUp(t, c, "amqp", tBack)
	truth := load()
	waitStored(t, c, 2*time.Minute)
	m, _ := c.metrics()
	lost := sumPrefix(m, "xrdmon_packets_lost_total")
	if err := c.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, tail(c.log, 20))
	}

	recs, evs := storeContents(t, dir)
	msgs := drainQueue(t, url, outQ)
	missing, ex := setDiff(recs, msgs)
	extra, ex2 := setDiff(msgs, recs)
	total := 0
	for _, n := range msgs {
		total += n
	}
	if missing != 0 || extra != 0 {
		t.Errorf("AMQP output: %d stored records never arrived (e.g. %s), %d arrived that are not stored (e.g. %s)", missing, ex, extra, ex2)
	}
	if lost == 0 {
		checkTruth(t, recs, truth)
		checkEvents(t, evs, truth)
	} else {
		t.Logf("UDP: %v packets lost in transit; not comparing with the truth", lost)
	}
	t.Logf("RESULT rabbitmq: broker down %s (stop_app to port open); %v entries (records+events) stored while down, output backlog %v at restart; output caught up %s after it was back; records %d (truth %d), arrived %d distinct in %d messages (%d duplicates), missing %d; UDP packets lost %v; test %s",
		down.Round(100*time.Millisecond), atStart-atStop, backlog, caughtUp.Round(100*time.Millisecond), len(recs), len(truth.Records),
		len(msgs), total, total-len(msgs), missing, lost, time.Since(t0).Round(time.Second))
}
