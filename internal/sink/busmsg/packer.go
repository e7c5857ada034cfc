package busmsg

import (
	"context"

	"github.com/xrdmon/xrdmon/internal/confcheck"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// Routing says where a bus sink sends each entry: its kinds of
// destination are K's values from 0 to len(Names)-1.
type Routing[K ~int] struct {
	// Names names the destination of each kind (an exchange, a STOMP
	// destination); "": that kind is not sent.
	Names []string
	// WLCG and Records are the kinds of the records in the WLCG format and
	// as GRACC documents, RecordKey the key of their messages.
	WLCG, Records K
	RecordKey     string
	// Event returns the kind and key of an event's message.
	Event func(ev *record.Event) (k K, key string)
}

// Packer packs the entries of a batch into messages, one message open per
// kind of destination, and hands a message to its send function when it
// is full, when a document of another key comes for its kind, and at the
// batch's end. Only one goroutine may use it.
type Packer[K ~int] struct {
	rt       Routing[K]
	perMsg   int
	gracc    func(dst []byte, r *record.Record) []byte // the GRACC flavour's appender
	wlcg     *record.WLCGMatcher
	wlcgOnly bool
	msgs     []Message
	send     func(ctx context.Context, k K, m *Message, n int) error
}

// NewPacker returns a packer routing as rt says and packing as f says,
// sending the records that wlcg matches (nil: record.DefaultWLCGMatcher)
// in the WLCG format; send gets each message closed, with its number of
// documents n.
func NewPacker[K ~int](rt Routing[K], f Format, wlcg *record.WLCGMatcher, send func(ctx context.Context, k K, m *Message, n int) error) (*Packer[K], error) {
	gracc, err := record.GRACCEncoder(f.GRACCFlavour)
	if err != nil {
		return nil, err
	}
	if wlcg == nil {
		wlcg = record.DefaultWLCGMatcher()
	}
	return &Packer[K]{rt: rt, perMsg: max(f.RecordsPerMessage, 1), gracc: gracc, wlcg: wlcg, wlcgOnly: f.WLCGOnly,
		msgs: make([]Message, len(rt.Names)), send: send}, nil
}

// PerMessage returns the most documents a message holds (at least 1).
func (p *Packer[K]) PerMessage() int { return p.perMsg }

// Name returns the destination of kind k.
func (p *Packer[K]) Name(k K) string { return p.rt.Names[k] }

// Pack sends batch: every record and event in the messages of its
// destinations, each message sent once full, and the last ones at the end.
func (p *Packer[K]) Pack(ctx context.Context, batch []store.Entry) error {
	for i := range p.msgs {
		p.msgs[i].N = 0
	}
	for i := range batch {
		var err error
		switch e := &batch[i]; {
		case e.Record != nil:
			err = p.record(ctx, e.Record)
		case e.Event != nil:
			if k, key := p.rt.Event(e.Event); p.rt.Names[k] != "" {
				ev := e.Event
				err = p.add(ctx, k, key, string(ev.Type), ev.EventID, func(b []byte) []byte { return record.AppendEventJSON(b, ev) })
			}
		}
		if err != nil {
			return err
		}
	}
	return p.flushAll(ctx)
}

// record adds r to the WLCG message in the WLCG format and to the records
// message as a GRACC document, as Routes says.
func (p *Packer[K]) record(ctx context.Context, r *record.Record) error {
	rt := &p.rt
	w, rec := Routes(r, p.wlcg, rt.Names[rt.WLCG] != "", rt.Names[rt.Records] != "", p.wlcgOnly)
	if w {
		if err := p.add(ctx, rt.WLCG, rt.RecordKey, "wlcg", r.RecordID, func(b []byte) []byte { return record.AppendWLCG(b, r) }); err != nil {
			return err
		}
	}
	if rec {
		return p.add(ctx, rt.Records, rt.RecordKey, "gracc", r.RecordID, func(b []byte) []byte { return p.gracc(b, r) })
	}
	return nil
}

// flushAll sends every message that holds documents.
func (p *Packer[K]) flushAll(ctx context.Context) error {
	for k := range p.msgs {
		if err := p.flush(ctx, K(k)); err != nil {
			return err
		}
	}
	return nil
}

// add appends one document to the message of kind k, sending that message
// first when it is full or its key differs.
func (p *Packer[K]) add(ctx context.Context, k K, key, typ, id string, enc func([]byte) []byte) error {
	m := &p.msgs[k]
	if m.Full(p.perMsg, key) {
		if err := p.flush(ctx, k); err != nil {
			return err
		}
	}
	m.Add(p.perMsg, key, typ, id, enc)
	return nil
}

func (p *Packer[K]) flush(ctx context.Context, k K) error {
	m := &p.msgs[k]
	n := m.Close(p.perMsg)
	if n == 0 {
		return nil
	}
	return p.send(ctx, k, m, n)
}

// Format is what a bus sink's messages hold (outputs.amqp, outputs.stomp).
type Format struct {
	RecordsPerMessage int    `yaml:"records_per_message" help:"records packed into one message (a JSON array when > 1; 1 sends one JSON object per message)"`
	GRACCFlavour      string `yaml:"gracc_flavour" help:"GRACC document of records: python (the Python xrootd-monitoring-collector's) or go (the shoveler's collector mode)"`
	WLCGOnly          bool   `yaml:"wlcg_only" help:"send records matching the WLCG rules only to the wlcg exchange or destination (as the OSG collectors do), not also to records"`
}

// DefaultFormat returns the defaults: one record per message, the python
// GRACC document (record.GRACCPython; record.GRACCGo is the shoveler's),
// WLCG records to both destinations.
func DefaultFormat() Format {
	return Format{RecordsPerMessage: 1, GRACCFlavour: record.GRACCPython}
}

// Check adds f's problems to p.
func (f Format) Check(p *confcheck.Problems) {
	p.Check(f.RecordsPerMessage >= 1, "records_per_message", "must be >= 1")
	p.Check(record.ValidGRACCFlavour(f.GRACCFlavour), "gracc_flavour", "must be python or go")
}
