package correlate

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/xrdmon/xrdmon/internal/record"
)

// A summary becomes an event of its server with every value; the same
// datagram again has the same id (the store keeps it once); malformed ones
// are rejections with their reason.
func TestSummaryEvents(t *testing.T) {
	s := NewShard(DefaultConfig())
	sv := newSrv("192.0.2.41:1", t0, 3)
	xmlB, err := os.ReadFile("../packet/testdata/summary.xml")
	if err != nil {
		t.Fatal(err)
	}
	jsonB, err := os.ReadFile("../packet/testdata/summary.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range [][]byte{xmlB, xmlB, jsonB, []byte(`<statistics tod="1" src="h:1"><a>`), []byte(`{"statistics":{"tod":1,`)} {
		s.Handle(d, sv.addr, at(0))
	}
	st := s.Stats()
	if st.Accounted != 3 || st.Rejected[RejectSummary] != 1 || st.Rejected[RejectSummaryJSON] != 1 || st.Events != 3 {
		t.Errorf("stats: accounted %d, rejected %v, events %d", st.Accounted, st.Rejected, st.Events)
	}
	evs := drainEvents(s)
	if len(evs) != 3 {
		t.Fatalf("%d events", len(evs))
	}
	e := evs[0]
	if e.Type != record.EventSummary || e.ServerIP != "192.0.2.41" || e.ServerHost != "xrd1.example.org" || e.Site != "T2_US_Example" ||
		e.Time.Unix() != 1767225660 || e.ServerStod != 1767225600 || !e.Valid || e.EventID != evs[1].EventID || e.EventID == evs[2].EventID {
		t.Errorf("event %+v", e)
	}
	var d record.SummaryReport
	if err := json.Unmarshal(e.Data, &d); err != nil {
		t.Fatal(err)
	}
	if d.Format != "xml" || d.Values["link.out"] != 1073741824 || d.Values["xrootd.ops.open"] != 900 || d.Texts["ofs.role"] != "server" || d.Pid != 4321 {
		t.Errorf("data %+v", d)
	}
}

// A summary whose long stats ids are repeated in front of thousands of
// short values would be an event many times the size of its datagram
// (issue 25: 34 KB → 678 KB): it is rejected as too large, counted; an
// honest summary of the same size is kept.
func TestSummaryExpansionBound(t *testing.T) {
	s := NewShard(DefaultConfig())
	sv := newSrv("192.0.2.41:1", t0, 3)
	bomb := func(idLen int) []byte {
		var b strings.Builder
		fmt.Fprintf(&b, `<statistics tod="%d" ver="v5" src="h.example.org:1094" tos="%d" pgm="xrootd" ins="anon" pid="1">`, t0+60, t0)
		for i := range 12 {
			fmt.Fprintf(&b, `<stats id="%s%d">`, strings.Repeat("x", idLen), i)
			for j := range 225 {
				fmt.Fprintf(&b, "<v%d>1</v%d>", j, j)
			}
			b.WriteString("</stats>")
		}
		b.WriteString("</statistics>")
		return []byte(b.String())
	}
	big, honest := bomb(240), bomb(4)
	s.Handle(big, sv.addr, at(0))
	s.Handle(honest, sv.addr, at(1))
	st := s.Stats()
	evs := drainEvents(s)
	if st.Rejected[RejectSummaryBounds] != 1 || len(evs) != 1 {
		t.Fatalf("a %d-byte summary of 240-byte ids: rejected %v, %d events", len(big), st.Rejected, len(evs))
	}
	if n := len(evs[0].Data); n > maxSummaryEvent(len(honest)) {
		t.Errorf("honest summary of %d bytes: event of %d bytes", len(honest), n)
	}
}

// A summary's tod beyond what a time can be written as (an int64 that
// overflows nanoseconds, year 292277026596) makes an event timed at most
// at the end of year 9999, which every output can write.
func TestSummaryTodOverflow(t *testing.T) {
	s := NewShard(DefaultConfig())
	sv := newSrv("192.0.2.41:1", t0, 3)
	s.Handle([]byte(`<statistics tod="9223372036854775807" ver="v5" src="h:1094" tos="1" pgm="xrootd" ins="anon" pid="1"><stats id="link"><num>1</num></stats></statistics>`), sv.addr, at(0))
	evs := drainEvents(s)
	if len(evs) != 1 || evs[0].Time.Year() != 9999 {
		t.Fatalf("%d events, %v", len(evs), evs)
	}
	if _, err := evs[0].Time.MarshalJSON(); err != nil {
		t.Error(err)
	}
}
