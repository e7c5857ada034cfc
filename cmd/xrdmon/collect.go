package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	rungroup "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/xrdmon/xrdmon/internal/api"
	"github.com/xrdmon/xrdmon/internal/cluster"
	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/dashboard"
	"github.com/xrdmon/xrdmon/internal/dnscache"
	"github.com/xrdmon/xrdmon/internal/metrics"
	"github.com/xrdmon/xrdmon/internal/monitored"
	"github.com/xrdmon/xrdmon/internal/pipeline"
	"github.com/xrdmon/xrdmon/internal/rollup"
	"github.com/xrdmon/xrdmon/internal/source"
	amqpsrc "github.com/xrdmon/xrdmon/internal/source/amqp"
	"github.com/xrdmon/xrdmon/internal/source/file"
	stompsrc "github.com/xrdmon/xrdmon/internal/source/stomp"
	"github.com/xrdmon/xrdmon/internal/source/udp"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/web"
)

// runCollect implements `xrdmon collect`.
func runCollect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("collect", helpText("collect"), stderr)
	cfgPath := fs.String("config", "", "YAML configuration `file`")
	printConfig := fs.Bool("print-config", false, "print the effective configuration and exit")
	overrides := config.RegisterFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "xrdmon collect: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	cfg, err := config.Load(*cfgPath, os.Environ(), overrides)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if *printConfig {
		y, err := cfg.YAML()
		if err != nil {
			return err
		}
		_, err = stdout.Write(y)
		return err
	}
	log := newLogger(cfg.Log, stderr)
	for _, name := range config.UnknownEnv(os.Environ()) {
		log.Warn("Unknown XRDMON_ environment variable ignored", "name", name)
	}
	return collect(ctx, cfg, log)
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if strings.EqualFold(c.Format, "json") {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// collect runs the daemon until ctx is cancelled (SIGINT, SIGTERM), then
// shuts down in order: sources stop reading, the pipeline drains and commits
// (checkpointing open transfers), the outputs deliver what they can, the
// store is closed.
func collect(ctx context.Context, cfg *config.Config, log *slog.Logger) (err error) {
	reg, err := newRegistry()
	if err != nil {
		return err
	}
	st, err := store.Open(cfg.Store.Options(), log.With("component", "store"), reg)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer func() {
		if cerr := st.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close store: %w", cerr)
		}
	}()

	var namer pipeline.Namer
	var dns *dnscache.Cache
	if cfg.DNS.Enabled {
		dns = dnscache.New(cfg.DNS.Options(), log.With("component", "dns"), reg)
		namer = dns
	}
	importing := len(cfg.FileInput.Paths) > 0
	popts := pipelineOptions(cfg, importing)
	mon, err := monitored.New(reg, nil)
	if err != nil {
		return fmt.Errorf("monitored metrics: %w", err)
	}
	popts.Observe = mon.Observe
	// An import's times are the capture's: its servers are not kept as
	// heard (a daemon on the same store would list them).
	if !importing {
		if err := mon.Restore(filepath.Join(cfg.Store.Path, "servers-heard.json"), log.With("component", "monitored")); err != nil {
			log.Warn("Servers heard by the previous run not restored", "err", err)
		}
	}
	var pstore pipeline.Store = st
	var lease *cluster.Lease
	if cfg.Cluster.Enabled {
		cs, l, err := clusterStore(ctx, cfg, st, log)
		if err != nil {
			if ctx.Err() != nil {
				// A standby stopped while it waited: a clean stop.
				log.Info("Stopped while waiting for the shard's lease", "shard", cfg.AMQPInput.Queue)
				return nil
			}
			return err
		}
		defer l.Release()
		defer cs.Close()
		pstore, lease = cs, l
	}
	pipe, err := pipeline.New(ctx, popts, pstore, namer, log.With("component", "pipeline"), reg)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while restoring the checkpoint (a cluster member
			// that had just taken a shard over, say): a clean stop, the
			// next holder restores it again.
			log.Info("Stopped while restoring the checkpoint", "err", err)
			return nil
		}
		return fmt.Errorf("start pipeline: %w", err)
	}
	// Sources are created (and bound) now, so a bad address fails the start.
	sources, closeSources, err := newSources(cfg, importing, log, reg)
	defer closeSources()
	if err != nil {
		return err
	}

	var rollups *rollup.Builder
	if cfg.Rollup.Enabled {
		if rollups, err = rollup.New(cfg.Rollup, st, log.With("component", "rollup"), reg); err != nil {
			return fmt.Errorf("rollups: %w", err)
		}
		st.Listen(rollups.Feed) // summed as committed, not read back
		// Work that can wait gives way to a busy input: the rollups pause,
		// the shards take no progress snapshots.
		busy := busySources(sources)
		rollups.YieldTo(busy)
		pipe.ShedProgressWhile(busy)
	}
	srv := web.New(cfg.HTTP, reg, log.With("component", "web"))
	srv.AddCheck("pipeline", pipe.Ready)
	history := api.NewHistory(reg, healthStep, healthKeep)
	history.Silent = mon.Silent
	if err := history.Restore(filepath.Join(cfg.Store.Path, "health-history.json"), time.Now(), log.With("component", "health")); err != nil {
		log.Warn("Health history of the previous run not restored", "err", err)
	}
	if err := mountAPI(srv, cfg.HTTP, st, pipe, rollups, history, mon, log); err != nil {
		return err
	}
	srv.Handle("/", dashboard.Handler())
	if cfg.HTTP.Address != "" {
		addr, err := srv.Listen()
		if err != nil {
			hint := ""
			if errors.Is(err, syscall.EADDRINUSE) {
				hint = " (is another collector, or another service, on this port? choose another with --http.address)"
			}
			return fmt.Errorf("http.address %s: %w%s", cfg.HTTP.Address, err, hint)
		}
		log.Info("Serving the dashboard, query API and metrics", "dashboard", "http://"+addr.String()+"/", "metrics", "http://"+addr.String()+"/metrics")
	}

	outputs, err := newOutputs(cfg, st, log, reg)
	if err != nil {
		return err
	}
	var derived []output // what the collector makes of the store for itself
	if rollups != nil {
		derived = append(derived, output{"rollup", rollups.Run})
	}
	background := []output{{"store", st.Run}, {"monitored", mon.Run}}
	if lease != nil {
		background = append(background, output{"lease", func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return nil
			case <-lease.Lost():
				// Give the input back at once: the next holder gets what
				// this one held, first and in order (docs/scale-out.md).
				abandonSources(sources)
				return fmt.Errorf("lost the lease of shard %s (PostgreSQL connection broken): stopping, so that another collector can take it over", lease.Shard)
			}
		}})
	}
	if dns != nil {
		background = append(background, output{"dns", dns.Run})
	}
	if cfg.HTTP.Address != "" {
		background = append(background, output{"http", srv.Run}, output{"health", history.Run})
	}

	start := time.Now()
	log.Info("Collector running", "shards", popts.Shards, "store", cfg.Store.Options().Path, "outputs", outputNames(outputs))
	err = runGroup(ctx, pipe, sources, derived, outputs, background, log)
	st1 := pipe.Stats()
	log.Info("Stopped", "uptime", time.Since(start).Round(time.Second), "packets", st1.Packets, "records", st1.TotalRecords(), "lost", st1.TotalLost(), "rejected", st1.TotalRejected())
	return err
}

