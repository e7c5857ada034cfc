package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// Observed is one record as a collector wrote it, reduced to what the
// benchmark compares with the ground truth.
type Observed struct {
	ServerIP string
	Stod     int64  // 0 when the collector does not write it
	FileID   uint32 //
	HasID    bool   // Stod and FileID were present
	Path     string
	Read     int64
	Readv    int64
	Write    int64
	Partial  bool
}

// obsJSON accepts the field names of xrdmon's own records and of the GRACC
// format other collectors (the OSG xrootd-monitoring-collector) write.
type obsJSON struct {
	ServerIP   string   `json:"server_ip"`
	Stod       *int64   `json:"server_stod"`
	FileID     *uint32  `json:"file_id"`
	Path       string   `json:"path"`
	Filename   string   `json:"filename"`
	FileLFN    string   `json:"file_lfn"`
	ReadBytes  *int64   `json:"read_bytes"`
	ReadvBytes *int64   `json:"readv_bytes"`
	WriteBytes *int64   `json:"write_bytes"`
	Read       *int64   `json:"read"`
	Readv      *int64   `json:"readv"`
	Write      *int64   `json:"write"`
	Reason     string   `json:"reason"`
	PartialF   *bool    `json:"partial"`
	RecordID   *string  `json:"record_id"`
	EventID    *string  `json:"event_id"`
	Data       *obsJSON `json:"record"` // an envelope {"record": {...}}
}

func firstInt(ps ...*int64) int64 {
	for _, p := range ps {
		if p != nil {
			return *p
		}
	}
	return 0
}

// parseObserved decodes one JSON record. ok is false for lines that are not
// records (g-stream events, envelopes without one, anything without a server).
// observedRecord reduces one of xrdmon's records.
func observedRecord(r *record.Record) (o Observed, ok bool) {
	o.ServerIP, o.Stod, o.FileID, o.HasID = r.ServerIP, r.ServerStod, r.FileID, true
	o.Path, o.Read, o.Readv, o.Write, o.Partial = r.Path, r.ReadBytes, r.ReadvBytes, r.WriteBytes, r.Partial()
	return o, o.ServerIP != ""
}

func parseObserved(b []byte) (o Observed, ok bool) {
	if len(b) > 0 && b[0] != '{' { // xrdmon's store keeps records in binary form
		var r record.Record
		if record.DecodeStored(b, &r) != nil {
			return o, false
		}
		return observedRecord(&r)
	}
	var j obsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return o, false
	}
	if j.Data != nil {
		j = *j.Data
	}
	if j.EventID != nil && j.RecordID == nil {
		return o, false
	}
	o.ServerIP = j.ServerIP
	if j.Stod != nil && j.FileID != nil {
		o.Stod, o.FileID, o.HasID = *j.Stod, *j.FileID, true
	}
	o.Path = j.Path
	if o.Path == "" {
		o.Path = j.Filename
	}
	if o.Path == "" {
		o.Path = j.FileLFN
	}
	o.Read = firstInt(j.ReadBytes, j.Read)
	o.Readv = firstInt(j.ReadvBytes, j.Readv)
	o.Write = firstInt(j.WriteBytes, j.Write)
	o.Partial = j.Reason != "" || (j.PartialF != nil && *j.PartialF)
	return o, o.ServerIP != "" && (o.HasID || o.Path != "")
}

// RecordSource yields the records a collector has made durable since the
// last call. Poll is called from one goroutine.
type RecordSource interface {
	Poll(ctx context.Context) ([]Observed, error)
	Close() error
}

// A progresser is a RecordSource whose Poll may follow progress without
// returning records; Progressed reports whether the last Polls saw any.
type progresser interface {
	Progressed() bool
}

// A drainer is a RecordSource that yields its records only at the end,
// with the time each became visible (storeSource).
type drainer interface {
	Drain(ctx context.Context) ([]timedObs, error)
	// Events returns the g-stream events the drained store holds.
	Events() int64
}

// storeSource reads xrdmon's store (internal/store/FORMAT.md) beside the
// collector's writer. While the benchmark sends, Poll only follows the
// store's high-water mark (one small query) and notes when each sequence
// number became visible; Drain then reads every record once, after the
// measured interval, and gives each the time its block first appeared. So
// the latency is the same as if every record had been read at once, and
// decoding and matching millions of records does not take CPU from the
// collector while it is measured.
type storeSource struct {
	path   string
	r      *store.Reader
	marks  []storeMark // the high-water mark at each poll where it grew
	grew   bool
	events int64 // g-stream events seen by Drain
}

// Events returns the g-stream events Drain found in the store.
func (s *storeSource) Events() int64 { return s.events }

// storeMark says that every entry up to seq was visible at t.
type storeMark struct {
	t   time.Time
	seq int64
}

// newStoreSource reads the store database at path (xrdmon.db), which need
// not exist yet.
func newStoreSource(path string) *storeSource { return &storeSource{path: path} }

func (s *storeSource) open() (bool, error) {
	if s.r != nil {
		return true, nil
	}
	if _, err := os.Stat(s.path); err != nil {
		return false, nil // not created yet
	}
	r, err := store.OpenReader(s.path)
	if err != nil {
		return false, err
	}
	s.r = r
	return true, nil
}

