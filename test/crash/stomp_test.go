//go:build crash

package crash

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// TestKill9STOMP is TestKill9 over the STOMP input, the WLCG side of the
// bus: the collector consumes the shoveler's messages through RabbitMQ's
// STOMP plugin (acknowledged in `client` mode, one cumulative ACK per
// batch, after the checkpoint) and is killed with SIGKILL at random (seeded) moments, restarted each
// time on the same store; the records it ends up with are exactly those of
// a run without kills, and loadgen's truth. Its STOMP output, read from a
// queue, carries every record at least once. Only the collector process is
// killed: the broker is the shared one, untouched.
func TestKill9STOMP(t *testing.T) {
	url := testenv.AMQPURL(t)
	stompURL, user, _ := testenv.RabbitSTOMP(t)
	seed := uint64(envInt("XRDMON_CRASH_SEED", 1))
	kills := envInt("XRDMON_CRASH_KILLS", 6)
	t0 := time.Now()

	qCrash, qClean := testenv.Uniq("xrdmon-crash-stomp-kill"), testenv.Uniq("xrdmon-crash-stomp-clean")
	cfg := loadgen.DefaultConfig()
	cfg.Servers, cfg.Clients, cfg.Users = 60, 16, 1000
	cfg.Duration = 40 * time.Minute // ~58,000 messages: every kill lands mid-stream however fast the collector drains
	cfg.Seed = 13
	truth := publish(t, url, cfg, qCrash, qClean)
	if truth.Emitted < 25_000 || !truth.Lossless {
		t.Fatalf("loadgen emitted %d messages (lossless %v), want >= 25000 lossless", truth.Emitted, truth.Lossless)
	}
	t.Logf("published %d shoveler messages from %d servers (%d expected records) to 2 queues in %s",
		truth.Emitted, cfg.Servers, len(truth.Records), time.Since(t0).Round(time.Millisecond))

	pf := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pf, []byte("guest\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conn := func(section string) []string {
		return []string{"--" + section + ".url=" + stompURL, "--" + section + ".user=" + user,
			"--" + section + ".password_file=" + pf, "--" + section + ".vhost=/"}
	}
	input := func(q string) []string {
		// RabbitMQ's STOMP name of an existing queue.
		return append(conn("stomp_input"), "--listen.udp=", "--stomp_input.enabled=true",
			"--stomp_input.destination=/amq/queue/"+q)
	}
	// The crash run's collectors: a checkpoint (and the acknowledgements)
	// every 50 messages, half the prefetch.
	crashInput := append(input(qCrash), "--stomp_input.prefetch=100")
	const received = "xrdmon_stomp_messages_received_total"

	// The clean run, the reference, at the input's default prefetch (no
	// kill to survive), beside the crash run: they share nothing but the
	// broker, and the crash run, slowed by it, only has more messages left
	// at each kill.
	t1 := time.Now()
	cleanDir, logDir := t.TempDir(), t.TempDir()
	cleanC := startCollector(t, cleanDir, filepath.Join(logDir, "clean.log"), input(qClean)...)

	// The crash run, with a STOMP output to a queue to count deliveries.
	t2 := time.Now()
	outQ := testenv.Uniq("xrdmon-crash-stomp-out")
	declareQueue(t, url, outQ)
	crashDir := t.TempDir()
	crashLog := filepath.Join(logDir, "crash.log")
	flags := append(crashInput, conn("outputs.stomp")...)
	flags = append(flags, "--outputs.stomp.enabled=true", "--outputs.stomp.destinations.records=/amq/queue/"+outQ)
	rng := rand.New(rand.NewPCG(seed, 0x73746f6d70))
	midStream := 0
	for k := 1; k <= kills; k++ {
		c := startCollector(t, crashDir, crashLog, flags...)
		up := 200*time.Millisecond + time.Duration(rng.Int64N(int64(1300*time.Millisecond))) // 6 runs at most 9 s: less than the stream takes
		time.Sleep(up)
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
	// The last runs have no kill to survive: they drain the rest of the
	// stream at the input's default prefetch, as the clean run does (the
	// same store, the same output: only checkpoints further apart).
	drainFlags := append(input(qCrash), conn("outputs.stomp")...)
	drainFlags = append(drainFlags, "--outputs.stomp.enabled=true", "--outputs.stomp.destinations.records=/amq/queue/"+outQ)
	for run := 0; ; run++ {
		c := startCollector(t, crashDir, crashLog, drainFlags...)
		waitDrainedBy(t, c, url, qCrash, 5*time.Minute, received)
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
	waitDrainedBy(t, cleanC, url, qClean, 5*time.Minute, received)
	if err := cleanC.stop(30 * time.Second); err != nil {
		t.Fatalf("clean run: %v\n%s", err, tail(cleanC.log, 20))
	}
	if n := queueDepth(t, url, qClean); n != 0 {
		t.Fatalf("clean run left %d messages unacknowledged", n)
	}
	tClean := time.Since(t1)

	cleanRecs, cleanEvs := storeContents(t, cleanDir)
	crashRecs, crashEvs := storeContents(t, crashDir)
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
	checkTruth(t, crashRecs, truth)
	checkEvents(t, crashEvs, truth)

	msgs := drainQueueHeader(t, url, outQ, "xrdmon-id")
	outMissing, ex3 := setDiff(crashRecs, msgs)
	outExtra, ex4 := setDiff(msgs, crashRecs)
	outTotal := 0
	for _, n := range msgs {
		outTotal += n
	}
	if outMissing != 0 || outExtra != 0 {
		t.Errorf("STOMP output: %d stored records never sent (e.g. %s), %d sent records not stored (e.g. %s)", outMissing, ex3, outExtra, ex4)
	}
	t.Logf("RESULT kill9-stomp: seed %d, %d messages, %d kills (%d mid-stream); records: clean %d, crash %d, truth %d; lost %d, extra %d, differing %d; events %d; STOMP output %d messages for %d records",
		seed, truth.Emitted, kills, midStream, len(cleanRecs), len(crashRecs), len(truth.Records), lost, extra, differ, len(crashEvs), outTotal, len(msgs))
	t.Logf("RESULT kill9-stomp: time: clean run %s (beside the crash run), crash run %s, total %s",
		tClean.Round(time.Second), tCrash.Round(time.Second), time.Since(t0).Round(time.Second))
}

// declareQueue declares a durable queue, deleted at the end of the test.
func declareQueue(t *testing.T, url, queue string) {
	t.Helper()
	ch := amqpChannel(t, url)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAMQP(url, nil, []string{queue}) })
}

// drainQueueHeader consumes every message of queue and returns how many
// carried each value of header (RabbitMQ's STOMP plugin keeps a SEND's
// own headers as AMQP headers).
func drainQueueHeader(t *testing.T, url, queue, header string) map[string]int {
	t.Helper()
	conn, ch, q := inspectQueue(t, url, queue)
	defer conn.Close()
	if err := ch.Qos(2000, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := make(map[string]int, q.Messages)
	for n := 0; n < q.Messages; n++ {
		select {
		case d := <-ds:
			id, _ := d.Headers[header].(string)
			if id == "" {
				t.Fatalf("message without %s: %s", header, d.Body)
			}
			ids[id]++
		case <-time.After(15 * time.Second):
			t.Fatalf("queue %s: got %d of %d messages", queue, n, q.Messages)
		}
	}
	return ids
}
