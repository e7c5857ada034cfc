// Command xrdmon is a monitoring collector for XRootD: it receives the
// servers' UDP monitoring packets (directly or through RabbitMQ), correlates
// them into one transfer record per file access and ships the records to
// accounting storage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/xrdmon/xrdmon/internal/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

// command is one xrdmon subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"collect", "run the collector daemon (UDP, RabbitMQ) writing records to the store", runCollect},
		{"replay", "decode captures (shoveler JSON lines, pcap) and write records", runReplay},
		{"loadgen", "simulate XRootD servers and clients sending monitoring packets", runLoadgen},
		{"bench", "measure a collector end to end (rate, loss, CPU, memory, latency)", runBench},
		{"records", "list the transfer records kept (store or a collector's API)", runRecords},
		{"report", "sum records by site, VO, user, server... for a time window", runReport},
		{"deadletters", "list the entries an output's destination refused, set aside", runDeadLetters},
		{"outputs", "list where each output is in the store's log; forget a removed one's", runOutputs},
		{"bus", "shard the shoveler's messages by server over RabbitMQ (setup, route)", runBus},
		{"version", "print the version", runVersion},
		{"help", "show help for xrdmon or a subcommand", runHelp},
	}
}

// errUsage marks a command-line mistake: exit status 2 and no extra message
// (the flag package has already printed one).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-version", "--version":
		name = "version"
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		default:
			fmt.Fprintf(stderr, "xrdmon %s: %v\n", name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "xrdmon: unknown command %q\nRun 'xrdmon help' for the list of commands.\n", name)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "xrdmon %s: a monitoring collector for XRootD\n\nUsage:\n  xrdmon <command> [flags] [arguments]\n\nCommands:\n", versionString())
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'xrdmon help <command>' or 'xrdmon <command> -h' for a command's flags.\n")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("xrdmon "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: xrdmon %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// createFile creates the file path for writing; what names it in the
// error.
func createFile(path, what string) (*os.File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", what, err)
	}
	return f, nil
}

// createOutput returns the file path created for writing and its close
// (whose error says whether what was written reached the file), or def and
// a close that does nothing when path is empty.
func createOutput(path, what string, def io.Writer) (io.Writer, func() error, error) {
	if path == "" {
		return def, func() error { return nil }, nil
	}
	f, err := createFile(path, what)
	if err != nil {
		return nil, nil, err
	}
	return f, func() error {
		if err := f.Close(); err != nil {
			return fmt.Errorf("close %s: %w", what, err)
		}
		return nil
	}, nil
}

// parseFlags parses args, mapping a parse error to errUsage. A mistake
// gets one line and the closest flag ("did you mean"), not the whole
// usage (-h prints that).
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		usage()
		return err
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		msg = "unknown flag --" + name + suggestFlag(fs, name)
	}
	fmt.Fprintf(out, "%s: %s\nRun '%s -h' for every flag.\n", fs.Name(), msg, fs.Name())
	return errUsage
}

// suggestFlag names the defined flag closest to name, if one is close.
func suggestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", max(2, len(name)/4)+1
	fs.VisitAll(func(f *flag.Flag) {
		if d := config.EditDistance(name, f.Name); d < bestD || (d == bestD && f.Name < best) {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean --%s?)", best)
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "xrdmon version: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	fmt.Fprintf(stdout, "xrdmon %s\n", versionString())
	return nil
}

func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] && c.name != "help" {
			return c.run(ctx, []string{"-h"}, stdout, stdout)
		}
	}
	fmt.Fprintf(stderr, "xrdmon help: unknown command %q\n", args[0])
	return errUsage
}
