package correlate

import (
	"encoding/json"
	"net"
	"net/netip"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
)

// maxSummaryEvent bounds the encoded size of the event a summary datagram
// of n bytes becomes: an honest summary's JSON is about as long as its XML
// (each value's dotted name replaces its opening and closing tags), while
// long stats ids repeated in front of thousands of short values would make
// a 34 KB datagram a 678 KB event (docs/limits.md).
func maxSummaryEvent(n int) int { return 2*n + 1024 }

// maxTod is the latest report time a summary event takes (the end of year
// 9999: JSON and RFC 3339 hold no later one); the report's own tod stays in
// its data. The store indexes it within a window around its receive time.
const maxTod = 253402300799

// handleSummary makes an xrd.report summary an event. Summaries come
// once a minute or so per server, beside the detailed stream: decoding
// them here (XML or JSON) costs the hot path nothing measurable, and lets
// a malformed one be a counted rejection with its reason.
func (s *Shard) handleSummary(data []byte, addr netip.Addr, kind packet.Kind) {
	sum, err := packet.ParseSummary(data)
	if err != nil {
		s.stats.Rejected[summaryReason(err)]++
		return
	}
	s.accept(kind)
	d := record.SummaryReport{Format: "xml", Src: sum.Src, Tod: sum.Tod, Tos: sum.Tos, Pid: sum.Pid, Pgm: sum.Pgm, Ins: sum.Ins,
		Site: sum.Site, Ver: sum.Ver, Values: make(map[string]float64, len(sum.Values))}
	if kind == packet.KindJSONSummary {
		d.Format = "json"
	}
	for _, v := range sum.Values {
		d.Values[v.Name] = v.Value
	}
	if len(sum.Texts) > 0 {
		d.Texts = make(map[string]string, len(sum.Texts))
		for _, t := range sum.Texts {
			d.Texts[t.Name] = t.Text
		}
	}
	raw, err := json.Marshal(d) // strings are valid UTF-8 (ParseSummary checks), numbers finite
	if err != nil || len(raw) > maxSummaryEvent(len(data)) {
		s.stats.Rejected[RejectSummaryBounds]++
		return
	}
	ip := addr.String()
	host, _, _ := net.SplitHostPort(sum.Src)
	s.events = append(s.events, record.Event{
		EventID:    record.EventID(ip, sum.Tos, 0, 'S', 0, sum.Tod, 0, data),
		Type:       record.EventSummary,
		Provider:   "S",
		Time:       time.Unix(min(max(sum.Tod, 0), maxTod), 0).UTC(),
		Received:   s.now,
		ServerIP:   ip,
		ServerHost: host,
		ServerStod: sum.Tos,
		Site:       sum.Site,
		Data:       raw,
		Valid:      true,
	})
	s.stats.Events++
}
