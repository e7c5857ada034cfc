package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/file"
)

const replaySynopsis = "[--schema native|gracc|wlcg] [--out FILE] [--events FILE] INPUT...\n\n" +
	"Decodes captures and writes one JSON line per transfer record. INPUT is a\n" +
	"shoveler message file (JSON lines with remote, version, data), a pcap or\n" +
	"pcapng file of UDP datagrams, or - for standard input. At the end of input,\n" +
	"files still open are written as partial records (reason end_of_input).\n" +
	"A summary goes to standard error."

// runReplay implements `xrdmon replay`.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replay", replaySynopsis, stderr)
	schema := fs.String("schema", "native", "record format: native, gracc or wlcg")
	out := fs.String("out", "", "write records to `FILE` instead of standard output")
	events := fs.String("events", "", "also write g-stream events as JSON lines to `FILE`")
	wlcgVOs := fs.String("wlcg-vos", "", "with --schema wlcg: comma-separated `VOs` whose records are WLCG (default: cms,dteam)")
	wlcgPaths := fs.String("wlcg-paths", "", "with --schema wlcg: comma-separated path `prefixes` whose records are WLCG (default: /store,/user/dteam)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to `FILE` (for performance work)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("create profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("start profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "xrdmon replay: no INPUT given (use - for standard input)")
		fs.Usage()
		return errUsage
	}
	enc, err := record.Encoder(*schema)
	if err != nil {
		fmt.Fprintf(stderr, "xrdmon replay: --schema: %v\n", err)
		return errUsage
	}
	var match func(*record.Record) bool
	if *schema == "wlcg" {
		m := record.DefaultWLCGMatcher()
		if *wlcgVOs != "" || *wlcgPaths != "" {
			m = &record.WLCGMatcher{VOs: splitList(*wlcgVOs), PathPrefixes: splitList(*wlcgPaths)}
		}
		match = m.Match
	}

	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return fmt.Errorf("create output: %w", err)
		}
		defer f.Close()
		w = f
	}
	var ew io.Writer
	if *events != "" {
		f, err := os.Create(*events)
		if err != nil {
			return fmt.Errorf("create events output: %w", err)
		}
		defer f.Close()
		ew = f
	}

	src, err := file.New(file.Config{Paths: fs.Args(), BatchSize: 512}, nil, nil)
	if err != nil {
		return err
	}
	// The bounds and timeouts of collect's defaults (one shard: replay's
	// output is in the order the records were made).
	r := &replayer{enc: enc, match: match, shard: correlate.NewShard(correlateConfig(config.Default().Correlate, 1))}
	sum, err := r.run(ctx, src, w, ew)
	st := r.shard.Stats()
	st.InvalidEvents += r.invalidEvents
	sum.write(stderr, st)
	if err != nil {
		return err
	}
	if sum.packets == 0 && sum.readErr != nil {
		return sum.readErr
	}
	return nil
}

// replayer runs the replay pipeline: a reader goroutine (the file source)
// feeds batches to the correlating goroutine, which hands encoded chunks of
// output to a writer goroutine. One shard keeps the output deterministic.
type replayer struct {
	enc   func([]byte, *record.Record) []byte
	match func(*record.Record) bool
	shard *correlate.Shard
	// invalidEvents counts g-stream lines that were not valid JSON; the
	// writer goroutine owns it until run returns.
	invalidEvents uint64
}

type replaySummary struct {
	packets int64
	elapsed time.Duration
	readErr error
}

