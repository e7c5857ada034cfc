package loadgen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

// Packet counter domains (protocol reference §7.4), the keys of
// ServerTruth.Packets and ServerTruth.Dropped.
const (
	DomainMain   = "main"   // = u d i T U: the main pseq counter
	DomainF      = "f"      // f-stream
	DomainGCache = "g:C"    // g-stream provider C (XCache file_close)
	DomainGTPC   = "g:P"    // g-stream provider P (TPC)
	nDomains     = 4        //
	domMain      = 0        //
	domF         = 1        //
	domGC        = 2        //
	domGP        = 3        //
	domainNone   = nDomains // not a packet domain
)

var domainNames = [nDomains]string{DomainMain, DomainF, DomainGCache, DomainGTPC}

// Truth is what a run generated and what a correlator that saw every packet
// must produce from it. Records are expressed as record.Record, filled the
// way the correlator fills them; fields the generator cannot know (Received,
// RecordID, ClientName) are left empty, and Start and End are the simulated
// times of the open and of the close (or of the last isXfr sent, for a
// partial): a correlator only sees f-stream windows, so compare them with a
// tolerance of one FStat interval.
//
// The records follow from the generated packets, before impairments; when
// Lossless is false, the correlator's output may legitimately differ (a
// lost close gives a partial record) and Dropped says by how much.
type Truth struct {
	Config   Config    `json:"config"`
	Start    time.Time `json:"start"` // simulated start
	End      time.Time `json:"end"`   // simulated time of the last packet
	Lossless bool      `json:"lossless"`

	Generated  int64 `json:"generated"`  // packets the servers sent
	Emitted    int64 `json:"emitted"`    // packets handed to the output (after loss and duplication)
	Dropped    int64 `json:"dropped"`    // packets removed by injected loss
	Duplicated int64 `json:"duplicated"` // extra copies sent
	Reordered  int64 `json:"reordered"`  // packets swapped with the server's next one
	Bytes      int64 `json:"bytes"`      // datagram bytes generated

	Sessions int64 `json:"sessions"`
	// Reasons counts the expected records by reason ("complete" for "").
	Reasons map[string]int64 `json:"reasons"`
	// Events counts g-stream events (lines) by provider, and redirect
	// events ("r", with Config.Redirectors).
	Events map[string]int64 `json:"events"`

	Servers []ServerTruth `json:"servers"`
	Users   []UserTruth   `json:"users"`
	// Records are the expected records, in the order their last packet was
	// generated; nil unless Config.KeepRecords.
	Records []record.Record `json:"records,omitempty"`
}

// Bytes is a byte tally of records.
type Bytes struct {
	Records    int64 `json:"records"`
	ReadBytes  int64 `json:"read_bytes"`
	ReadvBytes int64 `json:"readv_bytes"`
	WriteBytes int64 `json:"write_bytes"`
}

func (b *Bytes) add(r *record.Record) {
	b.Records++
	b.ReadBytes += r.ReadBytes
	b.ReadvBytes += r.ReadvBytes
	b.WriteBytes += r.WriteBytes
}

// ServerTruth is one simulated server.
type ServerTruth struct {
	Index  int     `json:"index"`
	IP     string  `json:"ip"`
	Sender string  `json:"sender"` // ip:port
	Host   string  `json:"host"`
	SID    uint64  `json:"sid"`
	Stods  []int64 `json:"stods"` // one per process lifetime (restarts add one)
	Cache  bool    `json:"cache"` // an XCache: emits C events
	// Redirector is a redirector (Config.Redirectors): it sends logins and
	// r-stream redirects, no transfers.
	Redirector bool `json:"redirector,omitempty"`
	// Packets counts generated packets by domain; Dropped those removed
	// by injected loss.
	Packets map[string]int64 `json:"packets"`
	Dropped map[string]int64 `json:"dropped"`
	Events  map[string]int64 `json:"events"`
	Bytes
}

// UserTruth is the byte tally of one user name (Record.User).
type UserTruth struct {
	User string `json:"user"`
	Bytes
}

// WriteJSON writes the truth as one indented JSON document.
func (t *Truth) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	enc.SetIndent("", " ")
	if err := enc.Encode(t); err != nil {
		return fmt.Errorf("encode truth: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write truth: %w", err)
	}
	return nil
}

// WriteFile writes the truth as JSON to path.
func (t *Truth) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create truth file: %w", err)
	}
	if err := t.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close truth file: %w", err)
	}
	return nil
}

// ReadTruth reads a truth written by WriteJSON.
func ReadTruth(r io.Reader) (*Truth, error) {
	var t Truth
	if err := json.NewDecoder(bufio.NewReader(r)).Decode(&t); err != nil {
		return nil, fmt.Errorf("decode truth: %w", err)
	}
	return &t, nil
}

// Totals sums the byte tallies of every server.
func (t *Truth) Totals() Bytes {
	var b Bytes
	for i := range t.Servers {
		s := &t.Servers[i].Bytes
		b.Records += s.Records
		b.ReadBytes += s.ReadBytes
		b.ReadvBytes += s.ReadvBytes
		b.WriteBytes += s.WriteBytes
	}
	return b
}

// reasonName is the key of Truth.Reasons.
func reasonName(r record.Reason) string {
	if r == record.Complete {
		return "complete"
	}
	return string(r)
}
