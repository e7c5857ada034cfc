package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/pipeline"
	"github.com/xrdmon/xrdmon/internal/progress"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/file"
	"github.com/xrdmon/xrdmon/internal/store"
)

// runReplay implements `xrdmon replay`.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlagSet("replay", helpText("replay"), stderr)
	schema := fs.String("schema", "native", "record format: native, gracc or wlcg")
	flavour := fs.String("gracc-flavour", record.GRACCPython, "with --schema gracc: python (the Python OSG collector's document) or go (the shoveler's collector mode)")
	wlcgOnly := fs.Bool("wlcg-only", false, "with --schema gracc: write records matching the WLCG rules as WLCG documents instead, as the OSG collectors route them")
	out := fs.String("out", "", "write records to `FILE` instead of standard output")
	events := fs.String("events", "", "also write g-stream events as JSON lines to `FILE`")
	wlcgVOs := fs.String("wlcg-vos", "", "with --schema wlcg or --wlcg-only: comma-separated `VOs` whose records are WLCG (default: cms,dteam)")
	wlcgPaths := fs.String("wlcg-paths", "", "with --schema wlcg or --wlcg-only: comma-separated path `prefixes` whose records are WLCG (default: /store,/user/dteam)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to `FILE` (for performance work)")
	memProfile := fs.String("memprofile", "", "write an allocation profile to `FILE` at the end (for performance work)")
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
	if *memProfile != "" {
		defer func() {
			if f, err := os.Create(*memProfile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "xrdmon replay: no INPUT given (use - for standard input)")
		fs.Usage()
		return errUsage
	}
	enc, err := record.EncoderFlavour(*schema, *flavour)
	if err != nil {
		fmt.Fprintf(stderr, "xrdmon replay: --schema/--gracc-flavour: %v\n", err)
		return errUsage
	}
	m := record.DefaultWLCGMatcher()
	if *wlcgVOs != "" || *wlcgPaths != "" {
		m = &record.WLCGMatcher{VOs: splitList(*wlcgVOs), PathPrefixes: splitList(*wlcgPaths)}
	}
	var match func(*record.Record) bool
	switch {
	case *schema == record.SchemaWLCG:
		match = m.Match
	case *schema == record.SchemaGRACC && *wlcgOnly:
		gracc := enc
		enc = func(dst []byte, r *record.Record) []byte {
			if m.Match(r) {
				return record.AppendWLCG(dst, r)
			}
			return gracc(dst, r)
		}
	}

	w, closeOut, err := createOutput(*out, "output", stdout)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeOut()) }()
	ew, closeEvents, err := createOutput(*events, "events output", nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeEvents()) }()

	fcfg := file.DefaultOptions()
	fcfg.Paths = fs.Args()
	src, err := file.New(fcfg, nil, nil)
	if err != nil {
		return err
	}
	rw := &replayWriter{enc: enc, match: match, w: bufio.NewWriterSize(w, 1<<20)}
	if ew != nil {
		rw.ew = bufio.NewWriterSize(ew, 1<<20)
	}
	sum, st, err := replay(ctx, src, rw, stderr)
	sum.write(stderr, st)
	if err != nil {
		return err
	}
	if sum.packets == 0 && sum.readErr != nil {
		return sum.readErr
	}
	return nil
}

// replayPipeline returns collect's pipeline set up for replay: collect's
// correlation defaults, one shard (records come out in the order they were
// made), no checkpoints, time taken from the input, and files still open
// at the end written as partial records (end_of_input).
func replayPipeline(ctx context.Context, out pipeline.Store) (*pipeline.Pipeline, error) {
	o := pipeline.DefaultOptions()
	o.Shards = 1
	o.Correlate = config.Default().Correlate.Correlate(o.Shards)
	o.StateKey = ""
	o.FlushOnExit = true
	o.InputClock = true
	o.Progress = false // progress snapshots are internal, for rollups: replay writes none
	return pipeline.New(ctx, o, out, nil, nil, nil)
}

// replay runs src through the pipeline into out and returns what happened;
// on a terminal, progress shows how far it has come.
func replay(ctx context.Context, src *file.File, out *replayWriter, progressTo io.Writer) (replaySummary, correlate.Stats, error) {
	var sum replaySummary
	start := time.Now()
	pipe, err := replayPipeline(ctx, out)
	if err != nil {
		return sum, correlate.Stats{}, err
	}
	batches := make(chan *source.Batch, 8)
	readDone := make(chan error, 1)
	go func() {
		readDone <- src.Run(ctx, batches)
		close(batches)
	}()
	stopProgress := progress.Start(progressTo, func() progress.Sample {
		done, total := src.Progress()
		return progress.Sample{Label: "replay", Done: done, Total: total, Bytes: true,
			Count: int64(pipe.Stats().Packets), CountUnit: "packets"}
	})
	err = pipe.Run(context.Background(), batches)
	stopProgress()
	sum.readErr = <-readDone
	if errors.Is(sum.readErr, context.Canceled) {
		sum.readErr = nil
	}
	if err == nil {
		err = out.flush()
	}
	st := pipe.Stats()
	sum.packets = int64(st.Packets)
	sum.elapsed = time.Since(start)
	return sum, st, err
}