// clusterStore waits for the lease of this collector's shard (its
// amqp_input.queue) and returns the store that keeps the shard's records,
// events and checkpoint in PostgreSQL as well as in st.
func clusterStore(ctx context.Context, cfg *config.Config, st *store.Store, log *slog.Logger) (*cluster.Store, *cluster.Lease, error) {
	c := cfg.Cluster
	holder := c.Holder
	if holder == "" {
		holder, _ = os.Hostname()
	}
	clog := log.With("component", "cluster")
	// While it waits (a standby), the collector answers /healthz (alive)
	// and /readyz (not ready: no shard) on its HTTP address.
	if cfg.HTTP.Address != "" {
		wait := web.New(cfg.HTTP, prometheus.NewRegistry(), log.With("component", "web"))
		wait.AddCheck("lease", func() error { return errors.New("waiting for the lease of shard " + cfg.AMQPInput.Queue) })
		if _, err := wait.Listen(); err != nil {
			return nil, nil, fmt.Errorf("listen http: %w", err)
		}
		wctx, stop := context.WithCancel(ctx)
		served := make(chan error, 1)
		go func() { served <- wait.Run(wctx) }()
		defer func() { stop(); <-served }()
	}
	lease, err := cluster.AcquireLease(ctx, c.URL, c.Schema, cfg.AMQPInput.Queue, holder, time.Second, clog)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	cs, err := cluster.NewStore(st, lease, c.URL, c.Schema, clog)
	if err != nil {
		lease.Release()
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	return cs, lease, nil
}

// newRegistry returns the collector's metrics registry, with the Go
// runtime's, the process's and the build's.
func newRegistry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	ms := metrics.NewSet(reg)
	metrics.Add(ms, collectors.NewGoCollector())
	metrics.Add(ms, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics.Add(ms, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "xrdmon_build_info", Help: "Build information; the value is 1.", ConstLabels: prometheus.Labels{"version": versionString()},
	}, func() float64 { return 1 }))
	return reg, ms.Err()
}

