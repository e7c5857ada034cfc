package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/xrdmon/xrdmon/internal/loadgen"
)

// runLoadgen implements `xrdmon loadgen`.
func runLoadgen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := loadgen.DefaultConfig()
	fs := newFlagSet("loadgen", helpText("loadgen"), stderr)
	addGeneratorFlags(fs, &cfg)
	f := addLoadgenFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	gen, err := f.generator(fs, &cfg, stderr)
	if err != nil {
		return err
	}
	var o loadgenOutputs
	defer o.close()
	if err := o.open(f); err != nil {
		return err
	}
	truth, elapsed, runErr := f.generate(ctx, gen, &o, stderr)
	if err := o.close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("close output: %w", err)
	}
	printLoadgenSummary(stderr, cfg.Servers, truth, elapsed, o.udp)
	if *f.truth != "" {
		if err := truth.WriteFile(*f.truth); err != nil {
			return err
		}
	}
	_ = stdout
	return runErr
}

// addGeneratorFlags adds the flags that set the generator's Config: how
// much it generates and the workload.
func addGeneratorFlags(fs *flag.FlagSet, cfg *loadgen.Config) {
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "simulated `time` to cover (0: until --count)")
	fs.Int64Var(&cfg.Count, "count", cfg.Count, "stop after `n` generated packets (0: no limit)")
	addWorkloadFlags(fs, cfg)
}

// addWorkloadFlags adds the flags of the workload: the simulated servers,
// their clients and monitoring, the sending rate and the impairments.
// `xrdmon loadgen` and `xrdmon bench` (every step's base) share them.
func addWorkloadFlags(fs *flag.FlagSet, cfg *loadgen.Config) {
	fs.IntVar(&cfg.Servers, "servers", cfg.Servers, "simulated XRootD `servers`")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent `clients` per server")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "pace delivery at `packets/s` in real time (0: as fast as possible)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random `seed`")
	fs.Float64Var(&cfg.Loss, "loss", cfg.Loss, "drop this `fraction` of packets (counted in the truth)")
	fs.Float64Var(&cfg.Reorder, "reorder", cfg.Reorder, "swap a packet with its server's next one with this `probability`")
	fs.Float64Var(&cfg.Duplicate, "duplicate", cfg.Duplicate, "send a packet twice with this `probability`")
	fs.IntVar(&cfg.Restarts, "restarts", cfg.Restarts, "server restarts (new stod) spread over the run")
	fs.IntVar(&cfg.FBSZ, "fbsz", cfg.FBSZ, "f-stream buffer `bytes` (xrootd monitor fbsz)")
	fs.DurationVar(&cfg.FStat, "fstat", cfg.FStat, "f-stream flush `interval` (simulated)")
	fs.IntVar(&cfg.XfrEvery, "xfr", cfg.XfrEvery, "isXfr every `n` fstat intervals")
	fs.DurationVar(&cfg.IdentInterval, "ident", cfg.IdentInterval, "server ident record `interval`")
	fs.DurationVar(&cfg.SummaryInterval, "summary", cfg.SummaryInterval, "each data server also sends an xrd.report summary (XML) every `interval` (0: none)")
	fs.IntVar(&cfg.GBuff, "gbuff", cfg.GBuff, "g-stream buffer `bytes`")
	fs.DurationVar(&cfg.GFlush, "gflush", cfg.GFlush, "g-stream flush `interval`")
	fs.Float64Var(&cfg.WriteFrac, "write-frac", cfg.WriteFrac, "`fraction` of accesses that write")
	fs.Float64Var(&cfg.ReadvFrac, "readv-frac", cfg.ReadvFrac, "`fraction` of read accesses that use readv")
	fs.Int64Var(&cfg.FileSizeMin, "file-size-min", cfg.FileSizeMin, "smallest file `bytes`")
	fs.Int64Var(&cfg.FileSizeMax, "file-size-max", cfg.FileSizeMax, "largest file `bytes`")
	fs.DurationVar(&cfg.TransferMin, "transfer-min", cfg.TransferMin, "shortest transfer `time`")
	fs.DurationVar(&cfg.TransferMax, "transfer-max", cfg.TransferMax, "longest ordinary transfer `time`")
	fs.Float64Var(&cfg.LongFrac, "long-frac", cfg.LongFrac, "`fraction` of transfers that last --long-transfer")
	fs.DurationVar(&cfg.LongTransfer, "long-transfer", cfg.LongTransfer, "`time` of a long transfer")
	fs.IntVar(&cfg.FilesPerSession, "files-per-session", cfg.FilesPerSession, "most `files` one session opens")
	fs.DurationVar(&cfg.ThinkTime, "think", cfg.ThinkTime, "mean pause between a client's sessions")
	fs.Float64Var(&cfg.ForcedFrac, "forced-frac", cfg.ForcedFrac, "`fraction` of sessions that disconnect with a file open")
	fs.Float64Var(&cfg.TokenFrac, "token-frac", cfg.TokenFrac, "`fraction` of sessions with a token login")
	fs.Float64Var(&cfg.IPv6Frac, "ipv6-frac", cfg.IPv6Frac, "`fraction` of sessions over IPv6")
	fs.Float64Var(&cfg.CacheFrac, "cache-frac", cfg.CacheFrac, "`fraction` of servers that are XCaches (C events)")
	fs.StringVar(&cfg.Trace, "trace", cfg.Trace, "t-stream I/O tracing: `mode` io, iov or none (empty)")
	fs.IntVar(&cfg.Redirectors, "redirectors", cfg.Redirectors, "redirectors in front of the servers (`n` 0..4): each open follows 1..n redirects")
	fs.DurationVar(&cfg.RedirectDelay, "redirect-delay", cfg.RedirectDelay, "mean `time` a redirect hop takes")
	fs.DurationVar(&cfg.RedirectWindow, "redirect-window", cfg.RedirectWindow, "redirectors buffer their r-stream and send it every `time` (the monitor window; 0: each redirect at once)")
	fs.Float64Var(&cfg.TPCFrac, "tpc-frac", cfg.TPCFrac, "`fraction` of accesses that are third-party copies (P events)")
	fs.IntVar(&cfg.Users, "users", cfg.Users, "distinct user `names`")
}