// replayWriter is the pipeline's store in replay: it writes each record as
// a JSON line in the chosen schema, and events to their own file. Its
// Append runs on the pipeline's writer goroutine, beside correlation.
type replayWriter struct {
	enc   func([]byte, *record.Record) []byte
	match func(*record.Record) bool
	w, ew *bufio.Writer
	buf   []byte
	bufs  [][]byte // one per encoder of a large commit (encodeParallel)
}

// replayChunk is how many encoded bytes Append gathers before it writes
// them: a commit can hold tens of thousands of records (a drain), and one
// buffer for all of them would be regrown to tens of megabytes.
const replayChunk = 256 << 10

// replayPart is how many records one encoder takes at a time when a commit
// is large enough to encode on every core.
const replayPart = 512

// AppendWithProgress writes recs and evs (Append); progress snapshots
// (for rollups, which replay has none of) are not written.
func (r *replayWriter) AppendWithProgress(ctx context.Context, recs []record.Record, evs []record.Event, _ []record.Record) error {
	return r.Append(ctx, recs, evs)
}

// Append writes recs and evs.
func (r *replayWriter) Append(_ context.Context, recs []record.Record, evs []record.Event) error {
	if err := r.appendRecords(recs); err != nil {
		return err
	}
	if r.ew == nil {
		return nil
	}
	buf := r.buf[:0]
	defer func() { r.buf = buf }()
	for i := range evs {
		buf = record.AppendEventJSON(buf, &evs[i])
		buf = append(buf, '\n')
		if len(buf) >= replayChunk {
			if _, err := r.ew.Write(buf); err != nil {
				return fmt.Errorf("write events: %w: %w", store.ErrPermanent, err)
			}
			buf = buf[:0]
		}
	}
	if _, err := r.ew.Write(buf); err != nil {
		return fmt.Errorf("write events: %w: %w", store.ErrPermanent, err)
	}
	return nil
}

// appendRecords encodes and writes recs in order. A large commit (a drain
// closes thousands of files at once, and the correlator waits for it) is
// encoded on every core, replayPart records per encoder, and written in
// order.
func (r *replayWriter) appendRecords(recs []record.Record) error {
	n := runtime.GOMAXPROCS(0)
	if n < 2 || len(recs) < 2*replayPart {
		n = 1
	}
	if len(r.bufs) < n {
		r.bufs = append(r.bufs, make([][]byte, n-len(r.bufs))...)
	}
	for len(recs) > 0 {
		parts := min(n, (len(recs)+replayPart-1)/replayPart)
		var wg sync.WaitGroup
		for w := range parts {
			part := recs[w*replayPart : min((w+1)*replayPart, len(recs))]
			if parts == 1 {
				r.bufs[0] = r.encode(r.bufs[0][:0], part)
				break
			}
			wg.Go(func() { r.bufs[w] = r.encode(r.bufs[w][:0], part) })
		}
		wg.Wait()
		for _, b := range r.bufs[:parts] {
			if _, err := r.w.Write(b); err != nil {
				return fmt.Errorf("write records: %w: %w", store.ErrPermanent, err)
			}
		}
		recs = recs[min(parts*replayPart, len(recs)):]
	}
	return nil
}

// encode appends the JSON lines of the records of recs that match.
func (r *replayWriter) encode(dst []byte, recs []record.Record) []byte {
	for i := range recs {
		if r.match != nil && !r.match(&recs[i]) {
			continue
		}
		dst = r.enc(dst, &recs[i])
		dst = append(dst, '\n')
	}
	return dst
}

func (r *replayWriter) flush() error {
	if err := r.w.Flush(); err != nil {
		return fmt.Errorf("write records: %w", err)
	}
	if r.ew != nil {
		if err := r.ew.Flush(); err != nil {
			return fmt.Errorf("write events: %w", err)
		}
	}
	return nil
}

// PutState is not used: replay keeps no checkpoints.
func (r *replayWriter) PutState(context.Context, string, []byte) error { return nil }

// GetState reports that replay has no checkpoint.
func (r *replayWriter) GetState(context.Context, string) ([]byte, error) {
	return nil, store.ErrNotFound
}

type replaySummary struct {
	packets int64
	elapsed time.Duration
	readErr error
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
	fmt.Fprintf(w, "; %d duplicate, %d reordered (late, filled a gap), %d stale (later than the horizon), %d sequence collisions (applied)\n",
		st.Duplicates, st.Reordered, st.Stale, st.SeqCollisions)
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
