// Package bench measures a collector end to end: for each step of a
// scenario it starts the collector as a process, sends it a simulated
// XRootD workload (internal/loadgen) over UDP at a paced rate, follows the
// records it makes durable and compares them with the ground truth, and
// reports the rate it accepted, the loss, CPU and memory, and the latency
// from a file's close packet to its durable record.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/signal"
)

// Target is the collector under test, started afresh for every step.
//
// Command and the record locations may hold placeholders, replaced per
// step: {udp_port} and {udp_addr} (127.0.0.1:port) where the collector
// must listen, {http_port} a free TCP port, {dir} a fresh empty directory.
type Target struct {
	// Command is the collector's argv.
	Command []string
	// Env is added to the collector's environment.
	Env []string
	// Xrdmon says the target is `xrdmon collect` with --http.address at
	// {http_port}: its readiness, loss and accepted packets are read from
	// its /readyz and /metrics, and pprof is available there.
	Xrdmon bool
	// Where the collector's records appear; exactly one is used, in this
	// order: Store (xrdmon's SQLite store file), JSONL (a JSON-lines file
	// it appends to), AMQPURL+AMQPQueue (a queue it publishes to).
	Store     string
	JSONL     string
	AMQPURL   string
	AMQPQueue string
	// MatchByPath matches records by (server IP, path) when they carry no
	// server start time and file id (GRACC records).
	MatchByPath bool
	// Null says the target is the null receiver (NullTarget): it writes no
	// records, only the count of datagrams it received, to
	// {dir}/received.
	Null bool
}

// XrdmonTarget returns the target for `exe collect` on loopback ports with
// a fresh store in {dir} without retention (the simulated times are in the
// past: retention would delete the records before they are checked) and DNS
// off.
func XrdmonTarget(exe string) Target {
	return Target{
		Command: []string{exe, "collect",
			"--listen.udp={udp_addr}", "--http.address=127.0.0.1:{http_port}", "--http.pprof=true",
			"--store.path={dir}", "--store.retention=0", "--dns.enabled=false", "--log.level=warn"},
		Xrdmon: true,
		Store:  "{dir}/xrdmon.db",
	}
}

// Config is a benchmark run.
type Config struct {
	Scenario loadgen.Scenario
	Target   Target
	// StepDuration is the real time each step sends for; with a rate the
	// step sends Rate*StepDuration packets.
	StepDuration time.Duration
	// Packets is the packets sent per step when the step's rate is 0 (as
	// fast as possible).
	Packets int64
	// Quiet ends the wait for records after the step: once every expected
	// record is seen, or nothing new arrived for Quiet; MaxSettle bounds it.
	Quiet     time.Duration
	MaxSettle time.Duration
	// Poll is how often records are looked for (the latency resolution).
	Poll time.Duration
	// WorkDir holds the steps' directories and collector logs.
	WorkDir string
	// Profile, for an xrdmon target, takes a CPU profile of this many
	// seconds in the middle of each step and writes it to
	// WorkDir/<step>.pprof.
	Profile time.Duration
	// Progress, if set, receives a line per step as it finishes, and, on a
	// terminal, a line redrawn in place while it runs (packets sent, then
	// records seen, of the step's total, the rate and the time left).
	Progress io.Writer
	// StopOnLoss ends the scenario after the first step with loss (a
	// rate ramp "until loss appears").
	StopOnLoss bool
	// Pregenerate generates each step's packets (and its truth) before
	// starting the collector, and then only sends them: the sender then
	// costs little more than the kernel's work. It holds the step's
	// packets in memory (~285 bytes each with the default mix), at most
	// PregenerateMax bytes (0: loadgen.DefaultPregenerateMax).
	Pregenerate    bool
	PregenerateMax int64
	// SendWorkers is the most goroutines sending at once (0: GOMAXPROCS).
	SendWorkers int
}

// DefaultConfig returns 10 s steps, a 2 s quiet period bounded by 60 s,
// and a 50 ms poll.
func DefaultConfig() Config {
	return Config{StepDuration: 10 * time.Second, Packets: 1_000_000, Quiet: 2 * time.Second,
		MaxSettle: 60 * time.Second, Poll: 50 * time.Millisecond}
}

// Row is the result of one step.
type Row struct {
	Step        string
	Value       float64       // the scenario parameter's value
	Servers     int           //
	Clients     int           // per server
	Sent        int64         // datagrams sent
	SendTime    time.Duration // real time spent sending
	Offered     float64       // packets/s sent
	Accepted    float64       // packets/s the collector accounted for
	SeqGaps     int64         // packets the collector counted lost (sequence gaps); -1 unknown
	KernelDrops int64         // datagrams the kernel dropped at the collector's socket
	LossPct     float64       // lost packets, % of Sent
	CPU         time.Duration // collector CPU (user+system) during the step
	CPUPer100k  float64       // CPU seconds per 100,000 packets
	PeakRSS     int64         // bytes
	LatencyP50  time.Duration // close packet sent -> record durable
	LatencyP99  time.Duration
	Latencies   int // records timed
	Check
	Profile string `json:"-"` // CPU profile path, if taken
	// Null marks a null target's row: Received is the datagrams it
	// received, and there are no records (Check and latencies are zero).
	Null     bool
	Received int64
	// SenderCPU is the bench process's CPU (user+system) while sending:
	// the generator unless pregenerated, the sending and the kernel's
	// work in the sender's context, and the record polling.
	SenderCPU        time.Duration
	SenderCPUPer100k float64
	// EventsExpected are the g-stream events the generator sent (its
	// truth); EventsStored those in xrdmon's store after the step (-1: the
	// target's records are not read from a store).
	EventsExpected, EventsStored int64
	// RollupsCaughtUp is how long after the last packet was sent the
	// xrdmon target's rollups had summed its whole log (they yield to a
	// busy input and catch up after; the step's CPU is sampled then, so
	// it counts their work); -1: unknown (no rollups, another collector,
	// or not within MaxSettle).
	RollupsCaughtUp time.Duration
	// RollupsReadBack is the entries the xrdmon target's rollups read back
	// from the store's log during the step instead of being fed them
	// (xrdmon_rollup_read_back_total: batches dropped while they were
	// behind; each costs about twice a fed one); -1: unknown.
	RollupsReadBack int64
	// SimSpeed is the simulated seconds the step's packets cover per
	// real second of sending: how much faster than a real server's the
	// loadgen's clock runs at the offered rate (thousands of times with a
	// few servers, hundreds with a thousand). Time-bucketed work (the
	// rollups' minutes, their flushes and merges) sees this many minutes
	// a minute, which a collector fed in real time does not.
	SimSpeed float64
}