// loadgenFlags are the flags of `xrdmon loadgen` that are not a Config
// field as they are: the Config's inverted or parsed ones, the outputs and
// the sending.
type loadgenFlags struct {
	epoch                      *string
	noDrain, noRecords         *bool
	udp, amqp, exchange, queue *string
	pcap, jsonl, truth         *string
	pregen                     *bool
	sendWorkers                *int
	pregenMax                  *int64
}

func addLoadgenFlags(fs *flag.FlagSet) *loadgenFlags {
	return &loadgenFlags{
		epoch:     fs.String("epoch", "", "start of simulated time, RFC 3339 (default: derived from the seed)"),
		noDrain:   fs.Bool("no-drain", false, "leave files open at the end (end_of_input partials) instead of closing them"),
		noRecords: fs.Bool("no-truth-records", false, "keep only totals in the truth (for very long runs)"),

		udp:      fs.String("udp", "", "send UDP to `host:port`"),
		amqp:     fs.String("amqp", "", "publish shoveler messages to RabbitMQ at `URL`"),
		exchange: fs.String("exchange", "shoveled-xrd", "with --amqp: `exchange` to publish to (declared fanout if absent)"),
		queue:    fs.String("queue", "", "with --amqp: also declare `queue` and bind it to the exchange"),
		pcap:     fs.String("pcap", "", "write a pcap capture to `FILE`"),
		jsonl:    fs.String("jsonl", "", "write shoveler JSON lines to `FILE`"),
		truth:    fs.String("truth", "", "write the ground truth (JSON) to `FILE`"),
		pregen: fs.Bool("pregenerate", false, "with --udp (alone): generate every packet in memory first, then send them at --rate\n"+
			"(memory: ~285 bytes per packet, e.g. 3.4 GB for 12 million; see --pregenerate-max-bytes)"),
		sendWorkers: fs.Int("send-workers", 0, "with --udp: most `goroutines` sending at once, one server's packets always on one (0: one per CPU)"),
		pregenMax:   fs.Int64("pregenerate-max-bytes", loadgen.DefaultPregenerateMax, "with --pregenerate: refuse a run whose packets need more than this many `bytes`"),
	}
}

// generator completes cfg from the parsed flags and makes the generator;
// a bad flag or combination is a usage error.
func (f *loadgenFlags) generator(fs *flag.FlagSet, cfg *loadgen.Config, stderr io.Writer) (*loadgen.Generator, error) {
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "xrdmon loadgen: unexpected argument %q\n", fs.Arg(0))
		return nil, errUsage
	}
	cfg.Drain = !*f.noDrain
	cfg.KeepRecords = !*f.noRecords
	if *f.epoch != "" {
		t, err := time.Parse(time.RFC3339, *f.epoch)
		if err != nil {
			fmt.Fprintf(stderr, "xrdmon loadgen: --epoch: %v\n", err)
			return nil, errUsage
		}
		cfg.Epoch = t
	}
	gen, err := loadgen.New(*cfg)
	if err != nil {
		fmt.Fprintf(stderr, "xrdmon loadgen: %v\n", err)
		return nil, errUsage
	}
	if *f.pregen && (*f.udp == "" || *f.amqp != "" || *f.pcap != "" || *f.jsonl != "") {
		fmt.Fprintln(stderr, "xrdmon loadgen: --pregenerate needs --udp and no other output")
		return nil, errUsage
	}
	return gen, nil
}

// loadgenOutputs are the outputs `xrdmon loadgen` was asked for.
type loadgenOutputs struct {
	outs    []loadgen.Output
	udp     *loadgen.UDP // with --udp
	discard loadgen.Discard
}

