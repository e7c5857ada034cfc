//go:build crash

package crash

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // PRAGMA integrity_check on the store
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// xrdmonBin is the collector binary built by TestMain.
var xrdmonBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "xrdmon-crash-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash tests:", err)
		os.Exit(1)
	}
	xrdmonBin = filepath.Join(dir, "xrdmon")
	// The go command running the tests is first on PATH (go test puts
	// GOROOT/bin there).
	build := exec.Command("go", "build", "-o", xrdmonBin, "github.com/xrdmon/xrdmon/cmd/xrdmon")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "crash tests: build xrdmon:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "crash tests: built %s in %s\n", xrdmonBin, time.Since(start).Round(time.Millisecond))
	code := m.Run()
	for i := len(packageCleanups) - 1; i >= 0; i-- {
		packageCleanups[i]()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// packageCleanups run after the last test of the package, last added
// first: they release what tests share (the cluster tests' clean runs).
var packageCleanups []func()

// packageCleanup adds f to packageCleanups.
func packageCleanup(f func()) { packageCleanups = append(packageCleanups, f) }

// amqpHostPort returns the broker's host:port from its URL.
func amqpHostPort(t testing.TB, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("parse amqp url: %v", err)
	}
	if pu.Port() == "" {
		return net.JoinHostPort(pu.Hostname(), "5672")
	}
	return pu.Host
}

func freeTCPPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func freeUDPAddr(t testing.TB) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// collector is one xrdmon collect process.
type collector struct {
	t     testing.TB
	cmd   *exec.Cmd
	http  string
	log   string // file that receives the process's stderr (appended)
	done  chan struct{}
	err   error // exit status, once done is closed
	start time.Time
}

