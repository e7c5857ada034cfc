package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/bench"
	"github.com/xrdmon/xrdmon/internal/loadgen"
)

// runBench implements `xrdmon bench`. `xrdmon bench nullrecv` is the null
// target's receiver, which the bench starts as a child process.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "nullrecv" {
		return runNullRecv(ctx, args[1:], stderr)
	}
	return runBenchMain(ctx, args, stdout, stderr)
}

// runNullRecv implements the hidden `xrdmon bench nullrecv`.
func runNullRecv(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("bench nullrecv", helpText("bench-nullrecv"), stderr)
	addr := fs.String("udp", "", "listen on `host:port`")
	countFile := fs.String("count-file", "", "write \"packets bytes\" received to `file` every 100 ms and at exit")
	rcvbuf := fs.Int("rcvbuf", bench.DefaultNullRcvbuf, "socket receive buffer `bytes` (SO_RCVBUFFORCE when permitted)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *addr == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "xrdmon bench nullrecv: need --udp and no arguments")
		return errUsage
	}
	return bench.RunNullReceiver(ctx, *addr, *countFile, *rcvbuf)
}

// runBenchMain implements `xrdmon bench`: it runs the scenario's steps
// against the target and writes the table (and CSV, SVG) of their rows.
func runBenchMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	base := loadgen.DefaultConfig()
	base.Rate = 20000
	bc := bench.DefaultConfig()
	fs := newFlagSet("bench", fmt.Sprintf(helpText("bench"), strings.Join(loadgen.PresetNames(), ", ")), stderr)
	f := addBenchFlags(fs, &base, &bc)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "xrdmon bench: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	if *f.stages != "" {
		stages, err := bench.StagesOfFile(*f.stages)
		if err != nil {
			return err
		}
		for _, st := range stages {
			fmt.Fprintf(stdout, "%-30s %6.1f%% %8.2f s\n", st.Name, 100*st.Share, st.Seconds)
		}
		return nil
	}
	if *f.fromCSV != "" {
		return benchFromCSV(*f.fromCSV, *f.svg, *f.scenario, stdout)
	}
	if *f.quick {
		f.applyQuick(fs, &base, &bc)
	}
	sc, err := loadgen.ParseScenario(*f.scenario, base)
	if err != nil {
		fmt.Fprintf(stderr, "xrdmon bench: %v\n", err)
		return errUsage
	}
	if _, err := sc.Steps(); err != nil {
		fmt.Fprintf(stderr, "xrdmon bench: %v\n", err)
		return errUsage
	}
	bc.Scenario = sc
	if bc.Target, err = f.benchTarget(fs, stderr); err != nil {
		return err
	}
	if bc.WorkDir, err = benchWorkDir(*f.workDir); err != nil {
		return err
	}
	var log *slog.Logger
	if *f.verbose {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	fmt.Fprintf(stderr, "bench: scenario %s, work dir %s\n", sc.Name, bc.WorkDir)
	bc.Progress = stderr
	rows, runErr := bench.Run(ctx, bc, log)
	if err := f.writeRows(rows, sc.Name, stdout, stderr); err != nil {
		return err
	}
	return runErr
}

// benchFlags are the flags of `xrdmon bench` that are not a field of the
// scenario's base Config or of the bench Config.
type benchFlags struct {
	scenario, workDir           *string
	quick, verbose              *bool
	target, targetCmd           *string
	recJSONL, recAMQP, recQueue *string
	matchPath                   *bool
	csv, svg, fromCSV, stages   *string
}