// pipelineOptions returns the pipeline's options for cfg: from the
// correlate section, with the clock of the input when importing, and
// checkpoints as often as the RabbitMQ input needs its acknowledgements.
func pipelineOptions(cfg *config.Config, importing bool) pipeline.Options {
	acked := (cfg.AMQPInput.Enabled || cfg.STOMPInput.Enabled) && !importing
	popts := cfg.Correlate.Options(acked)
	popts.DNSMaxWait = cfg.DNS.MaxWait.D()
	popts.InputClock = importing
	if acked {
		// The broker stops at prefetch unacknowledged messages, and they
		// are acknowledged at checkpoints: checkpoint when half of the
		// smallest prefetch waits.
		prefetch := 0
		for _, in := range []struct {
			enabled bool
			n, def  int
		}{
			{cfg.AMQPInput.Enabled, cfg.AMQPInput.Prefetch, amqpsrc.DefaultConfig().Prefetch},
			{cfg.STOMPInput.Enabled, cfg.STOMPInput.Prefetch, stompsrc.DefaultConfig().Prefetch},
		} {
			if !in.enabled {
				continue
			}
			n := in.n
			if n <= 0 {
				n = in.def
			}
			if prefetch == 0 || n < prefetch {
				prefetch = n
			}
		}
		popts.AckPackets = max(prefetch/2, 1)
	}
	popts.FlushOnExit = importing && cfg.FileInput.Flush
	popts.Progress = cfg.Rollup.Enabled // only the rollups read progress snapshots
	return popts
}

// newSources creates (and binds) the configured inputs: the capture files
// when importing, else the UDP listeners and the RabbitMQ input. The
// returned function closes the sockets; call it also on error.
func newSources(cfg *config.Config, importing bool, log *slog.Logger, reg prometheus.Registerer) ([]component, func(), error) {
	var sources []component
	var closers []func() error
	closeAll := func() {
		for _, c := range closers {
			_ = c()
		}
	}
	if importing {
		fcfg := file.DefaultOptions()
		fcfg.Paths = cfg.FileInput.Paths
		fcfg.Filter = cfg.Listen.Filter()
		f, err := file.New(fcfg, log.With("component", "file_input"), reg)
		if err != nil {
			return nil, closeAll, fmt.Errorf("file input: %w", err)
		}
		log.Info("Importing captures; the live inputs are not opened", "files", len(fcfg.Paths))
		return []component{{name: "file_input", run: f.Run}}, closeAll, nil
	}
	for _, l := range []struct {
		name, addr, what string
		opts             udp.Options
	}{
		{"udp", cfg.Listen.UDP, "XRootD monitoring packets", cfg.Listen.Options()},
		{"udp_summary", cfg.Listen.Summary, "XRootD summary monitoring", cfg.Listen.SummaryOptions()},
	} {
		if l.addr == "" {
			continue
		}
		u, err := udp.New(l.opts, log.With("component", l.name), reg)
		if err != nil {
			return nil, closeAll, fmt.Errorf("listen %s: %w", l.name, err)
		}
		closers = append(closers, u.Close)
		log.Info("Listening for "+l.what, "udp", u.LocalAddr().String())
		sources = append(sources, component{name: l.name, run: func(ctx context.Context, out chan<- *source.Batch) error { return u.Run(ctx, out) }, busy: u.Busy})
	}
	if cfg.AMQPInput.Enabled {
		acfg := cfg.AMQPInput
		acfg.Filter = cfg.Listen.Filter()
		if cfg.Cluster.Enabled {
			// Take the shard over only once the previous holder's
			// deliveries are back in the queue (bounded: a frozen holder's
			// connection goes within the broker's heartbeat).
			acfg.HandoverWait = handoverWait
		}
		src, err := amqpsrc.New(acfg, log.With("component", "amqp_input"), reg)
		if err != nil {
			return nil, closeAll, fmt.Errorf("amqp input: %w", err)
		}
		sources = append(sources, component{name: "amqp_input", run: src.Run, abandon: src.Abandon})
	}
	if cfg.STOMPInput.Enabled {
		scfg := cfg.STOMPInput
		scfg.Filter = cfg.Listen.Filter()
		src, err := stompsrc.New(scfg, log.With("component", "stomp_input"), reg)
		if err != nil {
			return nil, closeAll, fmt.Errorf("stomp input: %w", err)
		}
		sources = append(sources, component{name: "stomp_input", run: src.Run})
	}
	if len(sources) == 0 {
		return nil, closeAll, errNoInput
	}
	return sources, closeAll, nil
}