func (r *replayer) run(ctx context.Context, src *file.File, w, ew io.Writer) (replaySummary, error) {
	var sum replaySummary
	start := time.Now()
	batches := make(chan *source.Batch, 8)
	readDone := make(chan error, 1)
	go func() {
		readDone <- src.Run(ctx, batches)
		close(batches)
	}()

	// The correlating goroutine hands records and events over in chunks;
	// the writer goroutine encodes and writes them, so JSON encoding runs
	// beside correlation rather than after it. Chunks are recycled.
	type chunk struct {
		recs []record.Record
		evs  []record.Event
	}
	chunks := make(chan *chunk, 4)
	free := make(chan *chunk, 6)
	for range cap(free) {
		free <- &chunk{}
	}
	writeDone := make(chan error, 1)
	go func() {
		bw := bufio.NewWriterSize(w, 1<<20)
		var ebw *bufio.Writer
		if ew != nil {
			ebw = bufio.NewWriterSize(ew, 1<<20)
		}
		var buf []byte
		var err error
		for c := range chunks {
			if err == nil {
				buf = buf[:0]
				for i := range c.recs {
					if r.match != nil && !r.match(&c.recs[i]) {
						continue
					}
					buf = r.enc(buf, &c.recs[i])
					buf = append(buf, '\n')
				}
				_, err = bw.Write(buf)
			}
			for i := range c.evs {
				if !record.TypeEvent(&c.evs[i]) {
					r.invalidEvents++
				}
			}
			if err == nil && ebw != nil {
				buf = buf[:0]
				for i := range c.evs {
					buf = record.AppendEventJSON(buf, &c.evs[i])
					buf = append(buf, '\n')
				}
				_, err = ebw.Write(buf)
			}
			clear(c.recs)
			clear(c.evs)
			c.recs, c.evs = c.recs[:0], c.evs[:0]
			free <- c
		}
		if err == nil {
			err = bw.Flush()
		}
		if err == nil && ebw != nil {
			err = ebw.Flush()
		}
		writeDone <- err
	}()

	var last time.Time
	cur := <-free
	emit := func(force bool) {
		cur.recs = r.shard.TakeRecords(cur.recs)
		cur.evs = r.shard.TakeRawEvents(cur.evs) // typed by the writer
		if len(cur.recs)+len(cur.evs) >= 4096 || (force && len(cur.recs)+len(cur.evs) > 0) {
			chunks <- cur
			cur = <-free
		}
	}
	for b := range batches {
		for i := range b.Packets {
			p := &b.Packets[i]
			r.shard.Handle(p.Data, p.Sender, p.Received)
			if p.Received.After(last) {
				last = p.Received
			}
		}
		sum.packets += int64(len(b.Packets))
		if b.Free != nil {
			b.Free()
		}
		emit(false)
	}
	sum.readErr = <-readDone
	if last.IsZero() {
		last = time.Now()
	}
	r.shard.Flush(last)
	emit(true)
	close(chunks)
	werr := <-writeDone
	sum.elapsed = time.Since(start)
	if werr != nil {
		return sum, fmt.Errorf("write records: %w", werr)
	}
	if sum.readErr != nil && !errors.Is(sum.readErr, context.Canceled) && sum.packets > 0 {
		// Part of the input was read: report, but the records are out.
		return sum, nil
	}
	return sum, nil
}

func (s replaySummary) write(w io.Writer, st correlate.Stats) {
	rate := 0.0
	if s.elapsed > 0 {
		rate = float64(s.packets) / s.elapsed.Seconds()
	}
	fmt.Fprintf(w, "replay: %d packets in %s (%.0f packets/s)\n", s.packets, s.elapsed.Round(time.Millisecond), rate)
	writeStats(w, &st)
	if s.readErr != nil {
		fmt.Fprintf(w, "replay: input error: %v\n", s.readErr)
	}
}

func splitList(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// writeStats writes what happened to every packet and what came of it.
func writeStats(w io.Writer, st *correlate.Stats) {
	fmt.Fprintf(w, "packets: %d handled, %d accounted, %d rejected, %d lost (sequence gaps)",
		st.Packets, st.Accounted, st.TotalRejected(), st.TotalLost())
	fmt.Fprintf(w, "; %d duplicate, %d reordered, %d sequence collisions (applied)\n", st.Duplicates, st.Reordered, st.SeqCollisions)
	for _, r := range correlate.RejectReasons() {
		if n := st.Rejected[r]; n > 0 {
			fmt.Fprintf(w, "  rejected %-20s %d\n", r.String()+":", n)
		}
	}
	for d := correlate.Domain(0); d < correlate.NumDomains; d++ {
		if n := st.Lost[d]; n > 0 {
			fmt.Fprintf(w, "  lost in %-21s %d\n", d.String()+":", n)
		}
	}
	partial := st.TotalRecords() - st.RecordsFor(record.Complete)
	fmt.Fprintf(w, "records: %d complete, %d partial", st.RecordsFor(record.Complete), partial)
	if partial > 0 {
		sep := " ("
		for _, r := range record.Reasons {
			if n := st.RecordsFor(r); n > 0 {
				fmt.Fprintf(w, "%s%s %d", sep, r, n)
				sep = ", "
			}
		}
		fmt.Fprint(w, ")")
	}
	fmt.Fprintf(w, "; events: %d (%d invalid)\n", st.Events, st.InvalidEvents)
}