// startCollector starts `xrdmon collect` on the store in storeDir with the
// given extra flags, logging (JSON) to logPath, and waits until it serves
// HTTP. The process is SIGKILLed at the end of the test if still running.
func startCollector(t testing.TB, storeDir, logPath string, flags ...string) *collector {
	t.Helper()
	c, err := startCollectorErr(t, storeDir, logPath, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startCollectorErr is startCollector returning its failure (for a
// goroutine that restarts collectors as systemd would).
func startCollectorErr(t testing.TB, storeDir, logPath string, flags ...string) (*collector, error) {
	c := &collector{t: t, http: fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), log: logPath, done: make(chan struct{})}
	args := append([]string{"collect",
		"--http.address=" + c.http,
		"--store.path=" + storeDir,
		"--store.retention=0", // loadgen's simulated times are in the past
		"--dns.enabled=false",
		"--log.format=json",
	}, flags...)
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(lf, "### %s start %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	c.cmd = exec.Command(xrdmonBin, args...)
	c.cmd.Stdout, c.cmd.Stderr = lf, lf
	c.start = time.Now()
	if err := c.cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start collector: %w", err)
	}
	go func() {
		c.err = c.cmd.Wait()
		lf.Close()
		close(c.done)
	}()
	t.Cleanup(func() { c.kill() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-c.done:
			return nil, fmt.Errorf("collector exited at start (%v); log:\n%s", c.err, tail(logPath, 30))
		default:
		}
		if resp, err := http.Get("http://" + c.http + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return c, nil
			}
		}
		if time.Now().After(deadline) {
			c.kill()
			return nil, fmt.Errorf("collector not serving HTTP after 30s; log:\n%s", tail(logPath, 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether the process has not exited.
func (c *collector) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *collector) kill() {
	if c.running() {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-c.done
}

// stop sends SIGTERM and waits up to timeout for a clean exit.
func (c *collector) stop(timeout time.Duration) error {
	c.t.Helper()
	if !c.running() {
		return fmt.Errorf("collector already exited: %v", c.err)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.err
	case <-time.After(timeout):
		c.kill()
		return fmt.Errorf("collector did not stop within %s after SIGTERM", timeout)
	}
}

var sampleRE = regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$`)

// metrics scrapes /metrics into a map from "name" or "name{labels}" to value.
func (c *collector) metrics() (map[string]float64, error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + c.http + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64)
	for _, m := range sampleRE.FindAllSubmatch(body, -1) {
		if v, err := strconv.ParseFloat(string(m[2]), 64); err == nil {
			out[string(m[1])] = v
		}
	}
	return out, nil
}

// metric returns one series (0 when absent); it fails the test if /metrics
// does not answer.
func (c *collector) metric(series string) float64 {
	c.t.Helper()
	m, err := c.metrics()
	if err != nil {
		c.t.Fatalf("scrape metrics: %v", err)
	}
	return m[series]
}

// sumPrefix adds every series of m whose name (before labels) is name.
func sumPrefix(m map[string]float64, name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// grepLog returns the lines of the log file containing every one of subs.
func grepLog(path string, subs ...string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		for _, s := range subs {
			if !strings.Contains(sc.Text(), s) {
				continue next
			}
		}
		out = append(out, sc.Text())
	}
	return out
}

// waitFor polls cond every interval until it is true or timeout passes.
func waitFor(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

// storeContents reads every record and event of the store in dir (the
// collector must be stopped), keyed by record_id and event_id.
func storeContents(t testing.TB, dir string) (map[string]record.Record, map[string]bool) {
	t.Helper()
	o := store.DefaultOptions()
	o.Path = filepath.Join(dir, "xrdmon.db")
	o.Retention = 0
	o.MaxBytes = 0
	st, err := store.Open(o, nil, nil)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	defer st.Close()
	out := make(map[string]record.Record)
	evs := make(map[string]bool)
	var after int64
	for {
		es, err := st.Read(context.Background(), after, 5000)
		if err != nil {
			t.Fatalf("read store: %v", err)
		}
		if len(es) == 0 {
			return out, evs
		}
		for _, e := range es {
			if e.Event != nil {
				if evs[e.Event.EventID] {
					t.Errorf("store holds event_id %s twice", e.Event.EventID)
				}
				evs[e.Event.EventID] = true
			}
			if e.Record != nil {
				if _, dup := out[e.Record.RecordID]; dup {
					t.Errorf("store holds record_id %s twice", e.Record.RecordID)
				}
				out[e.Record.RecordID] = *e.Record
			}
			after = e.Seq
		}
	}
}

// integrityCheck runs PRAGMA integrity_check on the store in dir.
func integrityCheck(t testing.TB, dir string) string {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "xrdmon.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var res []string
	rows, err := db.Query("PRAGMA integrity_check")
	if err != nil {
		t.Fatalf("integrity_check: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		res = append(res, s)
	}
	return strings.Join(res, "; ")
}

// truthKey identifies one file access independently of the record_id,
// which the truth does not know.
func truthKey(r *record.Record) string {
	return fmt.Sprintf("%s/%d/%d/%d", r.ServerIP, r.ServerStod, r.ServerID, r.FileID)
}

// comparable drops the fields that depend on the collector's clock and on
// reverse DNS.
func comparable(r record.Record) record.Record {
	r.Received, r.ClientName = time.Time{}, ""
	return r
}

// checkTruth compares stored records with loadgen's truth (lossless runs):
// the same file accesses, with the same bytes, and no partial record.
func checkTruth(t testing.TB, got map[string]record.Record, truth *loadgen.Truth) {
	t.Helper()
	want := make(map[string]*record.Record, len(truth.Records))
	for i := range truth.Records {
		want[truthKey(&truth.Records[i])] = &truth.Records[i]
	}
	bad := 0
	for _, g := range got {
		k := truthKey(&g)
		w, ok := want[k]
		switch {
		case !ok:
			t.Errorf("record %s (%s) not in the truth", g.RecordID, k)
			bad++
		case g.ReadBytes != w.ReadBytes || g.ReadvBytes != w.ReadvBytes || g.WriteBytes != w.WriteBytes ||
			g.Reason != w.Reason || g.User != w.User || g.Path != w.Path:
			t.Errorf("record %s differs from the truth:\n got %+v\nwant %+v", k, g, *w)
			bad++
		}
		delete(want, k)
		if bad > 5 {
			t.Fatal("too many differences from the truth")
		}
	}
	for k := range want {
		t.Errorf("truth record %s missing", k)
		if bad++; bad > 5 {
			t.Fatal("too many records missing")
		}
	}
}

// checkEvents compares the number of stored g-stream events with loadgen's
// truth (lossless runs): every event a server sent is stored, once.
func checkEvents(t testing.TB, got map[string]bool, truth *loadgen.Truth) {
	t.Helper()
	var want int64
	for _, n := range truth.Events {
		want += n
	}
	if int64(len(got)) != want {
		t.Errorf("%d g-stream events stored, the truth has %d", len(got), want)
	}
}

// publish runs loadgen into a fresh fanout exchange bound to the given
// (fresh, durable) queues, so each queue gets the same messages. Exchange
// and queues are deleted at the end of the test.
func publish(t testing.TB, url string, cfg loadgen.Config, queues ...string) *loadgen.Truth {
	t.Helper()
	exchange := testenv.Uniq("xrdmon-crash-in")
	ch := amqpChannel(t, url)
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		declareBound(t, url, exchange, q)
	}
	t.Cleanup(func() { deleteAMQP(url, []string{exchange}, queues) })
	g, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := loadgen.NewAMQP(loadgen.AMQPConfig{URL: url, Exchange: exchange, Batch: 4096})
	if err != nil {
		t.Fatal(err)
	}
	truth, err := g.Run(context.Background(), out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("loadgen to RabbitMQ: %v", err)
	}
	if out.Published != truth.Emitted {
		t.Fatalf("loadgen: %d messages confirmed, %d emitted", out.Published, truth.Emitted)
	}
	return truth
}

// amqpChannel returns a channel on a connection of its own to url, both
// closed at the end of the test.
func amqpChannel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("amqp dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// declareBound declares a durable queue bound to exchange.
func declareBound(t testing.TB, url, exchange, queue string) {
	t.Helper()
	ch := amqpChannel(t, url)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
}

// deleteAMQP deletes exchanges and queues, best effort (used in cleanups,
// possibly after the broker was restarted).
func deleteAMQP(url string, exchanges, queues []string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, q := range queues {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	for _, e := range exchanges {
		_ = ch.ExchangeDelete(e, false, false)
	}
}

// queueDepth returns the ready messages of a queue (unacknowledged ones
// are not counted by the broker's declare-ok).
func queueDepth(t testing.TB, url, queue string) int {
	t.Helper()
	conn, _, q := inspectQueue(t, url, queue)
	conn.Close()
	return q.Messages
}

// inspectQueue connects and reads the queue's state; the caller closes conn.
func inspectQueue(t testing.TB, url, queue string) (*amqp.Connection, *amqp.Channel, amqp.Queue) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("amqp dial: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		conn.Close()
		t.Fatalf("inspect queue %s: %v", queue, err)
	}
	return conn, ch, q
}

// drainQueue consumes every message of queue and returns how many carried
// each message id.
func drainQueue(t testing.TB, url, queue string) map[string]int {
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
			if d.MessageId == "" {
				t.Fatalf("message without id: %s", d.Body)
			}
			ids[d.MessageId]++
		case <-time.After(15 * time.Second):
			t.Fatalf("queue %s: got %d of %d messages", queue, n, q.Messages)
		}
	}
	return ids
}

// waitPort waits until addr accepts TCP connections.
func waitPort(addr string, timeout time.Duration) bool {
	return waitFor(timeout, 200*time.Millisecond, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// run runs a command and returns its combined output.
func run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), err
}

// setDiff returns how many keys of a are missing from b, and one example.
func setDiff[A, B any](a map[string]A, b map[string]B) (int, string) {
	n, ex := 0, ""
	for k := range a {
		if _, ok := b[k]; !ok {
			n++
			if ex == "" {
				ex = k
			}
		}
	}
	return n, ex
}
