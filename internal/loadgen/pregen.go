package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// DefaultPregenerateMax is the default bound on the memory of a
// pregenerated run: 6 GiB, about 22 million packets of the default mix,
// which take ~285 bytes each (256 of datagram, 16 of index, slack).
const DefaultPregenerateMax int64 = 6 << 30

// ErrPregenerateTooBig is returned (wrapped) when a pregenerated run would
// exceed its memory bound or the memory available.
var ErrPregenerateTooBig = errors.New("pregenerated packets exceed the memory bound")

// The arena's datagram bytes are kept in chunks of 1<<chunkShift bytes; a
// datagram never spans two chunks.
const (
	chunkShift = 26 // 64 MiB
	chunkSize  = 1 << chunkShift
)

// minAvailable is the memory (MemAvailable) a pregeneration leaves to the
// rest of the machine: it stops with ErrPregenerateTooBig below it.
const minAvailable = 1 << 30

// Pregenerated holds every packet of a run, generated before any is sent,
// in a compact arena: the datagrams in 64 MiB chunks plus 16 bytes per
// packet (where it is, its length, its server). Send then paces them out
// through the UDP output they were generated for, so that while sending the
// process does little more than the sendmmsg calls.
type Pregenerated struct {
	u      *UDP
	chunks [][]byte
	pkts   []pgPacket
	marks  []pgMark
	bytes  int64 // datagram bytes
	max    int64
	sent   func(n int, at time.Time)
	// For the exact marks (refineMarks): each expected record's server
	// and file, and the servers' indices by IP.
	recs   []pgRec
	srvIdx map[string]int32
	// Rate paces Send in packets/s (0: as fast as possible). Pregenerate
	// sets it to the generator's Config.Rate.
	Rate float64
}

// pgPacket locates one datagram: off is chunk<<chunkShift | offset.
type pgPacket struct {
	off uint64
	n   uint32
	srv uint32
}

// pgRec is what refineMarks needs of an expected record: a complete one
// becomes final right after the f-stream packet with its isClose.
type pgRec struct {
	srv      int32 // -1: unknown
	fileID   uint32
	complete bool
}

// pgMark says that once the first pkts packets are sent, the packets of
// records 0..final-1 all are (the generator's Sent hook, replayed by Send).
type pgMark struct {
	pkts  int
	final int
}

// Pregenerate runs the generator as fast as it can, unpaced, keeping every
// packet in memory, and returns them with the ground truth. out is bound
// (one socket per server) as by Run, so the truth has the addresses the
// packets will come from; Send sends them later through it.
//
// The Record hook is called during Pregenerate as during Run. The Sent hook
// is not: Send calls it as it sends, with the records whose packets have
// all been sent. A complete record's last packet is found exactly (the
// f-stream packet with its isClose); other records, and every record when
// the servers share an IP or the run has impairments, count as sent at the
// end of the generator's batch that carries their last packet (1024
// packets when unpaced): late, never early.
//
// Pregenerate fails with ErrPregenerateTooBig once the packets take more
// than maxBytes (0: DefaultPregenerateMax) or the machine's available
// memory drops below 1 GiB. It must not run concurrently with Run.
func (g *Generator) Pregenerate(ctx context.Context, out *UDP, maxBytes int64) (*Pregenerated, *Truth, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultPregenerateMax
	}
	p := &Pregenerated{u: out, max: maxBytes, Rate: g.cfg.Rate, sent: g.hooks.Sent}
	if c := g.cfg.Count; c > 0 {
		if c*16 > maxBytes {
			return nil, nil, fmt.Errorf("%w: %d packets need more than %d bytes", ErrPregenerateTooBig, c, maxBytes)
		}
		p.pkts = make([]pgPacket, 0, c+c/64+16) // room for duplicates
	}
	rate, hooks := g.cfg.Rate, g.hooks
	g.cfg.Rate = 0
	fine := hooks.Sent != nil && g.cfg.Lossless() // impairments hold and repeat packets
	if hooks.Sent != nil {
		g.hooks.Sent = p.mark
	}
	if fine {
		g.hooks.Record = func(i int, rec *record.Record) {
			if hooks.Record != nil {
				hooks.Record(i, rec)
			}
			srv, ok := p.srvIdx[rec.ServerIP]
			if !ok {
				srv = -1
			}
			p.recs = append(p.recs, pgRec{srv: srv, fileID: rec.FileID, complete: rec.Reason == record.Complete})
		}
	}
	defer func() { g.cfg.Rate, g.hooks = rate, hooks }()
	truth, err := g.Run(ctx, (*pgOutput)(p))
	truth.Config.Rate = rate
	if err != nil {
		return nil, truth, err
	}
	if fine {
		p.refineMarks()
	}
	p.recs, p.srvIdx = nil, nil
	return p, truth, nil
}

