//go:build crash

package crash

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// killTally sums counters over the lives of several collector processes:
// each process is scraped just before it is killed or stopped.
type killTally struct {
	received   float64 // xrdmon_amqp_messages_received_total
	appended   float64 // xrdmon_store_records_appended_total
	duplicates float64 // xrdmon_store_duplicates_total
	missed     int     // scrapes that failed (the process was too young)
}

func (k *killTally) add(c *collector) {
	m, err := c.metrics()
	if err != nil {
		k.missed++
		return
	}
	k.received += m["xrdmon_amqp_messages_received_total"]
	k.appended += m["xrdmon_store_records_appended_total"]
	k.duplicates += m["xrdmon_store_duplicates_total"]
}

// waitDrained waits until the collector has consumed queue to the end:
// nothing ready in the broker, and nothing received, stored or delivered by
// the outputs for a few seconds (acknowledgements follow a 2 s checkpoint).
func waitDrained(t *testing.T, c *collector, url, queue string, timeout time.Duration) {
	t.Helper()
	waitDrainedBy(t, c, url, queue, timeout, "xrdmon_amqp_messages_received_total")
}

// waitDrainedBy is waitDrained for an input whose messages are counted by
// the counter received (the AMQP or the STOMP input's).
func waitDrainedBy(t *testing.T, c *collector, url, queue string, timeout time.Duration, received string) {
	t.Helper()
	var last map[string]float64
	stableSince := time.Now()
	ok := waitFor(timeout, 250*time.Millisecond, func() bool {
		if !c.running() {
			t.Fatalf("collector exited: %v\n%s", c.err, tail(c.log, 30))
		}
		m, err := c.metrics()
		if err != nil {
			return false
		}
		same := last != nil
		for _, k := range []string{received, "xrdmon_store_records_appended_total", "xrdmon_store_last_seq"} {
			if last == nil || m[k] != last[k] {
				same = false
			}
		}
		last = m
		if !same {
			stableSince = time.Now()
			return false
		}
		if sumPrefix(m, "xrdmon_sink_backlog_records") > 0 {
			stableSince = time.Now()
			return false
		}
		return time.Since(stableSince) > 3*time.Second && queueDepth(t, url, queue) == 0
	})
	if !ok {
		t.Fatalf("queue %s not drained within %s (ready %d)\n%s", queue, timeout, queueDepth(t, url, queue), tail(c.log, 20))
	}
}

