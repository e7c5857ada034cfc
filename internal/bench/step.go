package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/progress"
)

// step is one scenario step while it runs: where it writes, what it sends
// with, the collector under test and what was measured before sending.
type step struct {
	cfg  Config
	st   loadgen.Step
	log  *slog.Logger
	row  Row
	name string // the step's file name prefix in WorkDir
	dir  string // the step's directory ({dir})

	vars    map[string]string // the placeholders of Target
	udpPort int
	base    string // the xrdmon target's HTTP address
	hc      *http.Client

	// The sender.
	gen   *loadgen.Generator
	m     *matcher
	udp   *loadgen.UDP
	pg    *loadgen.Pregenerated // with Config.Pregenerate, until sent
	truth *loadgen.Truth

	// The collector and its records.
	proc    *collectorProc
	stopped bool // proc has been stopped
	src     RecordSource

	// Before sending.
	before procSample
	drops0 int64
	m0     metricSums
	start  time.Time

	// handled is the xrdmon target's packets handled in the step, as last
	// scraped after sending (for the progress line).
	handled atomic.Int64
}

// runStep runs one step: start the sender and the collector, send while
// following the collector's records, wait for them to settle, stop the
// collector, read the rest back and check them against the truth, and
// measure.
func runStep(ctx context.Context, cfg Config, idx, of int, st loadgen.Step, log *slog.Logger) (Row, error) {
	s, err := newStep(cfg, idx, st, log)
	if err != nil {
		return s.row, err
	}
	defer s.closeSender()
	if err := s.startSender(ctx); err != nil {
		return s.row, err
	}
	defer s.stopCollector(5 * time.Second)
	if err := s.startCollector(ctx); err != nil {
		return s.row, err
	}
	defer s.src.Close()
	if err := s.baseline(ctx); err != nil {
		return s.row, err
	}

	s.start = time.Now()
	s.m.start = s.start // nothing reads it before the poller starts
	cpu0 := selfCPU()
	p := startPoller(ctx, s.src, s.m, cfg.Poll)
	defer p.stop()
	profDone := s.startProfile(ctx)
	var settling atomic.Bool
	label := fmt.Sprintf("step %d/%d %s", idx+1, of, st.Name)
	stopProgress := progress.Start(cfg.Progress, func() progress.Sample {
		switch {
		case settling.Load() && cfg.Target.Xrdmon:
			return progress.Sample{Label: label + ": packets handled", Done: s.handled.Load(), Total: s.row.Sent}
		case settling.Load():
			seen, expected := s.m.progress()
			return progress.Sample{Label: label + ": records", Done: int64(seen), Total: int64(expected)}
		}
		return progress.Sample{Label: label + ": packets sent", Done: s.udp.SentSoFar(), Total: s.plannedPackets()}
	})
	defer stopProgress()
	sendEnd, err := s.send(ctx, cpu0)
	if err != nil {
		return s.row, err
	}
	settling.Store(!cfg.Target.Null) // a null target writes no records
	w := s.settle(ctx, p, sendEnd)
	stopProgress()
	if profDone != nil {
		<-profDone
	}
	after, err := sampleTree(s.proc.cmd.Process.Pid)
	if err != nil {
		return s.row, err
	}
	drops1 := udpPortStats(s.udpPort).Drops
	if err := p.stop(); err != nil {
		return s.row, err
	}
	if err := s.stopCollector(60 * time.Second); err != nil {
		log.Warn("Collector stop", "step", st.Name, "err", err)
	}
	if err := s.readBack(ctx); err != nil {
		return s.row, err
	}
	if err := s.measure(after, drops1, w); err != nil {
		return s.row, err
	}
	row := &s.row
	log.Info("Step done", "step", st.Name, "sent", row.Sent, "offered", int(row.Offered), "loss_pct", row.LossPct,
		"missing", row.Missing, "events", row.EventsStored, "events_expected", row.EventsExpected, "late", s.m.late, "reasons", s.truth.Reasons)
	return s.row, nil
}

// newStep makes the step's directory and picks its ports.
func newStep(cfg Config, idx int, st loadgen.Step, log *slog.Logger) (*step, error) {
	s := &step{cfg: cfg, st: st, log: log,
		row:  Row{Step: st.Name, Value: st.Value, Servers: st.Config.Servers, Clients: st.Config.Clients, SeqGaps: -1, RollupsCaughtUp: -1, RollupsReadBack: -1, Null: cfg.Target.Null},
		name: fmt.Sprintf("%02d-%s", idx, sanitize(st.Name)),
		hc:   &http.Client{Timeout: 5 * time.Second},
	}
	s.dir = filepath.Join(cfg.WorkDir, s.name)
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return s, fmt.Errorf("step dir: %w", err)
	}
	udpPort, httpPort, err := freePorts()
	if err != nil {
		return s, err
	}
	s.udpPort = udpPort
	s.vars = map[string]string{
		"udp_port": strconv.Itoa(udpPort), "udp_addr": "127.0.0.1:" + strconv.Itoa(udpPort),
		"http_port": strconv.Itoa(httpPort), "dir": s.dir,
	}
	s.base = "http://127.0.0.1:" + s.vars["http_port"]
	return s, nil
}

