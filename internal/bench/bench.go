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
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xrdmon/xrdmon/internal/loadgen"
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
	// Progress, if set, receives a line per step as it finishes.
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
	steps, err := cfg.Scenario.Steps()
	if err != nil {
		return nil, err
	}
	d := DefaultConfig()
	if cfg.Poll <= 0 {
		cfg.Poll = d.Poll
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = d.Quiet
	}
	if cfg.MaxSettle <= 0 {
		cfg.MaxSettle = d.MaxSettle
	}
	if cfg.StepDuration <= 0 {
		cfg.StepDuration = d.StepDuration
	}
	if cfg.Packets <= 0 {
		cfg.Packets = d.Packets
	}
	if cfg.WorkDir == "" {
		if cfg.WorkDir, err = os.MkdirTemp("", "xrdmon-bench-"); err != nil {
			return nil, fmt.Errorf("bench work dir: %w", err)
		}
	}
	var rows []Row
	for i, st := range steps {
		row, err := runStep(ctx, cfg, i, st, log)
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
	select {
	case <-p.done:
		return true
	default:
		return false
	}
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

func runStep(ctx context.Context, cfg Config, idx int, st loadgen.Step, log *slog.Logger) (Row, error) {
	row := Row{Step: st.Name, Value: st.Value, Servers: st.Config.Servers, Clients: st.Config.Clients, SeqGaps: -1, Null: cfg.Target.Null}
	name := fmt.Sprintf("%02d-%s", idx, sanitize(st.Name))
	dir := filepath.Join(cfg.WorkDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return row, fmt.Errorf("step dir: %w", err)
	}
	udpPort, httpPort, err := freePorts()
	if err != nil {
		return row, err
	}
	vars := map[string]string{
		"udp_port": strconv.Itoa(udpPort), "udp_addr": "127.0.0.1:" + strconv.Itoa(udpPort),
		"http_port": strconv.Itoa(httpPort), "dir": dir,
	}
	base := "http://127.0.0.1:" + vars["http_port"]
	hc := &http.Client{Timeout: 5 * time.Second}

	gcfg := st.Config
	gcfg.KeepRecords = false
	gcfg.Duration = 0
	gcfg.Count = cfg.Packets
	if gcfg.Rate > 0 {
		gcfg.Count = int64(gcfg.Rate * cfg.StepDuration.Seconds())
	}
	gen, err := loadgen.New(gcfg)
	if err != nil {
		return row, err
	}
	m := newMatcher(time.Now(), cfg.Target.MatchByPath)
	if !cfg.Target.Null {
		gen.SetHooks(loadgen.Hooks{Record: m.add, Sent: m.sent})
	}
	udp, err := loadgen.NewUDP(vars["udp_addr"])
	if err != nil {
		return row, err
	}
	defer udp.Close()
	if cfg.SendWorkers > 0 {
		udp.Workers = cfg.SendWorkers
	}
	var pg *loadgen.Pregenerated
	var truth *loadgen.Truth
	if cfg.Pregenerate {
		t0 := time.Now()
		if pg, truth, err = gen.Pregenerate(ctx, udp, cfg.PregenerateMax); err != nil {
			return row, fmt.Errorf("pregenerate: %w", err)
		}
		log.Info("Pregenerated", "step", st.Name, "packets", pg.Len(), "bytes", pg.Bytes(), "memory", pg.Size(),
			"took", time.Since(t0).Round(time.Millisecond))
	}

	logPath := filepath.Join(cfg.WorkDir, name+".log")
	proc, err := startCollector(cfg.Target, vars, logPath)
	if err != nil {
		return row, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = proc.stop(5 * time.Second)
		}
	}()
	if err := waitReady(ctx, proc, cfg.Target, udpPort, base, hc); err != nil {
		return row, fmt.Errorf("%w; collector log:\n%s", err, lastLines(logPath, 10))
	}
	var src RecordSource = nullSource{}
	if !cfg.Target.Null {
		if src, err = newSource(cfg.Target, vars); err != nil {
			return row, err
		}
	}
	defer src.Close()
	pid := proc.cmd.Process.Pid
	before, err := sampleTree(pid)
	if err != nil {
		return row, err
	}
	drops0 := udpPortStats(udpPort).Drops
	var m0 metricSums
	if cfg.Target.Xrdmon {
		if m0, err = scrape(ctx, hc, base+"/metrics"); err != nil {
			return row, err
		}
	}

	start := time.Now()
	m.start = start // nothing reads it before the poller starts
	cpu0 := selfCPU()

	// Follow the records while sending.
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	var pollWG sync.WaitGroup
	var pollErr error
	var lastNew time.Time
	var lastMu sync.Mutex
	pollWG.Go(func() {
		tk := time.NewTicker(cfg.Poll)
		defer tk.Stop()
		for {
			obs, err := src.Poll(pollCtx)
			now := time.Now()
			grew := len(obs) > 0
			if p, ok := src.(progresser); ok {
				grew = p.Progressed()
			}
			if len(obs) > 0 {
				m.observe(obs, now, false)
			}
			if grew {
				lastMu.Lock()
				lastNew = now
				lastMu.Unlock()
			}
			if err != nil && pollCtx.Err() == nil {
				lastMu.Lock()
				pollErr = err
				lastMu.Unlock()
				return
			}
			select {
			case <-pollCtx.Done():
				return
			case <-tk.C:
			}
		}
	})

	var profDone chan struct{}
	if cfg.Profile > 0 && cfg.Target.Xrdmon {
		profDone = make(chan struct{})
		row.Profile = filepath.Join(cfg.WorkDir, name+".pprof")
		go func() {
			defer close(profDone)
			wait := max(cfg.StepDuration-cfg.Profile, 0) / 2
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
			if err := fetchProfile(ctx, base, cfg.Profile, row.Profile); err != nil {
				log.Warn("CPU profile failed", "step", st.Name, "err", err)
			}
		}()
	}

	var runErr error
	if pg != nil {
		runErr = pg.Send(ctx)
	} else {
		truth, runErr = gen.Run(ctx, udp)
	}
	sendEnd := time.Now()
	row.SenderCPU = selfCPU() - cpu0
	_ = udp.Close()
	if pg != nil {
		pg = nil
		debug.FreeOSMemory() // give the step's packets back before the next
	}
	if runErr != nil {
		stopPoll()
		pollWG.Wait()
		return row, fmt.Errorf("send: %w", runErr)
	}
	row.Sent = udp.Sent
	row.SendTime = sendEnd.Sub(start)
	row.Offered = float64(row.Sent) / row.SendTime.Seconds()
	if row.Sent > 0 {
		row.SenderCPUPer100k = row.SenderCPU.Seconds() / float64(row.Sent) * 1e5
	}
	countFile := filepath.Join(dir, nullCountFile)

	// Settle: wait for the records (and, for xrdmon, the packet counters).
	settleEnd := sendEnd.Add(cfg.MaxSettle)
	lastGrowth, prevScrape := sendEnd, sendEnd
	var lastAccounted float64 = -1
	var mEnd metricSums
	for {
		now := time.Now()
		lastMu.Lock()
		quietSince, perr := lastNew, pollErr
		lastMu.Unlock()
		quietSince = later(quietSince, sendEnd)
		stable := true
		if cfg.Target.Null {
			// The receiver does nothing: it is done once every datagram
			// is received or dropped, or nothing new came for Quiet.
			got, _ := readNullCount(countFile)
			if got+udpPortStats(udpPort).Drops-drops0 >= row.Sent {
				break
			}
			if got != row.Received {
				row.Received, lastGrowth = got, now
			}
			stable = now.Sub(lastGrowth) >= cfg.Quiet
		}
		if cfg.Target.Xrdmon {
			ms, err := scrape(ctx, hc, base+"/metrics")
			if err == nil {
				mEnd = ms
				// The last packet was handled between the previous scrape
				// and this one; the previous (a lower bound) is kept.
				acc := ms.get("xrdmon_packets_total")
				switch {
				case lastAccounted < 0: // the first scrape after sending
					lastAccounted = acc
				case acc != lastAccounted:
					lastAccounted, lastGrowth = acc, prevScrape
				}
				prevScrape = now
			}
			stable = stable && now.Sub(lastGrowth) >= cfg.Quiet
		}
		if perr != nil || now.After(settleEnd) || ctx.Err() != nil {
			break
		}
		if m.pending() == 0 && stable {
			break
		}
		if now.Sub(quietSince) >= cfg.Quiet && stable {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if profDone != nil {
		<-profDone
	}
	after, err := sampleTree(pid)
	if err != nil {
		return row, err
	}
	drops1 := udpPortStats(udpPort).Drops
	stopPoll()
	pollWG.Wait()
	if pollErr != nil {
		return row, pollErr
	}
	stopErr := proc.stop(60 * time.Second)
	stopped = true
	if stopErr != nil {
		log.Warn("Collector stop", "step", st.Name, "err", stopErr)
	}
	// Records made durable at shutdown count for the check, not the latency.
	if d, ok := src.(drainer); ok {
		groups, err := d.Drain(ctx)
		if err != nil {
			return row, err
		}
		row.EventsStored = d.Events()
		for _, g := range groups {
			m.observe(g.obs, g.at, g.late)
		}
	} else {
		row.EventsStored = -1
		if obs, err := src.Poll(ctx); err == nil {
			m.observe(obs, time.Now(), true)
		}
	}
	for _, n := range truth.Events {
		row.EventsExpected += n
	}

	row.KernelDrops = drops1 - drops0
	if cfg.Target.Null {
		got, ok := readNullCount(countFile)
		if !ok {
			return row, errors.New("null receiver wrote no count")
		}
		row.Received = got
	}
	row.CPU = after.CPU - before.CPU
	row.PeakRSS = after.PeakRSS
	if row.Sent > 0 {
		row.CPUPer100k = row.CPU.Seconds() / float64(row.Sent) * 1e5
	}
	lost := row.KernelDrops
	accounted := float64(row.Sent - row.KernelDrops)
	accTime := row.SendTime
	if cfg.Target.Xrdmon && mEnd.byName != nil {
		row.SeqGaps = int64(mEnd.get("xrdmon_packets_lost_total") - m0.get("xrdmon_packets_lost_total"))
		handled := mEnd.get("xrdmon_packets_total") - m0.get("xrdmon_packets_total")
		accounted = mEnd.series(`xrdmon_packets_total{outcome="accounted"}`) - m0.series(`xrdmon_packets_total{outcome="accounted"}`)
		lost = max(row.Sent-int64(handled), row.SeqGaps, row.KernelDrops, 0)
		accTime = max(accTime, lastGrowth.Sub(start))
	}
	if cfg.Target.Null {
		accounted = float64(row.Received)
		lost = max(row.Sent-row.Received, row.KernelDrops, 0)
	}
	row.Accepted = accounted / accTime.Seconds()
	if row.Sent > 0 {
		row.LossPct = 100 * float64(lost) / float64(row.Sent)
	}
	var lat []time.Duration
	row.Check, lat = m.result()
	row.Latencies = len(lat)
	row.LatencyP50, row.LatencyP99 = percentile(lat, 50), percentile(lat, 99)
	log.Info("Step done", "step", st.Name, "sent", row.Sent, "offered", int(row.Offered), "loss_pct", row.LossPct,
		"missing", row.Missing, "events", row.EventsStored, "events_expected", row.EventsExpected, "late", m.late, "reasons", truth.Reasons)
	return row, nil
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