// runGroup runs the components as one group; the first to end stops the
// others, in this order: the sources stop reading; the pipeline drains
// and commits (checkpointing open transfers); the derived components (the
// rollups) sum and flush what reached the store; the outputs deliver it
// (the rollups' last flush included, for an output that exports them);
// the background services (store, DNS, HTTP) stop.
func runGroup(ctx context.Context, pipe *pipeline.Pipeline, sources []component, derived, outputs, background []output, log *slog.Logger) error {
	var g rungroup.Group
	pipeDone := make(chan struct{})
	{
		// Sources and pipeline: until a signal, a failure of any component,
		// or the end of the input (file_input).
		srcCtx, stopSources := context.WithCancel(ctx)
		g.Add(func() error {
			defer close(pipeDone)
			return runPipeline(srcCtx, stopSources, pipe, sources, log)
		}, func(error) { stopSources() })
	}
	derivedDone := addStage(&g, derived, pipeDone)
	outputsDone := addStage(&g, outputs, derivedDone)
	for _, b := range background {
		bctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		g.Add(func() error {
			defer close(done)
			if err := b.run(bctx); err != nil && bctx.Err() == nil {
				return fmt.Errorf("%s: %w", b.name, err)
			}
			<-bctx.Done() // a service that ends early waits for the shutdown
			return nil
		}, func(error) {
			<-pipeDone
			<-outputsDone
			stop()
			<-done
		})
	}
	return g.Run()
}

