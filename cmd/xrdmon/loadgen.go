package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/xrdmon/xrdmon/internal/loadgen"
)

const loadgenSynopsis = "[flags]\n\n" +
	"Simulates XRootD servers and clients and sends their monitoring packets to\n" +
	"a collector (--udp), to RabbitMQ as shoveler messages (--amqp), or to\n" +
	"capture files (--pcap, --jsonl); several outputs may be combined. With\n" +
	"none, packets are generated and discarded (to measure the generator).\n" +
	"--truth writes what a correlator must produce from the packets (JSON).\n" +
	"The same flags and --seed always give the same packets. A summary goes to\n" +
	"standard error."

// runLoadgen implements `xrdmon loadgen`.
func runLoadgen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := loadgen.DefaultConfig()
	fs := newFlagSet("loadgen", loadgenSynopsis, stderr)
	fs.IntVar(&cfg.Servers, "servers", cfg.Servers, "simulated XRootD `servers`")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent `clients` per server")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "pace delivery at `packets/s` in real time (0: as fast as possible)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "simulated `time` to cover (0: until --count)")
	fs.Int64Var(&cfg.Count, "count", cfg.Count, "stop after `n` generated packets (0: no limit)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random `seed`")
	epoch := fs.String("epoch", "", "start of simulated time, RFC 3339 (default: derived from the seed)")
	noDrain := fs.Bool("no-drain", false, "leave files open at the end (end_of_input partials) instead of closing them")
	fs.Float64Var(&cfg.Loss, "loss", cfg.Loss, "drop this `fraction` of packets (counted in the truth)")
	fs.Float64Var(&cfg.Reorder, "reorder", cfg.Reorder, "swap a packet with its server's next one with this `probability`")
	fs.Float64Var(&cfg.Duplicate, "duplicate", cfg.Duplicate, "send a packet twice with this `probability`")
	fs.IntVar(&cfg.Restarts, "restarts", cfg.Restarts, "server restarts (new stod) spread over the run")
	fs.IntVar(&cfg.FBSZ, "fbsz", cfg.FBSZ, "f-stream buffer `bytes` (xrootd monitor fbsz)")
	fs.DurationVar(&cfg.FStat, "fstat", cfg.FStat, "f-stream flush `interval` (simulated)")
	fs.IntVar(&cfg.XfrEvery, "xfr", cfg.XfrEvery, "isXfr every `n` fstat intervals")
	fs.DurationVar(&cfg.IdentInterval, "ident", cfg.IdentInterval, "server ident record `interval`")
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
	fs.Float64Var(&cfg.TPCFrac, "tpc-frac", cfg.TPCFrac, "`fraction` of accesses that are third-party copies (P events)")
	fs.IntVar(&cfg.Users, "users", cfg.Users, "distinct user `names`")
	noRecords := fs.Bool("no-truth-records", false, "keep only totals in the truth (for very long runs)")

	udpAddr := fs.String("udp", "", "send UDP to `host:port`")
	amqpURL := fs.String("amqp", "", "publish shoveler messages to RabbitMQ at `URL`")
	exchange := fs.String("exchange", "shoveled-xrd", "with --amqp: `exchange` to publish to (declared fanout if absent)")
	queue := fs.String("queue", "", "with --amqp: also declare `queue` and bind it to the exchange")
	pcapPath := fs.String("pcap", "", "write a pcap capture to `FILE`")
	jsonlPath := fs.String("jsonl", "", "write shoveler JSON lines to `FILE`")
	truthPath := fs.String("truth", "", "write the ground truth (JSON) to `FILE`")
	pregen := fs.Bool("pregenerate", false, "with --udp (alone): generate every packet in memory first, then send them at --rate\n"+
		"(memory: ~285 bytes per packet, e.g. 3.4 GB for 12 million; see --pregenerate-max-bytes)")
	sendWorkers := fs.Int("send-workers", 0, "with --udp: most `goroutines` sending at once, one server's packets always on one (0: one per CPU)")
	pregenMax := fs.Int64("pregenerate-max-bytes", loadgen.DefaultPregenerateMax, "with --pregenerate: refuse a run whose packets need more than this many `bytes`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "xrdmon loadgen: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	cfg.Drain = !*noDrain
	cfg.KeepRecords = !*noRecords
	if *epoch != "" {
		t, err := time.Parse(time.RFC3339, *epoch)
		if err != nil {
			fmt.Fprintf(stderr, "xrdmon loadgen: --epoch: %v\n", err)
			return errUsage
		}
		cfg.Epoch = t
	}
	gen, err := loadgen.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "xrdmon loadgen: %v\n", err)
		return errUsage
	}
	if *pregen && (*udpAddr == "" || *amqpURL != "" || *pcapPath != "" || *jsonlPath != "") {
		fmt.Fprintln(stderr, "xrdmon loadgen: --pregenerate needs --udp and no other output")
		return errUsage
	}

	var outs []loadgen.Output
	closeAll := func() error {
		var first error
		for _, o := range outs {
			if err := o.Close(); err != nil && first == nil {
				first = err
			}
		}
		outs = nil
		return first
	}
	defer closeAll()
	var udp *loadgen.UDP
	if *udpAddr != "" {
		if udp, err = loadgen.NewUDP(*udpAddr); err != nil {
			return err
		}
		if *sendWorkers > 0 {
			udp.Workers = *sendWorkers
		}
		outs = append(outs, udp)
	}
	if *amqpURL != "" {
		a, err := loadgen.NewAMQP(loadgen.AMQPConfig{URL: *amqpURL, Exchange: *exchange, Queue: *queue})
		if err != nil {
			return err
		}
		outs = append(outs, a)
	}
	if *pcapPath != "" {
		f, err := os.Create(*pcapPath)
		if err != nil {
			return fmt.Errorf("create pcap: %w", err)
		}
		p, err := loadgen.NewPcap(f, loadgen.DefaultCollector)
		if err != nil {
			f.Close()
			return err
		}
		outs = append(outs, p)
	}
	if *jsonlPath != "" {
		f, err := os.Create(*jsonlPath)
		if err != nil {
			return fmt.Errorf("create jsonl: %w", err)
		}
		outs = append(outs, loadgen.NewJSONL(f))
	}
	var discard loadgen.Discard
	out := loadgen.Output(&discard)
	if len(outs) > 0 {
		out = loadgen.Tee(outs...)
	}

	var truth *loadgen.Truth
	var runErr error
	var start time.Time
	if *pregen {
		t0 := time.Now()
		var pg *loadgen.Pregenerated
		pg, truth, runErr = gen.Pregenerate(ctx, udp, *pregenMax)
		if runErr == nil {
			fmt.Fprintf(stderr, "loadgen: pregenerated %d packets (%d bytes, %d MiB of memory) in %s\n",
				pg.Len(), pg.Bytes(), pg.Size()>>20, time.Since(t0).Round(time.Millisecond))
			start = time.Now()
			cpu0 := cpuTimes()
			runErr = pg.Send(ctx)
			cpu := cpuTimes().sub(cpu0)
			fmt.Fprintf(stderr, "loadgen: sending: %d datagrams in %s, CPU %.3fs user + %.3fs system = %.3f s per 100,000\n",
				udp.Sent, time.Since(start).Round(time.Millisecond), cpu.user.Seconds(), cpu.sys.Seconds(),
				(cpu.user+cpu.sys).Seconds()/float64(max(udp.Sent, 1))*1e5)
		}
	} else {
		start = time.Now()
		truth, runErr = gen.Run(ctx, out)
	}
	elapsed := time.Since(start)
	if err := closeAll(); err != nil && runErr == nil {
		runErr = fmt.Errorf("close output: %w", err)
	}
	rate := float64(truth.Emitted) / max(elapsed.Seconds(), 1e-9)
	fmt.Fprintf(stderr, "loadgen: %d servers, %d sessions, %d packets generated (%d bytes), %d emitted, %d dropped, %d duplicated, %d reordered in %s (%.0f packets/s)\n",
		cfg.Servers, truth.Sessions, truth.Generated, truth.Bytes, truth.Emitted, truth.Dropped, truth.Duplicated, truth.Reordered,
		elapsed.Round(time.Millisecond), rate)
	tot := truth.Totals()
	fmt.Fprintf(stderr, "loadgen: expected %d records %v: read %d, readv %d, write %d bytes; events %v\n",
		tot.Records, truth.Reasons, tot.ReadBytes, tot.ReadvBytes, tot.WriteBytes, truth.Events)
	if udp != nil && udp.Failed > 0 {
		fmt.Fprintf(stderr, "loadgen: udp: %d datagrams refused by the destination\n", udp.Failed)
	}
	if *truthPath != "" {
		if err := truth.WriteFile(*truthPath); err != nil {
			return err
		}
	}
	_ = stdout
	return runErr
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