// Poll notes the store's high-water mark; it returns no records (see
// Drain).
func (s *storeSource) Poll(ctx context.Context) ([]Observed, error) {
	if ok, err := s.open(); !ok {
		return nil, err
	}
	seq, err := s.r.HighWater(ctx)
	if err != nil {
		if isNoTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read store high-water mark: %w", err)
	}
	if n := len(s.marks); n == 0 || seq > s.marks[n-1].seq {
		s.marks = append(s.marks, storeMark{time.Now(), seq})
		s.grew = true
	}
	return nil, nil
}

// Progressed reports whether the mark grew since the last call.
func (s *storeSource) Progressed() bool {
	g := s.grew
	s.grew = false
	return g
}

// timedObs are records first visible at the same time; late ones only
// appeared after the last poll (made durable at shutdown).
type timedObs struct {
	at   time.Time
	late bool
	obs  []Observed
}

// Drain reads every record of the store with the time it became visible.
func (s *storeSource) Drain(ctx context.Context) ([]timedObs, error) {
	if ok, err := s.open(); !ok {
		return nil, err
	}
	var out []timedObs
	var after int64
	for {
		entries, err := s.r.Read(ctx, after, 5000)
		if err != nil {
			if isNoTable(err) {
				return out, nil
			}
			return out, fmt.Errorf("read store after %d: %w", after, err)
		}
		for _, e := range entries {
			after = e.Seq
			if e.Record == nil {
				if e.Event != nil {
					s.events++
				}
				continue
			}
			o, ok := observedRecord(e.Record)
			if !ok {
				continue
			}
			i, _ := slices.BinarySearchFunc(s.marks, e.Seq, func(m storeMark, seq int64) int { return cmp.Compare(m.seq, seq) })
			var g timedObs
			if i == len(s.marks) {
				g = timedObs{at: time.Now(), late: true}
			} else {
				g = timedObs{at: s.marks[i].t}
			}
			if n := len(out); n > 0 && out[n-1].at.Equal(g.at) && out[n-1].late == g.late {
				out[n-1].obs = append(out[n-1].obs, o)
				continue
			}
			g.obs = []Observed{o}
			out = append(out, g)
		}
		if len(entries) < 5000 {
			return out, nil
		}
	}
}

func isNoTable(err error) bool {
	return err != nil && bytes.Contains([]byte(err.Error()), []byte("no such table"))
}

func (s *storeSource) Close() error {
	if s.r == nil {
		return nil
	}
	return s.r.Close()
}

// jsonlSource tails a JSON-lines file (one record per line).
type jsonlSource struct {
	path    string
	f       *os.File
	partial []byte
	buf     []byte
}

func newJSONLSource(path string) *jsonlSource {
	return &jsonlSource{path: path, buf: make([]byte, 1<<20)}
}

func (s *jsonlSource) Poll(context.Context) ([]Observed, error) {
	if s.f == nil {
		f, err := os.Open(s.path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("open records file: %w", err)
		}
		s.f = f
	}
	var out []Observed
	for {
		n, err := s.f.Read(s.buf)
		data := s.buf[:n]
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				s.partial = append(s.partial, data...)
				break
			}
			line := data[:i]
			if len(s.partial) > 0 {
				line = append(s.partial, line...)
				s.partial = s.partial[:0]
			}
			if o, ok := parseObserved(line); ok {
				out = append(out, o)
			}
			data = data[i+1:]
		}
		if errors.Is(err, io.EOF) || n == 0 {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("read records file: %w", err)
		}
	}
}

func (s *jsonlSource) Close() error {
	if s.f == nil {
		return nil
	}
	return s.f.Close()
}

// amqpSource consumes a RabbitMQ queue the collector publishes records to
// (one JSON record, or a JSON array of records, per message).
type amqpSource struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	mu   sync.Mutex
	got  []Observed
	done chan struct{}
}

// newAMQPSource starts consuming queue at url (declared if absent, so it
// exists before the collector's first record).
func newAMQPSource(url, queue string) (*amqpSource, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return nil, fmt.Errorf("connect records broker: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("open records channel: %w", err)
	}
	if _, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil); err != nil {
		// Absent (the failed check closed the channel): declare it durable.
		if ch, err = conn.Channel(); err != nil {
			conn.Close()
			return nil, fmt.Errorf("open records channel: %w", err)
		}
		if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
			conn.Close()
			return nil, fmt.Errorf("declare records queue %s: %w", queue, err)
		}
	}
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("consume records queue %s: %w", queue, err)
	}
	s := &amqpSource{conn: conn, ch: ch, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for d := range deliveries {
			var obs []Observed
			body := bytes.TrimSpace(d.Body)
			if len(body) > 0 && body[0] == '[' {
				var arr []json.RawMessage
				if json.Unmarshal(body, &arr) == nil {
					for _, r := range arr {
						if o, ok := parseObserved(r); ok {
							obs = append(obs, o)
						}
					}
				}
			} else {
				for _, line := range bytes.Split(body, []byte("\n")) {
					if o, ok := parseObserved(line); ok {
						obs = append(obs, o)
					}
				}
			}
			s.mu.Lock()
			s.got = append(s.got, obs...)
			s.mu.Unlock()
		}
	}()
	return s, nil
}

func (s *amqpSource) Poll(context.Context) ([]Observed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.got
	s.got = nil
	return out, nil
}

func (s *amqpSource) Close() error {
	err := s.conn.Close()
	<-s.done
	return err
}