// refineMarks replaces the marks, one per generator batch, by one per
// packet that completes records: a complete record's last packet is the
// f-stream packet of its server, in its batch, with its isClose (the
// generator finalizes it right after pushing that packet). Other records
// (server restarts, files still open at the end) keep their batch's end.
// Records are sendable in order, so a mark covers the furthest packet of
// all the records before it.
func (p *Pregenerated) refineMarks() {
	type key struct {
		srv int32
		fid uint32
	}
	closes := make(map[key][]int32)
	var fine []pgMark
	lo, first, reach := 0, 0, 0
	for _, mk := range p.marks {
		clear(closes)
		for j := lo; j < mk.pkts; j++ {
			data, srv := p.packet(j)
			if len(data) < packet.HeaderSize || data[0] != packet.CodeFStream {
				continue
			}
			fs, err := packet.DecodeFStream(data)
			if err != nil {
				continue
			}
			for it := fs.Records(); it.Next(); {
				if r := it.Rec(); r.Type == packet.RecClose {
					k := key{int32(srv), r.ID}
					closes[k] = append(closes[k], int32(j))
				}
			}
		}
		for i := first; i < mk.final && i < len(p.recs); i++ {
			last := mk.pkts - 1
			if rc := p.recs[i]; rc.complete && rc.srv >= 0 {
				k := key{rc.srv, rc.fileID}
				if q := closes[k]; len(q) > 0 {
					last, closes[k] = int(q[0]), q[1:]
				}
			}
			reach = max(reach, last+1)
			if n := len(fine); n > 0 && fine[n-1].pkts == reach {
				fine[n-1].final = i + 1
			} else {
				fine = append(fine, pgMark{pkts: reach, final: i + 1})
			}
		}
		lo, first = mk.pkts, mk.final
	}
	p.marks = fine
}

// mark is the generator's Sent hook during Pregenerate (called from its
// writing goroutine right after the Write of the batch).
func (p *Pregenerated) mark(n int, _ time.Time) {
	if k := len(p.marks); k > 0 && p.marks[k-1].final >= n {
		return
	}
	p.marks = append(p.marks, pgMark{pkts: len(p.pkts), final: n})
}

// Len returns the number of packets.
func (p *Pregenerated) Len() int { return len(p.pkts) }

// Bytes returns the datagram bytes.
func (p *Pregenerated) Bytes() int64 { return p.bytes }

// Size returns the memory the arena holds, index included.
func (p *Pregenerated) Size() int64 {
	return int64(len(p.chunks))*chunkSize + int64(cap(p.pkts))*16 + int64(cap(p.marks))*16
}

// packet returns datagram i and its server.
func (p *Pregenerated) packet(i int) ([]byte, int) {
	pk := &p.pkts[i]
	c := p.chunks[pk.off>>chunkShift]
	o := pk.off & (chunkSize - 1)
	return c[o : o+uint64(pk.n) : o+uint64(pk.n)], int(pk.srv)
}

// add copies a datagram into the arena.
func (p *Pregenerated) add(data []byte, srv int) error {
	if len(data) > chunkSize {
		return fmt.Errorf("pregenerate: datagram of %d bytes", len(data))
	}
	k := len(p.chunks) - 1
	if k < 0 || len(p.chunks[k])+len(data) > chunkSize {
		if size := p.Size() + chunkSize; size > p.max {
			return fmt.Errorf("%w: more than %d bytes after %d packets (%d bytes of datagrams); lower the rate or the duration, or raise the bound",
				ErrPregenerateTooBig, p.max, len(p.pkts), p.bytes)
		}
		if avail, ok := memAvailable(); ok && avail < chunkSize+minAvailable {
			return fmt.Errorf("%w: only %d MiB of memory available after %d packets (%d bytes of datagrams)",
				ErrPregenerateTooBig, avail>>20, len(p.pkts), p.bytes)
		}
		p.chunks = append(p.chunks, make([]byte, 0, chunkSize))
		k++
	}
	c := p.chunks[k]
	p.pkts = append(p.pkts, pgPacket{off: uint64(k)<<chunkShift | uint64(len(c)), n: uint32(len(data)), srv: uint32(srv)})
	p.chunks[k] = append(c, data...)
	p.bytes += int64(len(data))
	return nil
}

// pgOutput is the Output Pregenerate runs the generator into.
type pgOutput Pregenerated

