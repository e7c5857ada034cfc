package loadgen

import (
	"fmt"
	"time"
)

// Delivery: each packet a server emits passes the impairments (loss,
// reordering, duplication) into a batch; full batches go to the writer
// goroutine, paced at Config.Rate, which hands them to the Output.

const arenaSize = 4 << 20

// nBufsets is the number of batches in flight between generator and writer.
const nBufsets = 3
const arenaSpare = 4 * 65536

// room makes sure the arena can take another packet (and a held and a
// duplicate one); it returns false once the run must stop.
func (r *run) room() bool {
	if r.stopped {
		return false
	}
	if r.cfg.Count > 0 && r.truth.Generated >= r.cfg.Count {
		r.stopped = true
		return false
	}
	if cap(r.arena)-len(r.arena) < arenaSpare || len(r.batch) >= r.batchMax {
		r.flushBatch()
	}
	return !r.stopped
}

// emit passes a generated packet (in the arena) through the impairments to
// the batch.
func (r *run) emit(s *server, dom int, data []byte) {
	t := r.truth
	t.Generated++
	t.Bytes += int64(len(data))
	r.tally[s.idx].packets[dom]++
	r.lastMs = r.now
	cfg := r.cfg
	if cfg.Loss > 0 && r.imp.Float64() < cfg.Loss {
		t.Dropped++
		r.tally[s.idx].dropped[dom]++
		return
	}
	if cfg.Reorder > 0 && !s.isHeld && r.imp.Float64() < cfg.Reorder {
		s.held = append(s.held[:0], data...)
		s.isHeld, s.heldD = true, dom
		t.Reordered++
		return
	}
	r.push(s, data, false)
	if s.isHeld {
		r.push(s, s.held, true)
		s.isHeld = false
	}
	if cfg.Duplicate > 0 && r.imp.Float64() < cfg.Duplicate {
		t.Duplicated++
		r.push(s, data, false)
	}
}

// push appends a packet to the batch; copy copies data into the arena first.
func (r *run) push(s *server, data []byte, copyData bool) {
	if copyData {
		start := len(r.arena)
		r.arena = append(r.arena, data...)
		data = r.arena[start:]
	}
	r.batch = append(r.batch, Packet{Data: data, Server: s.idx, Sender: s.addr, Time: time.UnixMilli(r.now).UTC()})
	r.truth.Emitted++
}

// bufset is one batch and the arena its packets point into. The generator
// fills one while the writer goroutine hands another to the output.
type bufset struct {
	batch []Packet
	arena []byte
	final int // records final once this batch is written
}

// startWriter starts the goroutine that calls out.Write, so that building
// packets and sending them (system calls) overlap.
func (r *run) startWriter() {
	r.full = make(chan *bufset, nBufsets)
	r.free = make(chan *bufset, nBufsets)
	r.wdone = make(chan struct{})
	for range nBufsets - 1 {
		r.free <- &bufset{arena: make([]byte, 0, arenaSize)}
	}
	go func() {
		defer close(r.wdone)
		for bs := range r.full {
			if r.werr == nil {
				if err := r.out.Write(r.ctx, bs.batch); err != nil {
					r.werr = fmt.Errorf("write packets: %w", err)
				} else if sent := r.g.hooks.Sent; sent != nil {
					sent(bs.final, time.Now())
				}
			}
			clear(bs.batch)
			bs.batch, bs.arena = bs.batch[:0], bs.arena[:0]
			r.free <- bs
		}
	}()
}

// stopWriter waits for the writer to deliver everything handed to it.
func (r *run) stopWriter() {
	close(r.full)
	<-r.wdone
	if r.err == nil && r.werr != nil {
		r.err = r.werr
	}
}

// flushBatch hands the batch to the writer, pacing at cfg.Rate, and takes
// an empty one.
func (r *run) flushBatch() {
	if len(r.batch) == 0 || r.err != nil {
		r.batch, r.arena = r.batch[:0], r.arena[:0]
		return
	}
	if err := r.ctx.Err(); err != nil {
		r.err, r.stopped = err, true
		return
	}
	if r.cfg.Rate > 0 {
		due := r.paceStart.Add(time.Duration(float64(r.delivered) / r.cfg.Rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.ctx.Done():
				t.Stop()
				r.err, r.stopped = r.ctx.Err(), true
				return
			}
		}
	}
	r.delivered += int64(len(r.batch))
	r.full <- &bufset{batch: r.batch, arena: r.arena, final: r.final}
	bs := <-r.free // after the writer finished a Write: werr is visible
	if r.werr != nil {
		r.err, r.stopped = r.werr, true
	}
	r.batch, r.arena = bs.batch, bs.arena
}

// releaseHeld sends the packets still held back for reordering, at the
// end of the run.
func (r *run) releaseHeld() {
	for i := range r.servers {
		s := &r.servers[i]
		if s.isHeld {
			r.push(s, s.held, true)
			s.isHeld = false
		}
	}
}
