package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
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
	replayGC()
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

// replayGCPercent and replayMemoryLimit are the garbage collector's
// settings in replay (see replayGC).
const (
	replayGCPercent   = 400
	replayMemoryLimit = 3 << 30
)

// replayGC makes the garbage collector run less often than in collect,
// unless GOGC or GOMEMLIMIT are set. Replay is a batch run whose live heap
// is small at first and grows as its tables fill; at GOGC=100 its cycles
// come while the one shard, the critical path, works (4 in the bus
// benchmark's 100,244 messages, which then take 7 % longer:
// BENCHMARKS.md). replayGCPercent lets the heap grow to five times the
// live bytes; replayMemoryLimit, three times the shard's state bound
// (correlate.Config.MaxStateBytes), is a soft cap that makes the
// collector run sooner on a capture whose state grows large.
func replayGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(replayGCPercent)
	debug.SetMemoryLimit(replayMemoryLimit)
}

// replayPipeline returns collect's pipeline set up for replay: collect's
// correlation defaults, one shard (records come out in the order they were
// made), no checkpoints, time taken from the input, a commit every 256 KiB
// of datagrams as well (a run of large f-stream buffers closes thousands
// of files: their records are written while the shard goes on), and files
// still open at the end written as partial records (end_of_input).
func replayPipeline(ctx context.Context, out pipeline.Store) (*pipeline.Pipeline, error) {
	o := pipeline.DefaultOptions()
	o.Shards = 1
	o.Correlate = config.Default().Correlate.Correlate(o.Shards)
	o.StateKey = ""
	o.FlushOnExit = true
	o.InputClock = true
	o.Progress = false // progress snapshots are internal, for rollups: replay writes none
	o.CommitBytes = 256 << 10
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
	jobs  []replayJob
	// pending are the encoded parts of the last Append's last round, not
	// yet written: the next Append writes them while it encodes (flush at
	// the end).
	pending []replayJob
	free    [][]byte // buffers of written parts, for reuse
}

// replayJob is one part of an Append to encode, records or events, and
// its encoded bytes; once encoded, only buf and events are kept.
type replayJob struct {
	recs   []record.Record
	evs    []record.Event
	buf    []byte
	events bool // buf goes to the events output
}

// replayPart is how many records (or events) one encoder takes at a time:
// a commit can hold tens of thousands (a drain), encoded on every core in
// parts of replayPart, and one buffer for all of them would be regrown to
// tens of megabytes.
const replayPart = 512

// AppendWithProgress writes recs and evs (Append); progress snapshots
// (for rollups, which replay has none of) are not written.
func (r *replayWriter) AppendWithProgress(ctx context.Context, recs []record.Record, evs []record.Event, _ []record.Record) error {
	return r.Append(ctx, recs, evs)
}

// Append writes recs and evs, in order, each to its own output. They are
// encoded in parts of replayPart, a round of parts at a time, one part per
// core, and each round is written while the next is encoded. The last
// round is written by the next Append or flush: Append keeps no record or
// event, only their encoded bytes.
func (r *replayWriter) Append(_ context.Context, recs []record.Record, evs []record.Event) error {
	if r.ew == nil {
		evs = nil
	}
	jobs := r.jobs[:0]
	for len(recs) > 0 {
		k := min(len(recs), replayPart)
		jobs = append(jobs, replayJob{recs: recs[:k]})
		recs = recs[k:]
	}
	for len(evs) > 0 {
		k := min(len(evs), replayPart)
		jobs = append(jobs, replayJob{evs: evs[:k]})
		evs = evs[k:]
	}
	defer func() { clear(jobs); r.jobs = jobs[:0] }()
	n := runtime.GOMAXPROCS(0)
	for rest := jobs; len(rest) > 0; {
		round := rest[:min(n, len(rest))]
		rest = rest[len(round):]
		for i := range round {
			round[i].buf = r.buffer()
		}
		var wg sync.WaitGroup
		for i := 1; i < len(round); i++ {
			j := &round[i]
			wg.Go(func() { r.encode(j) })
		}
		err := r.writePending() // the last round, while this one is encoded
		if err == nil {
			r.encode(&round[0])
		}
		wg.Wait()
		if err != nil {
			return err
		}
		for _, j := range round {
			r.pending = append(r.pending, replayJob{buf: j.buf, events: j.evs != nil})
		}
	}
	return nil
}

// buffer returns an empty buffer for a part.
func (r *replayWriter) buffer() []byte {
	if n := len(r.free); n > 0 {
		b := r.free[n-1]
		r.free = r.free[:n-1]
		return b[:0]
	}
	return nil
}

// encode appends the JSON lines of j's records that match, or of its
// events, to j.buf.
func (r *replayWriter) encode(j *replayJob) {
	dst := j.buf
	for i := range j.recs {
		if r.match != nil && !r.match(&j.recs[i]) {
			continue
		}
		dst = r.enc(dst, &j.recs[i])
		dst = append(dst, '\n')
	}
	for i := range j.evs {
		dst = record.AppendEventJSON(dst, &j.evs[i])
		dst = append(dst, '\n')
	}
	j.buf = dst
}

// writePending writes the encoded parts not yet written, in order.
func (r *replayWriter) writePending() error {
	for i, j := range r.pending {
		var err error
		if j.events {
			if _, err = r.ew.Write(j.buf); err != nil {
				err = fmt.Errorf("write events: %w: %w", store.ErrPermanent, err)
			}
		} else if _, err = r.w.Write(j.buf); err != nil {
			err = fmt.Errorf("write records: %w: %w", store.ErrPermanent, err)
		}
		if err != nil {
			r.pending = r.pending[i:]
			return err
		}
		r.free = append(r.free, j.buf)
	}
	clear(r.pending)
	r.pending = r.pending[:0]
	return nil
}

func (r *replayWriter) flush() error {
	if err := r.writePending(); err != nil {
		return err
	}
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
