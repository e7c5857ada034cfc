// Package file is the replay source: it reads shoveler JSON-lines files and
// pcap / pcapng captures of UDP datagrams and hands their datagrams to the
// pipeline, as the UDP and AMQP sources do with live traffic.
package file

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrdmon/xrdmon/internal/metrics"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/units"
)

// Options configures the file source.
type Options struct {
	// Paths are read in order; "-" is standard input. The format of each is
	// detected from its first bytes: pcap, pcapng, or shoveler JSON lines.
	Paths []string `yaml:"paths"`
	// BatchSize is the number of packets per batch (default 256).
	BatchSize int `yaml:"batch_size"`
	// Filter is the allow-list and address map.
	Filter source.FilterConfig `yaml:"filter"`
}

// Config is the file_input section of the configuration: captures that
// collect imports instead of receiving live input. It reads them through
// the same pipeline, with time following the captured packets, and exits
// at their end.
type Config struct {
	Paths []string `yaml:"paths" help:"captures to import instead of live input (shoveler JSON lines, pcap or pcapng; - is standard input); collect exits at their end"`
	Flush bool     `yaml:"flush" help:"at the end of the captures, write files still open as partial records (end_of_input, as replay does) instead of keeping them in the checkpoint"`
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options { return Options{BatchSize: 256} }

// File is the file source. Packet.Received is the capture timestamp for
// pcap and pcapng input (so a replay keeps the original timing), and the
// collector clock when the line's bytes were read for JSON lines, which
// carry none.
type File struct {
	cfg    Options
	log    *slog.Logger
	filter *source.Filter
	pool   *source.BatchPool
	stdin  io.Reader

	packets  prometheus.Counter
	bytes    prometheus.Counter
	skipped  *prometheus.CounterVec
	badLines *prometheus.CounterVec
	// badLineLog limits logging of unparsable lines to the first per file.
	loggedBad bool

	// consumed counts the input bytes read so far, for Progress.
	consumed atomic.Int64
}

// New returns a file source. Metrics are registered on reg (nil: none).
func New(cfg Options, log *slog.Logger, reg prometheus.Registerer) (*File, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	units.Default(&cfg.BatchSize, DefaultOptions().BatchSize)
	filter, err := source.NewFilter(cfg.Filter, "file", reg)
	if err != nil {
		return nil, fmt.Errorf("file source: %w", err)
	}
	f := &File{
		cfg: cfg, log: log, filter: filter, stdin: os.Stdin,
		pool: source.NewBatchPool(cfg.BatchSize, cfg.BatchSize*source.BatchBytesPerPacket),
	}
	ms := metrics.NewSet(reg)
	f.packets = metrics.Counter(ms, "xrdmon_file_packets_read_total", "Datagrams read from files.")
	f.bytes = metrics.Counter(ms, "xrdmon_file_bytes_read_total", "Datagram bytes read from files.")
	f.skipped = metrics.CounterVec(ms, "xrdmon_file_frames_skipped_total", "Captured frames that carried no usable UDP datagram, by reason.", "reason")
	f.badLines = metrics.CounterVec(ms, "xrdmon_file_lines_invalid_total", "JSON lines that are not valid shoveler messages, by reason (oversized: more than a UDP datagram can carry; such a line is skipped without being buffered).", "reason")
	if err := ms.Err(); err != nil {
		return nil, fmt.Errorf("file source: %w", err)
	}
	for _, r := range skipReasons {
		f.skipped.WithLabelValues(r.Error())
	}
	for _, r := range source.ShovelerReasons {
		f.badLines.WithLabelValues(r)
	}
	return f, nil
}

// Run reads every path in turn and returns when all are read (nil) or ctx is
// cancelled (nil). A file that cannot be opened or read ends Run with an error.
func (f *File) Run(ctx context.Context, out chan<- *source.Batch) error {
	for _, p := range f.cfg.Paths {
		if err := f.readPath(ctx, p, out); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

// Progress returns the input bytes read so far and their total: the sizes
// of the input files, or -1 when one is not a regular file (standard
// input, a pipe). Safe to call while Run reads.
func (f *File) Progress() (done, total int64) {
	for _, p := range f.cfg.Paths {
		st, err := os.Stat(p)
		if p == "-" || err != nil || !st.Mode().IsRegular() {
			total = -1
			break
		}
		total += st.Size()
	}
	return f.consumed.Load(), total
}

// inputReader is the stream Read reads from: it counts the bytes read
// (consumed, for Progress) and notes when a read last returned bytes. A
// JSON line carries no time: it is stamped with the time its bytes were
// read, one clock reading per read of the buffer (hundreds of lines)
// rather than one per line.
type inputReader struct {
	r        io.Reader
	consumed *atomic.Int64
	at       time.Time
}

func (c *inputReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.consumed.Add(int64(n))
		c.at = time.Now()
	}
	return n, err
}

func (f *File) readPath(ctx context.Context, path string, out chan<- *source.Batch) error {
	var r io.Reader
	if path == "-" {
		r = f.stdin
	} else {
		fh, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("file source: %w", err)
		}
		defer fh.Close()
		r = fh
	}
	f.log.Info("Reading input file", "path", path)
	if err := f.Read(ctx, r, out); err != nil {
		return fmt.Errorf("file source: read %s: %w", path, err)
	}
	return nil
}

// Read reads one stream (pcap, pcapng or JSON lines, detected) and sends
// its datagrams on out. It returns at the end of the stream or when ctx is
// cancelled (ctx.Err()).
func (f *File) Read(ctx context.Context, r io.Reader, out chan<- *source.Batch) error {
	in := &inputReader{r: r, consumed: &f.consumed}
	br := bufio.NewReaderSize(in, 256<<10)
	magic, err := br.Peek(4)
	if err != nil && !(errors.Is(err, io.EOF) && len(magic) > 0) {
		if errors.Is(err, io.EOF) {
			return nil // empty input
		}
		return fmt.Errorf("detect format: %w", err)
	}
	f.loggedBad = false
	s := &sender{ctx: ctx, out: out, pool: f.pool, in: in, packets: f.packets, bytes: f.bytes}
	switch {
	case len(magic) == 4 && isPcapMagic(magic):
		err = f.readPcap(br, s)
	case len(magic) == 4 && bytes.Equal(magic, []byte{0x0a, 0x0d, 0x0d, 0x0a}):
		err = f.readPcapNG(br, s)
	default:
		err = f.readLines(br, s)
	}
	if err == nil {
		err = s.flush()
	} else {
		s.discard()
	}
	return err
}

func isPcapMagic(m []byte) bool {
	for _, want := range [][]byte{
		{0xa1, 0xb2, 0xc3, 0xd4}, {0xd4, 0xc3, 0xb2, 0xa1}, // microseconds
		{0xa1, 0xb2, 0x3c, 0x4d}, {0x4d, 0x3c, 0xb2, 0xa1}, // nanoseconds
	} {
		if bytes.Equal(m, want) {
			return true
		}
	}
	return false
}

func (f *File) readPcap(r io.Reader, s *sender) error {
	pr, err := pcapgo.NewReader(r)
	if err != nil {
		return fmt.Errorf("pcap header: %w", err)
	}
	link := pr.LinkType()
	for {
		data, ci, err := pr.ZeroCopyReadPacketData()
		if err != nil {
			return readEnd(err, "pcap")
		}
		if err := f.frame(s, link, data, ci.Timestamp); err != nil {
			return err
		}
	}
}

func (f *File) readPcapNG(r io.Reader, s *sender) error {
	opts := pcapgo.DefaultNgReaderOptions
	opts.WantMixedLinkType = true
	nr, err := pcapgo.NewNgReader(r, opts)
	if err != nil {
		return fmt.Errorf("pcapng header: %w", err)
	}
	for {
		data, ci, err := nr.ZeroCopyReadPacketData()
		if err != nil {
			return readEnd(err, "pcapng")
		}
		link := nr.LinkType()
		if iface, ierr := nr.Interface(ci.InterfaceIndex); ierr == nil {
			link = iface.LinkType
		}
		if err := f.frame(s, link, data, ci.Timestamp); err != nil {
			return err
		}
	}
}

func (f *File) frame(s *sender, link layers.LinkType, frame []byte, ts time.Time) error {
	payload, from, err := udpPayload(link, frame)
	if err != nil {
		f.skipped.WithLabelValues(err.Error()).Inc()
		return nil
	}
	s.count(len(payload))
	sender, ok := f.filter.Accept(from)
	if !ok {
		return nil
	}
	b, err := s.batch()
	if err != nil {
		return err
	}
	b.Append(payload, sender, ts)
	return s.maybeSend()
}

func (f *File) readLines(br *bufio.Reader, s *sender) error {
	var long []byte   // a line longer than br's buffer
	skipping := false // the rest of an oversized line
	for {
		// Hand over what we have before blocking on a slow stream (stdin),
		// and count what was read.
		if br.Buffered() == 0 {
			s.publish()
			if s.cur != nil && s.cur.Len() > 0 {
				if err := s.flush(); err != nil {
					return err
				}
			}
		}
		line, err := br.ReadSlice('\n')
		if skipping {
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			skipping = false
			if err == nil {
				continue
			}
			line = nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(line) > source.MaxShovelerMessage {
				// Never buffered whole: count it and skip to its end.
				f.badLines.WithLabelValues(source.ShovelerReason(source.ErrShovelerOversized)).Inc()
				if !f.loggedBad {
					f.loggedBad = true
					f.log.Warn("Skipping invalid shoveler line (further ones are only counted)", "err", source.ErrShovelerOversized, "line", truncate(long, 120))
				}
				long, skipping = long[:0:0], true
				continue
			}
			long = append(long, line...)
			continue
		}
		if long != nil {
			line = append(long, line...)
			long = long[:0:0]
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if perr := f.line(s, line); perr != nil {
				return perr
			}
		}
		if err != nil {
			return readEnd(err, "read line")
		}
	}
}

// readEnd is what a read error ends reading the input with: nil at its
// end (io.EOF), else err wrapped with what was read.
func readEnd(err error, what string) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (f *File) line(s *sender, line []byte) error {
	b, err := s.batch()
	if err != nil {
		return err
	}
	buf, env, perr := source.AppendShoveler(b.Buf(), line)
	if perr != nil {
		f.badLines.WithLabelValues(source.ShovelerReason(perr)).Inc()
		if !f.loggedBad {
			f.loggedBad = true
			f.log.Warn("Skipping invalid shoveler line (further ones are only counted)", "err", perr, "line", truncate(line, 120))
		}
		return nil
	}
	s.count(len(env.Data))
	sender, ok := f.filter.AcceptShoveled(&env)
	if !ok {
		return nil
	}
	b.Add(buf, env.Data, sender, s.in.at)
	return s.maybeSend()
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(bytes.TrimSpace(b))
}

// sender fills batches and sends them on out.
type sender struct {
	ctx  context.Context
	out  chan<- *source.Batch
	pool *source.BatchPool
	cur  *source.PooledBatch
	in   *inputReader
	// The packets and bytes read since the last batch was handed over,
	// added to the counters then (not an atomic add or two per packet).
	npackets, nbytes int
	packets, bytes   prometheus.Counter
}

// count counts a packet of n bytes read.
func (s *sender) count(n int) {
	s.npackets++
	s.nbytes += n
}

// publish adds what count counted to the metrics.
func (s *sender) publish() {
	if s.npackets > 0 {
		s.packets.Add(float64(s.npackets))
		s.bytes.Add(float64(s.nbytes))
		s.npackets, s.nbytes = 0, 0
	}
}

func (s *sender) batch() (*source.PooledBatch, error) {
	if s.cur == nil {
		if err := s.ctx.Err(); err != nil {
			return nil, err
		}
		s.cur = s.pool.Get()
	}
	return s.cur, nil
}

func (s *sender) maybeSend() error {
	if s.cur.Full() {
		return s.flush()
	}
	return nil
}

func (s *sender) flush() error {
	s.publish()
	if s.cur == nil {
		return nil
	}
	if s.cur.Len() == 0 {
		s.cur.Free()
		s.cur = nil
		return nil
	}
	select {
	case s.out <- &s.cur.Batch:
		s.cur = nil
		return nil
	case <-s.ctx.Done():
		s.discard()
		return s.ctx.Err()
	}
}

func (s *sender) discard() {
	s.publish()
	if s.cur != nil {
		s.cur.Free()
		s.cur = nil
	}
}
