package correlate

import (
	"errors"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// RejectReason is why the correlator did not account a datagram. Values
// 1..NumPacketReasons-1 are the decoder's packet.Reason values unchanged;
// the correlator adds the summaries' reasons. The set is closed.
type RejectReason uint8

// The correlator's own rejection reasons, after the decoder's.
const (
	// NumPacketReasons is one more than the largest packet.Reason.
	NumPacketReasons RejectReason = RejectReason(packet.ReasonSyntax) + 1
	// RejectSummary: a summary (xrd.report) whose XML is malformed.
	RejectSummary = NumPacketReasons
	// RejectSummaryJSON: a JSON summary that is malformed.
	RejectSummaryJSON = RejectSummary + 1
	// RejectSummaryHeader: a summary without its statistics header (tod, src).
	RejectSummaryHeader = RejectSummary + 2
	// RejectSummaryBounds: a summary too deep or with too many values.
	RejectSummaryBounds = RejectSummary + 3
	// NumRejectReasons sizes Stats.Rejected.
	NumRejectReasons = RejectSummary + 4
)

var summaryReasons = [...]string{"summary_bad_xml", "summary_bad_json", "summary_no_header", "summary_too_large"}

// String returns the reason's metric label value.
func (r RejectReason) String() string {
	if r >= RejectSummary && r < NumRejectReasons {
		return summaryReasons[r-RejectSummary]
	}
	return packet.Reason(r).String()
}

// summaryReason is the rejection reason of a ParseSummary error.
func summaryReason(err error) RejectReason {
	switch {
	case errors.Is(err, packet.ErrSummaryJSON):
		return RejectSummaryJSON
	case errors.Is(err, packet.ErrSummaryHeader):
		return RejectSummaryHeader
	case errors.Is(err, packet.ErrSummaryBounds):
		return RejectSummaryBounds
	}
	return RejectSummary
}

// RejectReasons lists every rejection reason, for initialising counters.
func RejectReasons() []RejectReason {
	rs := make([]RejectReason, 0, NumRejectReasons-1)
	for r := RejectReason(1); r < NumRejectReasons; r++ {
		rs = append(rs, r)
	}
	return rs
}

// RecordReasons lists the record reasons in the order Stats.Records counts
// them: Complete first, then record.Reasons.
var RecordReasons = [...]record.Reason{
	record.Complete, record.Timeout, record.Disconnect, record.ServerRestart,
	record.Evicted, record.NoOpen, record.EndOfInput,
}

// Indices into RecordReasons.
const (
	rComplete uint8 = iota
	rTimeout
	rDisconnect
	rRestart
	rEvicted
	rNoOpen
	rEndOfInput
	numRecordReasons
)

// NumKinds sizes Stats.ByKind: one more than the largest packet.Kind.
const NumKinds = int(packet.KindCGIGStream) + 1

// Stats are a shard's counters (monotonic) and state sizes (gauges). The
// pipeline sums shards with Add and exports them. Every handled datagram
// is counted once in Packets and once in either Accounted or Rejected.
type Stats struct {
	Packets   uint64                   // datagrams handed to Handle
	Accounted uint64                   // valid and applied (or recognised as duplicates)
	Rejected  [NumRejectReasons]uint64 // by RejectReason; index 0 unused
	ByKind    [NumKinds]uint64         // accounted datagrams by packet.Kind

	// Sequence accounting per counter domain (§7.4).
	Lost       [NumDomains]uint64 // missing packets: gaps not filled within the window
	Duplicates uint64             // accounted but not applied: seen before
	Reordered  uint64             // arrived late within the window (not loss)
	Stale      uint64             // arrived later than the window allows (already counted lost, or an old duplicate)
	// SeqCollisions are datagrams whose sequence number was seen within
	// the window but whose content differs (a wrap, a restart, a bus
	// interleaving): applied, never dropped on the number alone.
	SeqCollisions uint64

	// ClockAhead counts records whose end was ahead of the collector's
	// clock by more than Config.ClockAheadTolerance (record.ClockAhead).
	ClockAhead uint64

	Records        [numRecordReasons]uint64 // emitted records, indexed like RecordReasons
	Events         uint64                   // emitted g-stream events
	InvalidEvents  uint64                   // events whose line was not valid JSON: counted by who types them (Output.Events)
	FRMRecords     uint64                   // FRM p/x records accounted
	Restarts       uint64                   // server restarts seen (new stod)
	PendingDropped uint64                   // pending references dropped by TTL or bound, never resolved
	EvictedSess    uint64                   // sessions evicted by the bound
	// ProgressShed counts the progress snapshots not taken while the
	// input was behind (Shard.ShedProgress). Not checkpointed: it counts
	// from the process's start.
	ProgressShed uint64

	// Gauges: state held at the time of the Stats call.
	Servers      int // server incarnations
	Sessions     int
	OpenFiles    int // includes files waiting (disconnect, close without open)
	PendingRefs  int // pending paths and user attributes
	PendingFiles int // files waiting to be emitted or completed
	// Missing counts sequence numbers known to be missing that may still
	// arrive (holes in the 64-number horizon): lost if they do not.
	Missing int

	// Estimated bytes held per table (see budget.go), gauges.
	FileBytes, SessionBytes, PendingBytes, InternBytes int64

	// Truncated counts texts cut to their cap, by field.
	Truncated [NumFields]uint64
}

// TotalLost sums Lost over the domains.
func (s *Stats) TotalLost() uint64 {
	var n uint64
	for _, v := range s.Lost {
		n += v
	}
	return n
}

// TotalRejected sums Rejected over the reasons.
func (s *Stats) TotalRejected() uint64 {
	var n uint64
	for _, v := range s.Rejected {
		n += v
	}
	return n
}

// TotalRecords sums Records over the reasons.
func (s *Stats) TotalRecords() uint64 {
	var n uint64
	for _, v := range s.Records {
		n += v
	}
	return n
}

// RecordsFor returns the number of records emitted with reason r.
func (s *Stats) RecordsFor(r record.Reason) uint64 {
	for i, rr := range RecordReasons {
		if rr == r {
			return s.Records[i]
		}
	}
	return 0
}

// statScalars returns the scalar counters of st in the order of the
// checkpoint (snapScratch.header): new ones go at the end.
func statScalars(st *Stats) [13]*uint64 {
	return [...]*uint64{&st.Packets, &st.Accounted, &st.Duplicates, &st.Reordered, &st.Stale, &st.Events,
		&st.InvalidEvents, &st.FRMRecords, &st.Restarts, &st.PendingDropped, &st.EvictedSess, &st.SeqCollisions,
		&st.ClockAhead}
}

// statArrays returns the counter arrays of st in the order of the
// checkpoint: new ones go at the end.
func statArrays(st *Stats) [5][]uint64 {
	return [...][]uint64{st.Rejected[:], st.ByKind[:], st.Lost[:], st.Records[:], st.Truncated[:]}
}

// statGauges returns the gauges of st that count entries.
func statGauges(st *Stats) [6]*int {
	return [...]*int{&st.Servers, &st.Sessions, &st.OpenFiles, &st.PendingRefs, &st.PendingFiles, &st.Missing}
}

// statBytes returns the gauges of st that estimate bytes.
func statBytes(st *Stats) [4]*int64 {
	return [...]*int64{&st.FileBytes, &st.SessionBytes, &st.PendingBytes, &st.InternBytes}
}

// Add adds o's counters and gauges to s.
func (s *Stats) Add(o *Stats) {
	from := statScalars(o)
	for i, p := range statScalars(s) {
		*p += *from[i]
	}
	s.ProgressShed += o.ProgressShed
	fromArrays := statArrays(o)
	for i, a := range statArrays(s) {
		for j := range a {
			a[j] += fromArrays[i][j]
		}
	}
	fromGauges := statGauges(o)
	for i, p := range statGauges(s) {
		*p += *fromGauges[i]
	}
	fromBytes := statBytes(o)
	for i, p := range statBytes(s) {
		*p += *fromBytes[i]
	}
}
