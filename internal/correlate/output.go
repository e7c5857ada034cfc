package correlate

import "github.com/xrdmon/xrdmon/internal/record"

// Output is everything a shard hands over at a barrier: what it made since
// the previous Drain. It is filled by Shard.Drain, once per barrier, and
// then belongs to the caller (the pipeline's writer): the shard keeps no
// reference to anything in it.
//
// Drain appends to every slice, so several shards can drain into one
// Output in turn (the pipeline's barrier does, under a lock): each shard's
// part follows the parts of the shards drained before it, and keeps its
// own order as described per field. Drain grows the slices in place, so
// an Output whose slices are emptied (s = s[:0], after clear) and handed
// to the next Drain is reused without allocating. Between shards there is
// no order: a barrier's shards answer in any order.
type Output struct {
	// Records are the shard's records, in chunks of at most RecordChunk
	// records, in the order they were made (chunk by chunk, and within a
	// chunk). The chunks are handed over without a copy: give them back
	// with Shard.Recycle (any shard's) when done, for the next records.
	Records [][]record.Record

	// Events are the events made (g-stream lines, summaries, redirects,
	// FRM messages), in the order made. They are not typed: a g-stream or
	// summary event keeps its producer's line in Raw, and the caller types
	// every event with record.TypeEvent (and counts the invalid ones,
	// Stats.InvalidEvents), typically in another goroutine, so that JSON
	// parsing stays off the packet path. When Events is empty Drain swaps it with the shard's own
	// buffer instead of copying: the emptied slice handed in (its capacity)
	// becomes the shard's, for its next events.
	Events []record.Event

	// Opens are the opens of files with a known client, with
	// Config.ReportOpens (for the redirect Linker), in the order reported.
	Opens []Open

	// Progress are the progress snapshots of open files, with
	// Config.ReportProgress: records with no RecordID whose End is their isXfr's time and whose
	// bytes are cumulative, in the order taken, at most one per file and
	// minute. A file's snapshots precede its record: those not yet drained
	// when it closes are dropped (its record carries all its bytes), so
	// Progress never holds a snapshot of a file whose record was made
	// before the Drain.
	Progress []record.Record

	// Activity is, with Config.ReportActivity, the activity of every
	// server the shard holds at the Drain (ServerActivity), in the order
	// the shard first heard of them. It costs a pass over the servers and
	// no allocation when the slice has room.
	Activity []ServerActivity
}

// Drain appends to o everything the shard made since the last Drain (see
// Output) and forgets it: one call per barrier. Record chunks are handed
// over without a copy, and so are the events when o.Events is empty; the
// rest is copied into o's slices, reusing their capacity.
func (s *Shard) Drain(o *Output) {
	// Records: the filled chunks, then the one being filled (the shard
	// starts a new one, from the chunks given back with Recycle).
	o.Records = append(o.Records, s.full...)
	clear(s.full)
	s.full = s.full[:0]
	if len(s.out) > 0 {
		o.Records = append(o.Records, s.out)
		s.out = nil
	}

	// Events: swapped into an empty destination, else appended.
	if len(o.Events) == 0 {
		evs := s.events
		s.events = o.Events[:0]
		o.Events = evs
	} else {
		o.Events = append(o.Events, s.events...)
		clear(s.events)
		s.events = s.events[:0]
	}

	o.Opens = append(o.Opens, s.opens...)
	clear(s.opens)
	s.opens = s.opens[:0]

	// Progress: the snapshots not dropped since they were taken (a file
	// that closed drops its own, progLink -1), and a new generation.
	if s.progDead == 0 {
		o.Progress = append(o.Progress, s.prog...)
	} else {
		for i := range s.prog {
			if s.progLink[i] >= 0 {
				o.Progress = append(o.Progress, s.prog[i])
			}
		}
	}
	clear(s.prog)
	s.prog = s.prog[:0]
	s.progLink = s.progLink[:0]
	s.progDead = 0
	s.progGen++

	if s.cfg.ReportActivity {
		o.Activity = s.appendActivity(o.Activity)
	}
}
