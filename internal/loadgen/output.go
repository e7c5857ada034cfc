package loadgen

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/file"
)

// Packet is one generated datagram on its way to an Output.
type Packet struct {
	// Data is the datagram. It is valid only during the Write call that
	// carries it: an Output copies what it keeps.
	Data []byte
	// Server is the index of the simulated server that sent it.
	Server int
	// Sender is the server's source address (as returned by Bind).
	Sender netip.AddrPort
	// Time is the simulated time the server sent it.
	Time time.Time
}

// Output receives the generated packets. The generator calls Bind once, then
// Write any number of times from one goroutine, then Close.
type Output interface {
	// Bind is given the default sender address of every simulated server
	// and returns the addresses its packets will really come from (a UDP
	// output may not be able to use the defaults). The truth uses them.
	Bind(senders []netip.AddrPort) ([]netip.AddrPort, error)
	// Write delivers a batch of packets in order; per server, order is kept.
	Write(ctx context.Context, batch []Packet) error
	// Close flushes and releases the output.
	Close() error
}

// Tee returns an Output that writes to every output in turn. Bind chains:
// each output is given the addresses the previous one returned, so put a UDP
// output first.
func Tee(outs ...Output) Output { return tee(outs) }

type tee []Output

func (t tee) Bind(s []netip.AddrPort) ([]netip.AddrPort, error) {
	var err error
	for _, o := range t {
		if s, err = o.Bind(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (t tee) Write(ctx context.Context, b []Packet) error {
	for _, o := range t {
		if err := o.Write(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

func (t tee) Close() error {
	var errs []error
	for _, o := range t {
		errs = append(errs, o.Close())
	}
	return errors.Join(errs...)
}

// Memory is an Output that keeps a copy of every packet, for tests and for
// building captures. Its zero value is ready to use.
type Memory struct {
	Packets []source.Packet
	Servers []int // the server index of each packet
}

// InMemory generates cfg's workload into memory: its packets, and the
// truth they make (tests and benchmarks that feed a correlator or a
// pipeline directly).
func InMemory(ctx context.Context, cfg Config) (*Memory, *Truth, error) {
	g, err := New(cfg)
	if err != nil {
		return nil, nil, err
	}
	mem := &Memory{}
	truth, err := g.Run(ctx, mem)
	if err != nil {
		return nil, nil, err
	}
	return mem, truth, nil
}

// Bind implements Output.
func (m *Memory) Bind(s []netip.AddrPort) ([]netip.AddrPort, error) { return s, nil }

// Write implements Output.
func (m *Memory) Write(_ context.Context, b []Packet) error {
	for _, p := range b {
		m.Packets = append(m.Packets, source.Packet{Data: slices.Clone(p.Data), Sender: p.Sender, Received: p.Time})
		m.Servers = append(m.Servers, p.Server)
	}
	return nil
}

// Close implements Output.
func (m *Memory) Close() error { return nil }

// Discard is an Output that drops everything, for measuring the generator.
type Discard struct{ Packets, Bytes int64 }

// Bind implements Output.
func (d *Discard) Bind(s []netip.AddrPort) ([]netip.AddrPort, error) { return s, nil }

// Write implements Output.
func (d *Discard) Write(_ context.Context, b []Packet) error {
	d.Packets += int64(len(b))
	for i := range b {
		d.Bytes += int64(len(b[i].Data))
	}
	return nil
}

// Close implements Output.
func (d *Discard) Close() error { return nil }

// ShovelerVersion is the "version" the generator writes in shoveler
// envelopes.
const ShovelerVersion = "xrdmon-loadgen"

// AppendShoveler appends the shoveler message for a datagram from sender:
// {"remote":"ip:port","version":"...","data":"<base64>"}.
func AppendShoveler(dst []byte, sender netip.AddrPort, data []byte) []byte {
	dst = append(dst, `{"remote":"`...)
	dst = sender.AppendTo(dst)
	dst = append(dst, `","version":"`+ShovelerVersion+`","data":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, data)
	return append(dst, `"}`...)
}

// JSONL is an Output writing shoveler messages, one JSON object per line,
// the format `xrdmon replay` reads.
type JSONL struct {
	w   *bufio.Writer
	c   io.Closer
	buf []byte
}

// NewJSONL writes to w; Close closes w when it is an io.Closer.
func NewJSONL(w io.Writer) *JSONL {
	j := &JSONL{w: bufio.NewWriterSize(w, 1<<20)}
	j.c, _ = w.(io.Closer)
	return j
}

// Bind implements Output.
func (j *JSONL) Bind(s []netip.AddrPort) ([]netip.AddrPort, error) { return s, nil }

// Write implements Output.
func (j *JSONL) Write(_ context.Context, b []Packet) error {
	for i := range b {
		j.buf = AppendShoveler(j.buf[:0], b[i].Sender, b[i].Data)
		j.buf = append(j.buf, '\n')
		if _, err := j.w.Write(j.buf); err != nil {
			return fmt.Errorf("write shoveler line: %w", err)
		}
	}
	return nil
}

// Close implements Output.
func (j *JSONL) Close() error {
	err := j.w.Flush()
	if err != nil {
		err = fmt.Errorf("flush shoveler lines: %w", err)
	}
	if j.c != nil {
		err = errors.Join(err, j.c.Close())
	}
	return err
}

// Pcap is an Output writing a pcap capture of the datagrams, addressed to a
// collector at Dst and timestamped with the simulated time.
type Pcap struct {
	w  *bufio.Writer
	c  io.Closer
	pw *file.PcapWriter
}

// DefaultCollector is the destination written in captures.
var DefaultCollector = netip.MustParseAddrPort("127.0.0.1:9930")

// NewPcap writes the capture header to w; Close closes w when it is an
// io.Closer.
func NewPcap(w io.Writer, dst netip.AddrPort) (*Pcap, error) {
	p := &Pcap{w: bufio.NewWriterSize(w, 1<<20)}
	p.c, _ = w.(io.Closer)
	pw, err := file.NewPcapWriter(p.w, dst, file.Pcap)
	if err != nil {
		return nil, err
	}
	p.pw = pw
	return p, nil
}

// Bind implements Output.
func (p *Pcap) Bind(s []netip.AddrPort) ([]netip.AddrPort, error) { return s, nil }

// Write implements Output.
func (p *Pcap) Write(_ context.Context, b []Packet) error {
	for i := range b {
		if err := p.pw.WritePacket(source.Packet{Data: b[i].Data, Sender: b[i].Sender, Received: b[i].Time}); err != nil {
			return err
		}
	}
	return nil
}

// Close implements Output.
func (p *Pcap) Close() error {
	err := p.pw.Flush()
	if err == nil {
		if err = p.w.Flush(); err != nil {
			err = fmt.Errorf("flush pcap: %w", err)
		}
	}
	if p.c != nil {
		err = errors.Join(err, p.c.Close())
	}
	return err
}