// addBenchFlags adds the flags of `xrdmon bench`; those of the workload
// set base, those of the measurement bc.
func addBenchFlags(fs *flag.FlagSet, base *loadgen.Config, bc *bench.Config) *benchFlags {
	f := &benchFlags{
		scenario: fs.String("scenario", "clients", "`scenario`: a preset or param=values"),
		quick:    fs.Bool("quick", false, "a tiny run for CI: clients=5,10 at 2000 packets/s for 2 s each (other flags still apply)"),
	}
	addWorkloadFlags(fs, base)
	fs.DurationVar(&bc.StepDuration, "step-duration", bc.StepDuration, "real `time` each step sends for")
	fs.Int64Var(&bc.Packets, "packets", bc.Packets, "`packets` per step when the rate is 0")
	fs.DurationVar(&bc.Quiet, "quiet", bc.Quiet, "after sending, stop waiting for records once none arrived for this `time`")
	fs.DurationVar(&bc.MaxSettle, "max-settle", bc.MaxSettle, "longest `time` to wait for records after sending")
	fs.DurationVar(&bc.Poll, "poll", bc.Poll, "how often records are looked for (latency resolution)")
	fs.DurationVar(&bc.Profile, "profile", 0, "take a CPU profile of this `time` in each step (xrdmon target; saved in --workdir)")
	f.workDir = fs.String("workdir", "", "`dir` for the steps' stores, collector logs and profiles (default: a new temporary dir, kept)")
	f.targetCmd = fs.String("target-cmd", "", "collector `command line` to measure instead of xrdmon collect")
	f.target = fs.String("target", "xrdmon", "`target`: xrdmon (this xrdmon's collect) or null (a receiver that only counts datagrams: the machine's ceiling)")
	fs.BoolVar(&bc.Pregenerate, "pregenerate", false, "generate each step's packets in memory before starting the collector, then only send them\n"+
		"(memory: ~285 bytes per packet, e.g. 3.4 GB for 200,000/s for 60 s; see --pregenerate-max-bytes)")
	fs.IntVar(&bc.SendWorkers, "send-workers", 0, "most `goroutines` sending UDP at once, one server's packets always on one (0: one per CPU)")
	fs.Int64Var(&bc.PregenerateMax, "pregenerate-max-bytes", loadgen.DefaultPregenerateMax, "with --pregenerate: refuse a step whose packets need more than this many `bytes`")
	f.recJSONL = fs.String("records-jsonl", "", "with --target-cmd: JSON-lines `file` the collector writes records to")
	f.recAMQP = fs.String("records-amqp", "", "with --target-cmd: RabbitMQ `URL` of the queue the collector publishes records to")
	f.recQueue = fs.String("records-queue", "", "with --records-amqp: the `queue`")
	f.matchPath = fs.Bool("match-path", false, "match records by (server IP, path) when they carry no server start time and file id (default for --target-cmd)")
	f.csv = fs.String("csv", "", "write the table as CSV to `file`")
	f.svg = fs.String("svg", "", "write a chart of rate vs loss and latency (SVG) to `file`")
	fs.BoolVar(&bc.StopOnLoss, "stop-on-loss", false, "end the scenario after the first step with loss (rate ramps)")
	f.stages = fs.String("stages", "", "run nothing: sum the CPU profile `file` (a step's --profile) by stage of the collector: source, shards, writer, store, rollups, sinks, runtime")
	f.fromCSV = fs.String("from-csv", "", "run nothing: read the rows of an earlier --csv `file` and print, chart (--svg) them")
	f.verbose = fs.Bool("v", false, "log each step's progress to standard error")
	return f
}

// applyQuick makes the --quick run's defaults those of the flags not
// given.
func (f *benchFlags) applyQuick(fs *flag.FlagSet, base *loadgen.Config, bc *bench.Config) {
	if !flagSet(fs, "scenario") {
		*f.scenario = "clients=5,10"
	}
	if !flagSet(fs, "rate") {
		base.Rate = 2000
	}
	if !flagSet(fs, "step-duration") {
		bc.StepDuration = 2 * time.Second
	}
	if !flagSet(fs, "quiet") {
		bc.Quiet = time.Second
	}
	if !flagSet(fs, "max-settle") {
		bc.MaxSettle = 20 * time.Second
	}
}