// TestKill9 is issue "Nothing lost", part (a): the collector consumes
// 100,000+ shoveler messages from RabbitMQ and is killed with SIGKILL at
// random (seeded) moments, restarted each time on the same store; the
// records it ends up with are exactly those of a run without kills, and
// those of loadgen's truth. Its AMQP output, read from a queue, carries every
// record at least once.
func TestKill9(t *testing.T) {
	url := testenv.AMQPURL(t)
	seed := uint64(envInt("XRDMON_CRASH_SEED", 1))
	kills := envInt("XRDMON_CRASH_KILLS", 8)
	t0 := time.Now()

	// One loadgen run fills two queues with the same messages.
	qCrash, qClean := testenv.Uniq("xrdmon-crash-kill"), testenv.Uniq("xrdmon-crash-clean")
	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients, cfg.Users = 120, 16, 2000
	cfg.Duration = 55 * time.Minute
	cfg.Seed = 11
	truth := publish(t, url, cfg, qCrash, qClean)
	if truth.Emitted < 100_000 || !truth.Lossless {
		t.Fatalf("loadgen emitted %d messages (lossless %v), want >= 100000 lossless", truth.Emitted, truth.Lossless)
	}
	tPublish := time.Since(t0)
	t.Logf("published %d shoveler messages from %d servers (%d sessions, %d expected records) to 2 queues in %s",
		truth.Emitted, cfg.Servers, truth.Sessions, len(truth.Records), tPublish.Round(time.Millisecond))

	input := func(q string) []string {
		return []string{"--listen.udp=", "--amqp_input.enabled=true", "--amqp_input.url=" + url,
			"--amqp_input.queue=" + q, "--amqp_input.exchange=-"}
	}
	// The crash run's collectors: a checkpoint (and the acknowledgement)
	// comes every 50 messages (half the prefetch): the rate stays low
	// enough that kills land mid-stream, and many land in a checkpoint.
	crashInput := append(input(qCrash), "--amqp_input.prefetch=100")

	// The clean run: no kills, graceful stop at the end. It is the
	// reference the crash run is compared with, so it consumes at the
	// input's default prefetch (its checkpoints far apart: no kill to
	// survive), while the crash run happens beside it: the two share
	// nothing but the broker. (Started first, it keeps its own pace; the
	// crash run, slowed by it, only has more messages left at each kill.)
	t1 := time.Now()
	cleanDir := t.TempDir()
	logDir := t.TempDir()
	cleanC := startCollector(t, cleanDir, filepath.Join(logDir, "clean.log"), input(qClean)...)

	// The crash run, with an AMQP output to count deliveries.
	t2 := time.Now()
	outX, outQ := testenv.Uniq("xrdmon-crash-out"), testenv.Uniq("xrdmon-crash-outq")
	declareOutput(t, url, outX, outQ)
	crashDir := t.TempDir()
	crashLog := filepath.Join(logDir, "crash.log")
	flags := append(crashInput, outputFlags(url, outX)...)
	rng := rand.New(rand.NewPCG(seed, 0x6b696c6c))
	var tally killTally
	midStream := 0
	for k := 1; k <= kills; k++ {
		c := startCollector(t, crashDir, crashLog, flags...)
		// Up to 5 s: before the first checkpoint, between checkpoints, or
		// while one is being written.
		up := 200*time.Millisecond + time.Duration(rng.Int64N(int64(4800*time.Millisecond)))
		time.Sleep(up)
		tally.add(c)
		if !c.running() {
			t.Fatalf("collector exited before kill %d: %v\n%s", k, c.err, tail(crashLog, 30))
		}
		c.kill()
		left := queueDepth(t, url, qCrash)
		if left > 0 {
			midStream++
		}
		t.Logf("kill %d: SIGKILL after %s up; %d messages left in the queue", k, up.Round(time.Millisecond), left)
	}
	if midStream < kills {
		t.Errorf("only %d of %d kills happened with messages left: make the stream longer", midStream, kills)
	}
	// Run to the end and stop gracefully; if the stop left messages
	// unacknowledged, another run consumes them. No kill is left to land
	// in a checkpoint: these runs drain the rest of the stream (most of
	// it) at the input's default prefetch, as the clean run does. (The
	// same store, the same output: only checkpoints further apart.)
	restarts := kills
	drainFlags := append(input(qCrash), outputFlags(url, outX)...)
	for run := 0; ; run++ {
		c := startCollector(t, crashDir, crashLog, drainFlags...)
		restarts++
		waitDrained(t, c, url, qCrash, 5*time.Minute)
		tally.add(c)
		if err := c.stop(30 * time.Second); err != nil {
			t.Fatalf("final stop: %v\n%s", err, tail(crashLog, 20))
		}
		n := queueDepth(t, url, qCrash)
		if n == 0 {
			break
		}
		if run == 2 {
			t.Fatalf("%d messages still unacknowledged after %d graceful runs", n, run+1)
		}
		t.Logf("graceful stop left %d messages; running again", n)
	}
	tCrash := time.Since(t2)

	// The clean run's end (it has usually drained its queue by now).
	waitDrained(t, cleanC, url, qClean, 5*time.Minute)
	if err := cleanC.stop(30 * time.Second); err != nil {
		t.Fatalf("clean run: %v\n%s", err, tail(cleanC.log, 20))
	}
	if n := queueDepth(t, url, qClean); n != 0 {
		t.Fatalf("clean run left %d messages unacknowledged", n)
	}
	tClean := time.Since(t1)

	// Compare.
	cleanRecs, cleanEvs := storeContents(t, cleanDir)
	crashRecs, crashEvs := storeContents(t, crashDir)
	if ic := integrityCheck(t, crashDir); ic != "ok" {
		t.Errorf("crash store integrity_check: %s", ic)
	}
	lost, ex := setDiff(cleanRecs, crashRecs)
	extra, ex2 := setDiff(crashRecs, cleanRecs)
	if lost != 0 || extra != 0 {
		t.Errorf("records: clean run %d, crash run %d: %d lost (e.g. %s), %d extra (e.g. %s)", len(cleanRecs), len(crashRecs), lost, ex, extra, ex2)
	}
	differ := 0
	for id, r := range cleanRecs {
		if cr, ok := crashRecs[id]; ok && comparable(cr) != comparable(r) {
			if differ++; differ <= 3 {
				t.Errorf("record %s differs:\ncrash %+v\nclean %+v", id, cr, r)
			}
		}
	}
	evLost, _ := setDiff(cleanEvs, crashEvs)
	evExtra, _ := setDiff(crashEvs, cleanEvs)
	if evLost != 0 || evExtra != 0 {
		t.Errorf("events: clean run %d, crash run %d: %d lost, %d extra", len(cleanEvs), len(crashEvs), evLost, evExtra)
	}
	if len(cleanRecs) != len(truth.Records) {
		t.Errorf("clean run stored %d records, truth has %d", len(cleanRecs), len(truth.Records))
	}
	checkTruth(t, crashRecs, truth)
	checkEvents(t, crashEvs, truth)

	// The output: every stored record at least once.
	msgs := drainQueue(t, url, outQ)
	outMissing, ex3 := setDiff(crashRecs, msgs)
	outExtra, ex4 := setDiff(msgs, crashRecs)
	var outTotal int
	for _, n := range msgs {
		outTotal += n
	}
	if outMissing != 0 || outExtra != 0 {
		t.Errorf("AMQP output: %d stored records never published (e.g. %s), %d published records not stored (e.g. %s)", outMissing, ex3, outExtra, ex4)
	}

	t.Logf("RESULT kill9: seed %d, %d messages, %d kills (%d mid-stream), %d collector starts; records: clean %d, crash %d, truth %d; lost %d, extra %d, differing %d; events %d",
		seed, truth.Emitted, kills, midStream, restarts, len(cleanRecs), len(crashRecs), len(truth.Records), lost, extra, differ, len(crashEvs))
	t.Logf("RESULT kill9: re-delivered before dedup: messages received %v (%v more than published), store duplicates %v (records+events dropped by record_id/event_id), AMQP output %d messages for %d records (%d duplicates); counters scraped just before each kill, %d scrapes missed",
		tally.received, tally.received-float64(truth.Emitted), tally.duplicates, outTotal, len(msgs), outTotal-len(msgs), tally.missed)
	t.Logf("RESULT kill9: time: publish %s, clean run %s (beside the crash run), crash run %s, total %s",
		tPublish.Round(time.Second), tClean.Round(time.Second), tCrash.Round(time.Second), time.Since(t0).Round(time.Second))
}

// declareOutput declares a topic exchange and a durable queue bound to it
// with "#", deleted at the end of the test.
func declareOutput(t *testing.T, url, exchange, queue string) {
	t.Helper()
	ch := amqpChannel(t, url)
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAMQP(url, []string{exchange}, []string{queue}) })
}

// outputFlags enables the AMQP output with records (GRACC JSON, one per
// message, message id = record_id) to exchange and nothing else.
func outputFlags(url, exchange string) []string {
	return []string{"--outputs.amqp.enabled=true", "--outputs.amqp.url=" + url,
		"--outputs.amqp.exchanges.records=" + exchange, "--outputs.amqp.exchanges.wlcg=",
		"--outputs.amqp.exchanges.cache=", "--outputs.amqp.exchanges.tpc=", "--outputs.amqp.exchanges.events=",
		"--outputs.amqp.records_per_message=1"}
}