// Validate reports a time or a count of cfg that is not positive (start
// from DefaultConfig: Run fills in no defaults).
func (cfg Config) Validate() error {
	for _, t := range []struct {
		flag string
		v    time.Duration
	}{{"step-duration", cfg.StepDuration}, {"quiet", cfg.Quiet}, {"max-settle", cfg.MaxSettle}, {"poll", cfg.Poll}} {
		if t.v <= 0 {
			return fmt.Errorf("bench: %s must be positive, not %s", t.flag, t.v)
		}
	}
	if cfg.Packets <= 0 {
		return fmt.Errorf("bench: packets must be positive, not %d", cfg.Packets)
	}
	return nil
}

// Run runs every step of the scenario in order and returns one row per
// step. A step that fails to start ends the run with the rows so far.
func Run(ctx context.Context, cfg Config, log *slog.Logger) ([]Row, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Target.Command) == 0 {
		return nil, errors.New("bench: no target command")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	steps, err := cfg.Scenario.Steps()
	if err != nil {
		return nil, err
	}
	if cfg.WorkDir == "" {
		if cfg.WorkDir, err = os.MkdirTemp("", "xrdmon-bench-"); err != nil {
			return nil, fmt.Errorf("bench work dir: %w", err)
		}
	}
	var rows []Row
	for i, st := range steps {
		row, err := runStep(ctx, cfg, i, len(steps), st, log)
		if err != nil {
			return rows, fmt.Errorf("step %s: %w", st.Name, err)
		}
		rows = append(rows, row)
		if cfg.Progress != nil {
			WriteTable(cfg.Progress, []Row{row}, i == 0)
		}
		if cfg.StopOnLoss && row.LossPct > 0 {
			break
		}
	}
	return rows, nil
}

// freePorts returns a free UDP port and a free TCP port on loopback.
func freePorts() (udpPort, tcpPort int, err error) {
	u, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return 0, 0, fmt.Errorf("find a udp port: %w", err)
	}
	udpPort = u.LocalAddr().(*net.UDPAddr).Port
	u.Close()
	t, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, 0, fmt.Errorf("find a tcp port: %w", err)
	}
	tcpPort = t.Addr().(*net.TCPAddr).Port
	t.Close()
	return udpPort, tcpPort, nil
}

// expand replaces the placeholders in s.
func expand(s string, vars map[string]string) string {
	for k, v := range vars {
		s = strings.ReplaceAll(s, "{"+k+"}", v)
	}
	return s
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, name)
}

// collectorProc is a started collector.
type collectorProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

func startCollector(t Target, vars map[string]string, logPath string) (*collectorProc, error) {
	argv := make([]string, len(t.Command))
	for i, a := range t.Command {
		argv[i] = expand(a, vars)
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create collector log: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = os.Environ()
	for _, e := range t.Env {
		cmd.Env = append(cmd.Env, expand(e, vars))
	}
	cmd.Dir = vars["dir"]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start collector %s: %w", argv[0], err)
	}
	p := &collectorProc{cmd: cmd, done: make(chan struct{}), log: lf}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *collectorProc) exited() bool {
	return signal.Closed(p.done)
}

// stop sends SIGTERM to the collector's process group and waits up to
// grace before killing it.
func (p *collectorProc) stop(grace time.Duration) error {
	defer p.log.Close()
	if p.exited() {
		return p.err
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("collector did not stop within %s: killed", grace)
	}
}

func lastLines(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitReady waits for the collector to listen on its UDP port and, for an
// xrdmon target, to answer /readyz.
func waitReady(ctx context.Context, p *collectorProc, t Target, udpPort int, base string, hc *http.Client) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("collector exited at start: %v", p.err)
		}
		ok := udpPortStats(udpPort).Bound
		if ok && t.Xrdmon {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
			resp, err := hc.Do(req)
			ok = err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("collector not ready after 60s")
}

func newSource(t Target, vars map[string]string) (RecordSource, error) {
	switch {
	case t.Store != "":
		return newStoreSource(expand(t.Store, vars)), nil
	case t.JSONL != "":
		return newJSONLSource(expand(t.JSONL, vars)), nil
	case t.AMQPURL != "" && t.AMQPQueue != "":
		return newAMQPSource(expand(t.AMQPURL, vars), expand(t.AMQPQueue, vars))
	}
	return nil, errors.New("target has no record location (store, JSON-lines file or AMQP queue)")
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fetchProfile saves a CPU profile of the xrdmon collector at base.
func fetchProfile(ctx context.Context, base string, d time.Duration, path string) error {
	secs := max(int(d.Seconds()), 1)
	c := &http.Client{Timeout: d + 30*time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), nil)
	if err != nil {
		return fmt.Errorf("profile request: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("fetch profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch profile: status %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create profile file: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("write profile: %w", err)
	}
	return f.Close()
}