// benchTarget returns the collector the flags ask to measure: this
// xrdmon's collect, the null receiver or --target-cmd.
func (f *benchFlags) benchTarget(fs *flag.FlagSet, stderr io.Writer) (bench.Target, error) {
	if *f.target != "xrdmon" && *f.target != "null" {
		fmt.Fprintf(stderr, "xrdmon bench: --target %q: want xrdmon or null\n", *f.target)
		return bench.Target{}, errUsage
	}
	if *f.target == "null" && *f.targetCmd != "" {
		fmt.Fprintln(stderr, "xrdmon bench: --target null and --target-cmd exclude each other")
		return bench.Target{}, errUsage
	}
	if *f.targetCmd != "" {
		argv, err := splitCommand(*f.targetCmd)
		if err != nil {
			fmt.Fprintf(stderr, "xrdmon bench: --target-cmd: %v\n", err)
			return bench.Target{}, errUsage
		}
		t := bench.Target{Command: argv, JSONL: *f.recJSONL, AMQPURL: *f.recAMQP, AMQPQueue: *f.recQueue, MatchByPath: true}
		if flagSet(fs, "match-path") {
			t.MatchByPath = *f.matchPath
		}
		if *f.recJSONL == "" && (*f.recAMQP == "" || *f.recQueue == "") {
			fmt.Fprintln(stderr, "xrdmon bench: --target-cmd needs --records-jsonl or --records-amqp with --records-queue")
			return bench.Target{}, errUsage
		}
		return t, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return bench.Target{}, fmt.Errorf("find xrdmon executable: %w", err)
	}
	if *f.target == "null" {
		return bench.NullTarget(exe), nil
	}
	t := bench.XrdmonTarget(exe)
	t.MatchByPath = *f.matchPath
	return t, nil
}

// benchWorkDir makes the work directory dir, or a new temporary one when
// dir is empty.
func benchWorkDir(dir string) (string, error) {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "xrdmon-bench-")
		if err != nil {
			return "", fmt.Errorf("create work dir: %w", err)
		}
		return tmp, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create work dir: %w", err)
	}
	return dir, nil
}

// writeRows prints the table of the rows, writes the --csv and --svg files
// and names the CPU profiles taken.
func (f *benchFlags) writeRows(rows []bench.Row, scenario string, stdout, stderr io.Writer) error {
	if len(rows) > 0 {
		bench.WriteTable(stdout, rows, true)
	}
	if *f.csv != "" && len(rows) > 0 {
		if err := writeFileWith(*f.csv, func(w io.Writer) error { return bench.WriteCSV(w, rows) }); err != nil {
			return err
		}
	}
	if *f.svg != "" && len(rows) > 0 {
		title := "xrdmon bench: " + scenario
		if err := writeFileWith(*f.svg, func(w io.Writer) error { return bench.WriteSVG(w, rows, title) }); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if r.Profile != "" {
			fmt.Fprintf(stderr, "bench: %s: CPU profile %s\n", r.Step, r.Profile)
			if stages, err := bench.StagesOfFile(r.Profile); err == nil {
				fmt.Fprintf(stderr, "bench: %s: CPU by stage: %s\n", r.Step, bench.FormatStages(stages))
			}
		}
	}
	return nil
}

func flagSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}

func writeFileWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

// splitCommand splits a command line into words: blanks separate words,
// single quotes keep everything literally, double quotes keep blanks and
// a backslash escapes the next character outside single quotes.
func splitCommand(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	esc := false
	for _, c := range s {
		switch {
		case esc:
			cur.WriteRune(c)
			esc = false
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else {
				cur.WriteRune(c)
			}
		case c == '\\':
			esc, inWord = true, true
		case quote == '"':
			if c == '"' {
				quote = 0
			} else {
				cur.WriteRune(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	if quote != 0 || esc {
		return nil, errors.New("unterminated quote or escape")
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, errors.New("empty command")
	}
	return words, nil
}

// benchFromCSV prints and charts the rows of an earlier run.
func benchFromCSV(path, svgPath, title string, stdout io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open csv: %w", err)
	}
	rows, err := bench.ReadCSV(f)
	f.Close()
	if err != nil {
		return err
	}
	bench.WriteTable(stdout, rows, true)
	if svgPath == "" {
		return nil
	}
	return writeFileWith(svgPath, func(w io.Writer) error { return bench.WriteSVG(w, rows, "xrdmon bench: "+title) })
}
