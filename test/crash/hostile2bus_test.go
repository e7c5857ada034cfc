//go:build crash

package crash

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// TestHostileInputRoundTwoRouterOversized is finding #11 of issue 25
// against the real binary: `xrdmon bus route` republished messages far over
// what a collector takes (ten of 60 MB made it peak at 929 MB and filled a
// shard queue with 629 MB before the collector rejected them). The router
// now drops and counts them (xrdmon_bus_oversized_total) and routes the
// others: the shard queues hold exactly the well-formed messages.
func TestHostileInputRoundTwoRouterOversized(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	id := testenv.Uniq("xrdmon-crash-oversized")
	flags := []string{"--url", url, "--shards", "2", "--exchange", id + ".shards", "--queue-prefix", id + ".shard.",
		"--from", id + ".from", "--route-queue", id + ".route"}
	queues := []string{id + ".route", id + ".shard.00", id + ".shard.01"}
	t.Cleanup(func() { deleteAMQP(url, []string{id + ".shards", id + ".from"}, queues) })
	if out, err := exec.Command(xrdmonBin, append([]string{"bus", "setup", "--declare-from", "fanout"}, flags...)...).CombinedOutput(); err != nil {
		if strings.Contains(string(out), "x-consistent-hash") {
			testenv.Unavailable(t, string(out))
		}
		t.Fatalf("bus setup: %v\n%s", err, out)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	logPath := filepath.Join(t.TempDir(), "router.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	router := exec.Command(xrdmonBin, append([]string{"bus", "route", "--http", httpAddr}, flags...)...)
	router.Stdout, router.Stderr = lf, lf
	if err := router.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = router.Process.Kill(); _ = router.Wait(); lf.Close() })
	r := &collector{t: t, cmd: router, http: httpAddr}

	ch := amqpChannel(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Ten messages of 16 MB (over the collector's bound of
	// source.MaxShovelerMessage), each between well-formed ones.
	const big, small = 10, 11
	huge := bytes.Repeat([]byte("A"), 16<<20)
	for i := range small {
		body := fmt.Appendf(nil, `{"remote":"192.0.2.%d:1094","data":"AAAA"}`, i+1)
		if err := ch.PublishWithContext(ctx, id+".from", "", false, false, amqp.Publishing{Body: body}); err != nil {
			t.Fatal(err)
		}
		if i < big {
			if err := ch.PublishWithContext(ctx, id+".from", "", false, false, amqp.Publishing{Body: huge}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(huge) <= source.MaxShovelerMessage {
		t.Fatalf("test message of %d bytes is within the bound %d", len(huge), source.MaxShovelerMessage)
	}
	waiting := func() (int, int) {
		n, route := 0, 0
		for _, q := range queues {
			st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			if err != nil {
				t.Fatalf("queue %s: %v", q, err)
			}
			if q == id+".route" {
				route = st.Messages
			} else {
				n += st.Messages
			}
		}
		return n, route
	}
	var routed, left int
	var dropped float64
	if !waitFor(time.Minute, 50*time.Millisecond, func() bool {
		routed, left = waiting()
		if m, err := r.metrics(); err == nil {
			dropped = m["xrdmon_bus_oversized_total"]
		}
		return left == 0 && routed == small && dropped == big
	}) {
		t.Fatalf("after a minute: %d messages in the shard queues (want %d), %d left to route, %v counted oversized (want %d)\nrouter log:\n%s",
			routed, small, left, dropped, big, tail(logPath, 20))
	}
	// Nothing but the well-formed messages reached the shards.
	for _, q := range queues[1:] {
		for {
			m, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if len(m.Body) > source.MaxShovelerMessage {
				t.Errorf("a message of %d bytes reached %s", len(m.Body), q)
			}
		}
	}
	peak := status(t, router.Process.Pid, "VmHWM")
	t.Logf("RESULT hostile round two #11: %d messages of %d MB dropped and counted by the router, %d well-formed routed, router peak RSS %d MB",
		big, len(huge)>>20, routed, peak>>20)
}