// open opens the outputs of the flags; those opened before an error stay
// for close.
func (o *loadgenOutputs) open(f *loadgenFlags) error {
	if *f.udp != "" {
		udp, err := loadgen.NewUDP(*f.udp)
		if err != nil {
			return err
		}
		if *f.sendWorkers > 0 {
			udp.Workers = *f.sendWorkers
		}
		o.udp = udp
		o.outs = append(o.outs, udp)
	}
	if *f.amqp != "" {
		a, err := loadgen.NewAMQP(loadgen.AMQPConfig{URL: *f.amqp, Exchange: *f.exchange, Queue: *f.queue})
		if err != nil {
			return err
		}
		o.outs = append(o.outs, a)
	}
	if *f.pcap != "" {
		err := o.addFile(*f.pcap, "pcap", func(w io.Writer) (loadgen.Output, error) {
			return loadgen.NewPcap(w, loadgen.DefaultCollector)
		})
		if err != nil {
			return err
		}
	}
	if *f.jsonl != "" {
		err := o.addFile(*f.jsonl, "jsonl", func(w io.Writer) (loadgen.Output, error) {
			return loadgen.NewJSONL(w), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// addFile creates the file path (what names it in errors) and adds the
// output open makes of it; the file is closed if open fails.
func (o *loadgenOutputs) addFile(path, what string, open func(io.Writer) (loadgen.Output, error)) error {
	file, err := createFile(path, what)
	if err != nil {
		return err
	}
	out, err := open(file)
	if err != nil {
		file.Close()
		return err
	}
	o.outs = append(o.outs, out)
	return nil
}

// output returns where the generator writes: every output, or a Discard
// when there is none.
func (o *loadgenOutputs) output() loadgen.Output {
	if len(o.outs) == 0 {
		return &o.discard
	}
	return loadgen.Tee(o.outs...)
}

// close closes the outputs once and returns the first error.
func (o *loadgenOutputs) close() error {
	var first error
	for _, out := range o.outs {
		if err := out.Close(); err != nil && first == nil {
			first = err
		}
	}
	o.outs = nil
	return first
}

// generate runs the generator into the outputs, or with --pregenerate
// generates every packet first and then sends them; it returns the truth
// and the time sending took.
func (f *loadgenFlags) generate(ctx context.Context, gen *loadgen.Generator, o *loadgenOutputs, stderr io.Writer) (*loadgen.Truth, time.Duration, error) {
	if !*f.pregen {
		start := time.Now()
		truth, err := gen.Run(ctx, o.output())
		return truth, time.Since(start), err
	}
	var start time.Time
	t0 := time.Now()
	pg, truth, err := gen.Pregenerate(ctx, o.udp, *f.pregenMax)
	if err == nil {
		fmt.Fprintf(stderr, "loadgen: pregenerated %d packets (%d bytes, %d MiB of memory) in %s\n",
			pg.Len(), pg.Bytes(), pg.Size()>>20, time.Since(t0).Round(time.Millisecond))
		start = time.Now()
		cpu0 := cpuTimes()
		err = pg.Send(ctx)
		cpu := cpuTimes().sub(cpu0)
		udp := o.udp
		fmt.Fprintf(stderr, "loadgen: sending: %d datagrams in %s, CPU %.3fs user + %.3fs system = %.3f s per 100,000\n",
			udp.Sent, time.Since(start).Round(time.Millisecond), cpu.user.Seconds(), cpu.sys.Seconds(),
			(cpu.user+cpu.sys).Seconds()/float64(max(udp.Sent, 1))*1e5)
	}
	return truth, time.Since(start), err
}

// printLoadgenSummary writes what was generated and sent, and the records
// and events the truth expects.
func printLoadgenSummary(w io.Writer, servers int, truth *loadgen.Truth, elapsed time.Duration, udp *loadgen.UDP) {
	rate := float64(truth.Emitted) / max(elapsed.Seconds(), 1e-9)
	fmt.Fprintf(w, "loadgen: %d servers, %d sessions, %d packets generated (%d bytes), %d emitted, %d dropped, %d duplicated, %d reordered in %s (%.0f packets/s)\n",
		servers, truth.Sessions, truth.Generated, truth.Bytes, truth.Emitted, truth.Dropped, truth.Duplicated, truth.Reordered,
		elapsed.Round(time.Millisecond), rate)
	tot := truth.Totals()
	fmt.Fprintf(w, "loadgen: expected %d records %v: read %d, readv %d, write %d bytes; events %v\n",
		tot.Records, truth.Reasons, tot.ReadBytes, tot.ReadvBytes, tot.WriteBytes, truth.Events)
	if udp != nil && udp.Failed > 0 {
		fmt.Fprintf(w, "loadgen: udp: %d datagrams refused by the destination\n", udp.Failed)
	}
}

// cpuUse is a process's CPU time, user and system.
type cpuUse struct{ user, sys time.Duration }

func (a cpuUse) sub(b cpuUse) cpuUse { return cpuUse{a.user - b.user, a.sys - b.sys} }

// cpuTimes returns this process's CPU time so far.
func cpuTimes() cpuUse {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return cpuUse{}
	}
	return cpuUse{time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}
}