// addStage runs outs in g under one context, cancelled at the group's
// stop once after is closed (the stage before has returned), and returns
// a channel closed when they have all returned. The first error of one of
// them stops the group.
func addStage(g *rungroup.Group, outs []output, after <-chan struct{}) <-chan struct{} {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(outs))
	for _, o := range outs {
		wg.Go(func() {
			if err := o.run(ctx); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("output %s: %w", o.name, err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	g.Add(func() error {
		select {
		case err := <-errs:
			return err
		case <-ctx.Done(): // an output that ends on its own waits for the shutdown
			<-done
			return nil
		}
	}, func(error) {
		<-after // everything the stage before committed reaches these
		stop()
		<-done
	})
	return done
}

// runPipeline runs the sources into the pipeline until ctx is cancelled or
// every source has ended, then lets the pipeline drain and commit. A
// source that fails stops the others (stop). Against a store that keeps
// failing, the pipeline gives up shutdownGrace after the sources stopped
// (leaving that input unacknowledged), so a shutdown always ends.
func runPipeline(ctx context.Context, stop context.CancelFunc, pipe *pipeline.Pipeline, sources []component, log *slog.Logger) error {
	batches := make(chan *source.Batch, 64)
	var wg sync.WaitGroup
	var fatal error
	var once sync.Once
	fail := func(err error) {
		once.Do(func() { fatal = err; log.Error("Stopping", "err", err) })
		stop()
	}
	for _, s := range sources {
		wg.Go(func() {
			if err := s.run(ctx, batches); err != nil && ctx.Err() == nil {
				fail(fmt.Errorf("source %s: %w", s.name, err))
			}
		})
	}
	go func() { wg.Wait(); close(batches) }()

	runCtx, abort := context.WithCancel(context.Background())
	defer abort()
	go func() {
		select {
		case <-ctx.Done():
		case <-runCtx.Done():
			return
		}
		log.Info("Sources stopped: draining and committing")
		t := time.NewTimer(shutdownGrace)
		defer t.Stop()
		select {
		case <-t.C:
			abort()
		case <-runCtx.Done():
		}
	}()
	if err := pipe.Run(runCtx, batches); err != nil {
		fail(fmt.Errorf("pipeline: %w", err))
		// Nothing the sources still hold will be acknowledged: give it
		// back now rather than after their drain timeout.
		abandonSources(sources)
	}
	stop()
	wg.Wait()
	return fatal
}

// The health history the dashboard shows: a sample every 10 s, one hour.
const (
	healthStep = 10 * time.Second
	healthKeep = 360
)

// mountAPI serves the query API on srv, with the collector's status.
func mountAPI(srv *web.Server, c web.Config, st *store.Store, pipe *pipeline.Pipeline, rollups *rollup.Builder, history *api.History, mon *monitored.Monitor, log *slog.Logger) error {
	var token string
	if c.APITokenFile != "" {
		var err error
		if token, err = api.ReadToken(c.APITokenFile); err != nil {
			return err
		}
	} else if c.Address != "" && !web.Loopback(c.Address) {
		log.Warn("The query API is open to every client that reaches http.address; set http.api_token_file to require a token", "address", c.Address)
	}
	started := time.Now()
	status := func(ctx context.Context) (any, error) {
		last, err := st.LastSeq(ctx)
		if err != nil {
			return nil, err
		}
		return newStatus(started, pipe.Stats(), last, st.Sinks()), nil
	}
	opts := api.Options{Status: status, Token: token, History: history, Servers: mon.Servers}
	if host, _, err := net.SplitHostPort(c.Address); err == nil {
		opts.ListenHost = host
	}
	if rollups != nil {
		opts.Rollups = rollups
	}
	srv.Handle(api.Prefix, api.New(st, opts, log.With("component", "api")))
	return nil
}

// shutdownGrace is how long the pipeline may go on retrying a failing store
// after the sources have stopped; the rest of the 10 s a service manager
// usually allows goes to the outputs and closing the store.
const shutdownGrace = 7 * time.Second

// sourceRun is a source's Run method.
type sourceRun func(ctx context.Context, out chan<- *source.Batch) error

// component is a source with a name for messages.
type component struct {
	name string
	run  sourceRun
	// abandon, if set, makes run give back what it holds unacknowledged
	// at once and return (amqp.AMQP.Abandon).
	abandon func()
	// busy, if set, reports that the source is behind what it is sent
	// (udp.UDP.Busy): work that can wait yields to it.
	busy func() bool
}

// busySources returns a func reporting whether any source is behind, or
// nil when none can tell.
func busySources(sources []component) func() bool {
	var fs []func() bool
	for _, s := range sources {
		if s.busy != nil {
			fs = append(fs, s.busy)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return func() bool {
		for _, f := range fs {
			if f() {
				return true
			}
		}
		return false
	}
}

// abandonSources abandons the sources that can be.
func abandonSources(sources []component) {
	for _, s := range sources {
		if s.abandon != nil {
			s.abandon()
		}
	}
}

// handoverWait bounds how long a cluster collector that took a shard over
// waits for the previous holder's consumer to go (amqp.Config.HandoverWait).
const handoverWait = 2 * time.Minute

// output is a sink (or a background service) with a name for messages.
type output struct {
	name string
	run  func(ctx context.Context) error
}

var errNoInput = errors.New("no input configured: set listen.udp, amqp_input.enabled, stomp_input.enabled or file_input.paths")