// plannedPackets is how many packets the step sends: Config.Packets, or
// the step's rate for Config.StepDuration.
func (s *step) plannedPackets() int64 {
	if s.st.Config.Rate > 0 {
		return int64(s.st.Config.Rate * s.cfg.StepDuration.Seconds())
	}
	return s.cfg.Packets
}

// startSender makes the step's generator (its records feed the matcher)
// and UDP output, and with Config.Pregenerate generates the packets.
func (s *step) startSender(ctx context.Context) error {
	cfg := &s.cfg
	gcfg := s.st.Config
	gcfg.KeepRecords = false
	gcfg.Duration = 0
	gcfg.Count = s.plannedPackets()
	gen, err := loadgen.New(gcfg)
	if err != nil {
		return err
	}
	s.gen = gen
	s.m = newMatcher(time.Now(), cfg.Target.MatchByPath)
	if !cfg.Target.Null {
		gen.SetHooks(loadgen.Hooks{Record: s.m.add, Sent: s.m.sent})
	}
	if s.udp, err = loadgen.NewUDP(s.vars["udp_addr"]); err != nil {
		return err
	}
	if cfg.SendWorkers > 0 {
		s.udp.Workers = cfg.SendWorkers
	}
	if cfg.Pregenerate {
		t0 := time.Now()
		if s.pg, s.truth, err = gen.Pregenerate(ctx, s.udp, cfg.PregenerateMax); err != nil {
			return fmt.Errorf("pregenerate: %w", err)
		}
		s.log.Info("Pregenerated", "step", s.st.Name, "packets", s.pg.Len(), "bytes", s.pg.Bytes(), "memory", s.pg.Size(),
			"took", time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// closeSender closes the UDP output if it was made.
func (s *step) closeSender() {
	if s.udp != nil {
		_ = s.udp.Close()
	}
}

// startCollector starts the target, waits for it to be ready and opens its
// records. Its source is the null one for a null target, else never nil
// once it returns nil.
func (s *step) startCollector(ctx context.Context) error {
	logPath := filepath.Join(s.cfg.WorkDir, s.name+".log")
	proc, err := startCollector(s.cfg.Target, s.vars, logPath)
	if err != nil {
		return err
	}
	s.proc = proc
	if err := waitReady(ctx, proc, s.cfg.Target, s.udpPort, s.base, s.hc); err != nil {
		return fmt.Errorf("%w; collector log:\n%s", err, lastLines(logPath, 10))
	}
	s.src = nullSource{}
	if !s.cfg.Target.Null {
		if s.src, err = newSource(s.cfg.Target, s.vars); err != nil {
			return err
		}
	}
	return nil
}

// stopCollector stops the collector if it was started and is not stopped
// yet.
func (s *step) stopCollector(grace time.Duration) error {
	if s.proc == nil || s.stopped {
		return nil
	}
	s.stopped = true
	return s.proc.stop(grace)
}

// baseline samples the collector's resources, its socket's drops and (for
// xrdmon) its metrics before sending.
func (s *step) baseline(ctx context.Context) error {
	var err error
	if s.before, err = sampleTree(s.proc.cmd.Process.Pid); err != nil {
		return err
	}
	s.drops0 = udpPortStats(s.udpPort).Drops
	if s.cfg.Target.Xrdmon {
		if s.m0, err = scrape(ctx, s.hc, s.base+"/metrics"); err != nil {
			return err
		}
	}
	return nil
}

// startProfile, with Config.Profile and an xrdmon target, takes a CPU
// profile in the middle of the sending; the channel returned (nil
// without) is closed when it is written.
func (s *step) startProfile(ctx context.Context) chan struct{} {
	cfg := &s.cfg
	if cfg.Profile <= 0 || !cfg.Target.Xrdmon {
		return nil
	}
	done := make(chan struct{})
	s.row.Profile = filepath.Join(cfg.WorkDir, s.name+".pprof")
	path := s.row.Profile
	go func() {
		defer close(done)
		wait := max(cfg.StepDuration-cfg.Profile, 0) / 2
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		if err := fetchProfile(ctx, s.base, cfg.Profile, path); err != nil {
			s.log.Warn("CPU profile failed", "step", s.st.Name, "err", err)
		}
	}()
	return done
}

// send sends the step's packets (generating them unless pregenerated) and
// fills the sender's part of the row; it returns when sending ended.
func (s *step) send(ctx context.Context, cpu0 time.Duration) (time.Time, error) {
	var err error
	if s.pg != nil {
		err = s.pg.Send(ctx)
	} else {
		s.truth, err = s.gen.Run(ctx, s.udp)
	}
	sendEnd := time.Now()
	row := &s.row
	row.SenderCPU = selfCPU() - cpu0
	_ = s.udp.Close()
	if s.pg != nil {
		s.pg = nil
		debug.FreeOSMemory() // give the step's packets back before the next
	}
	if err != nil {
		return sendEnd, fmt.Errorf("send: %w", err)
	}
	row.Sent = s.udp.Sent
	row.SendTime = sendEnd.Sub(s.start)
	row.Offered = float64(row.Sent) / row.SendTime.Seconds()
	if row.Sent > 0 {
		row.SenderCPUPer100k = row.SenderCPU.Seconds() / float64(row.Sent) * 1e5
	}
	if s.truth != nil && row.SendTime > 0 {
		row.SimSpeed = s.truth.End.Sub(s.truth.Start).Seconds() / row.SendTime.Seconds()
	}
	return sendEnd, nil
}

// settled is what the wait after sending learnt.
type settled struct {
	sendEnd       time.Time  // when the step's last packet was sent
	lastGrowth    time.Time  // when the collector last made progress
	prevScrape    time.Time  // the xrdmon target's previous scrape
	lastAccounted float64    // its packet count then; -1: not scraped yet
	mEnd          metricSums // its last metrics
	// rollupsBehind: the xrdmon target's rollups have not summed its log
	// to its end yet (they pause while the input is behind and catch up
	// after): the step's CPU is sampled once they have, so that it counts
	// their work. rollupsAt is when they were last seen caught up.
	rollupsBehind bool
	rollupsAt     time.Time
}

// settle waits for the records (and, for xrdmon, the packet counters):
// until every expected record is seen, or nothing new came for
// Config.Quiet, at most Config.MaxSettle after sendEnd.
func (s *step) settle(ctx context.Context, p *poller, sendEnd time.Time) settled {
	cfg := &s.cfg
	w := settled{sendEnd: sendEnd, lastGrowth: sendEnd, prevScrape: sendEnd, lastAccounted: -1}
	settleEnd := sendEnd.Add(cfg.MaxSettle)
	for {
		now := time.Now()
		quietSince, perr := p.state()
		quietSince = later(quietSince, sendEnd)
		stable := true
		if cfg.Target.Null {
			// The receiver does nothing: it is done once every datagram
			// is received or dropped, or nothing new came for Quiet.
			if s.nullDone(&w, now) {
				break
			}
			stable = now.Sub(w.lastGrowth) >= cfg.Quiet
		}
		if cfg.Target.Xrdmon {
			s.scrapeProgress(ctx, &w, now)
			stable = stable && now.Sub(w.lastGrowth) >= cfg.Quiet && !w.rollupsBehind
		}
		if perr != nil || now.After(settleEnd) || ctx.Err() != nil {
			break
		}
		if s.m.pending() == 0 && stable {
			break
		}
		if now.Sub(quietSince) >= cfg.Quiet && stable {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return w
}

// nullDone reports whether the null receiver has received or dropped
// every datagram sent, and notes when its count last grew.
func (s *step) nullDone(w *settled, now time.Time) bool {
	got, _ := readNullCount(filepath.Join(s.dir, nullCountFile))
	if got+udpPortStats(s.udpPort).Drops-s.drops0 >= s.row.Sent {
		return true
	}
	if got != s.row.Received {
		s.row.Received, w.lastGrowth = got, now
	}
	return false
}

// scrapeProgress scrapes the xrdmon target's metrics and notes when its
// packet count last grew.
func (s *step) scrapeProgress(ctx context.Context, w *settled, now time.Time) {
	ms, err := scrape(ctx, s.hc, s.base+"/metrics")
	if err != nil {
		return
	}
	w.mEnd = ms
	// The last packet was handled between the previous scrape and this
	// one; the previous (a lower bound) is kept.
	acc := ms.get("xrdmon_packets_total")
	switch {
	case w.lastAccounted < 0: // the first scrape after sending
		w.lastAccounted = acc
	case acc != w.lastAccounted:
		w.lastAccounted, w.lastGrowth = acc, w.prevScrape
	}
	w.prevScrape = now
	s.handled.Store(int64(acc - s.m0.get("xrdmon_packets_total")))
	if _, ok := ms.byName["xrdmon_rollup_cursor"]; ok {
		w.rollupsBehind = ms.get("xrdmon_rollup_cursor") < ms.get("xrdmon_store_last_seq")
		if !w.rollupsBehind && w.rollupsAt.IsZero() {
			w.rollupsAt = now
		} else if w.rollupsBehind {
			w.rollupsAt = time.Time{}
		}
	}
}

// readBack reads what the stopped collector made durable and checks it
// against the truth. Records made durable at shutdown count for the
// check, not the latency.
func (s *step) readBack(ctx context.Context) error {
	row := &s.row
	if d, ok := s.src.(drainer); ok {
		groups, err := d.Drain(ctx)
		if err != nil {
			return err
		}
		row.EventsStored = d.Events()
		for _, g := range groups {
			s.m.observe(g.obs, g.at, g.late)
		}
	} else {
		row.EventsStored = -1
		if obs, err := s.src.Poll(ctx); err == nil {
			s.m.observe(obs, time.Now(), true)
		}
	}
	for _, n := range s.truth.Events {
		row.EventsExpected += n
	}
	return nil
}

// measure fills the row's collector figures: drops, CPU and memory, the
// rate accepted and the loss, the check and the latencies.
func (s *step) measure(after procSample, drops1 int64, w settled) error {
	cfg, row := &s.cfg, &s.row
	row.KernelDrops = drops1 - s.drops0
	if cfg.Target.Null {
		got, ok := readNullCount(filepath.Join(s.dir, nullCountFile))
		if !ok {
			return errors.New("null receiver wrote no count")
		}
		row.Received = got
	}
	row.CPU = after.CPU - s.before.CPU
	row.PeakRSS = after.PeakRSS
	row.RollupsCaughtUp, row.RollupsReadBack = -1, -1
	if _, ok := w.mEnd.byName["xrdmon_rollup_read_back_total"]; ok && cfg.Target.Xrdmon {
		row.RollupsReadBack = int64(w.mEnd.get("xrdmon_rollup_read_back_total") - s.m0.get("xrdmon_rollup_read_back_total"))
	}
	if !w.rollupsAt.IsZero() {
		row.RollupsCaughtUp = max(w.rollupsAt.Sub(w.sendEnd), 0)
	}
	if row.Sent > 0 {
		row.CPUPer100k = row.CPU.Seconds() / float64(row.Sent) * 1e5
	}
	lost := row.KernelDrops
	accounted := float64(row.Sent - row.KernelDrops)
	accTime := row.SendTime
	if cfg.Target.Xrdmon && w.mEnd.byName != nil {
		m0, mEnd := s.m0, w.mEnd
		row.SeqGaps = int64(mEnd.get("xrdmon_packets_lost_total") - m0.get("xrdmon_packets_lost_total"))
		handled := mEnd.get("xrdmon_packets_total") - m0.get("xrdmon_packets_total")
		accounted = mEnd.series(`xrdmon_packets_total{outcome="accounted"}`) - m0.series(`xrdmon_packets_total{outcome="accounted"}`)
		lost = max(row.Sent-int64(handled), row.SeqGaps, row.KernelDrops, 0)
		accTime = max(accTime, w.lastGrowth.Sub(s.start))
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
	row.Check, lat = s.m.result()
	row.Latencies = len(lat)
	row.LatencyP50, row.LatencyP99 = percentile(lat, 50), percentile(lat, 99)
	return nil
}

// poller follows a target's records in the background while a step sends
// and settles, and notes when they last grew.
type poller struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu      sync.Mutex
	lastNew time.Time
	err     error
}

func startPoller(ctx context.Context, src RecordSource, m *matcher, every time.Duration) *poller {
	p := &poller{}
	ctx, p.cancel = context.WithCancel(ctx)
	p.wg.Go(func() {
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			obs, err := src.Poll(ctx)
			now := time.Now()
			grew := len(obs) > 0
			if pr, ok := src.(progresser); ok {
				grew = pr.Progressed()
			}
			if len(obs) > 0 {
				m.observe(obs, now, false)
			}
			if grew {
				p.mu.Lock()
				p.lastNew = now
				p.mu.Unlock()
			}
			if err != nil && ctx.Err() == nil {
				p.mu.Lock()
				p.err = err
				p.mu.Unlock()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	})
	return p
}

// state returns when records last grew and the error that ended the
// polling, if any.
func (p *poller) state() (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastNew, p.err
}

// stop ends the polling, waits for it and returns its error; it may be
// called more than once.
func (p *poller) stop() error {
	p.once.Do(func() {
		p.cancel()
		p.wg.Wait()
	})
	_, err := p.state()
	return err
}