func (o *pgOutput) Bind(s []netip.AddrPort) ([]netip.AddrPort, error) {
	bound, err := o.u.Bind(s)
	if err != nil {
		return nil, err
	}
	// Records name their server by IP: usable when every server has its own.
	o.srvIdx = make(map[string]int32, len(bound))
	for i, a := range bound {
		ip := a.Addr().String()
		if _, dup := o.srvIdx[ip]; dup {
			o.srvIdx = nil
			break
		}
		o.srvIdx[ip] = int32(i)
	}
	return bound, nil
}

func (o *pgOutput) Write(_ context.Context, b []Packet) error {
	p := (*Pregenerated)(o)
	for i := range b {
		if err := p.add(b[i].Data, b[i].Server); err != nil {
			return err
		}
	}
	return nil
}

func (o *pgOutput) Close() error { return nil }

// Send sends every packet through the UDP output, paced as Run paces: in
// rounds of Rate/200 packets (5 ms; at most 1024, 1024 when unpaced), each
// due when the packets before it are due. A round is sent by up to the
// output's Workers goroutines, server s by worker s mod Workers, so one
// server's packets keep their order. After each round it calls the Sent
// hook with the records whose packets have all been sent, and updates the
// output's Sent and Failed counts. Send may be called once.
func (p *Pregenerated) Send(ctx context.Context) error {
	u := p.u
	n := len(p.pkts)
	round := 1024
	if p.Rate > 0 {
		round = int(min(max(p.Rate/200, 1), 1024))
	}
	workers := max(min(u.Workers, len(u.bw)), 1)
	u.growStats(workers)
	sendRound := func(lo, hi int) error { return p.sendRange(lo, hi, 0, 1) }
	if workers > 1 {
		sw := p.startWorkers(workers)
		defer sw.stop()
		sendRound = sw.send
	}
	start := time.Now()
	var t *time.Timer
	mark, fired, told := 0, 0, 0
	for lo := 0; lo < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p.Rate > 0 {
			due := start.Add(time.Duration(float64(lo) / p.Rate * float64(time.Second)))
			if err := sleepUntil(ctx, &t, due); err != nil {
				return err
			}
		}
		hi := min(lo+round, n)
		err := sendRound(lo, hi)
		u.tally()
		if err != nil {
			return err
		}
		lo = hi
		for mark < len(p.marks) && p.marks[mark].pkts <= lo {
			fired = max(fired, p.marks[mark].final)
			mark++
		}
		if fired > told && p.sent != nil {
			p.sent(fired, time.Now())
			told = fired
		}
	}
	return nil
}

// sleepUntil waits until due on the timer *t, made on first use; it
// returns ctx's error if ctx is done first.
func sleepUntil(ctx context.Context, t **time.Timer, due time.Time) error {
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	if *t == nil {
		*t = time.NewTimer(d)
	} else {
		(*t).Reset(d)
	}
	select {
	case <-(*t).C:
		return nil
	case <-ctx.Done():
		(*t).Stop()
		return ctx.Err()
	}
}

// sendWorkers are the goroutines that send a round of pregenerated
// packets, worker w the packets of the servers s with s mod workers = w.
type sendWorkers struct {
	ws   []chan [2]int
	done chan error
	wg   sync.WaitGroup
}

func (p *Pregenerated) startWorkers(workers int) *sendWorkers {
	sw := &sendWorkers{done: make(chan error, workers)}
	for w := range workers {
		ch := make(chan [2]int, 1)
		sw.ws = append(sw.ws, ch)
		sw.wg.Go(func() {
			for r := range ch {
				sw.done <- p.sendRange(r[0], r[1], w, workers)
			}
		})
	}
	return sw
}

// send has the workers send the packets lo..hi-1 and waits for them all.
func (sw *sendWorkers) send(lo, hi int) error {
	for _, ch := range sw.ws {
		ch <- [2]int{lo, hi}
	}
	errs := make([]error, len(sw.ws))
	for w := range errs {
		errs[w] = <-sw.done
	}
	return errors.Join(errs...)
}

// stop ends the workers.
func (sw *sendWorkers) stop() {
	for _, ch := range sw.ws {
		close(ch)
	}
	sw.wg.Wait()
}

// sendRange sends the packets lo..hi-1 of the servers worker w of workers
// handles.
func (p *Pregenerated) sendRange(lo, hi, w, workers int) error {
	u := p.u
	var dirty [64]int
	d := dirty[:0]
	for i := lo; i < hi; i++ {
		if workers > 1 && int(p.pkts[i].srv)%workers != w {
			continue
		}
		data, s := p.packet(i)
		if u.queue(s, data) {
			d = append(d, s)
		}
	}
	for _, s := range d {
		if err := u.send(s, &u.stats[w]); err != nil {
			return err
		}
	}
	return nil
}

// memAvailable returns MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemAvailable:")); ok {
			f := bytes.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
