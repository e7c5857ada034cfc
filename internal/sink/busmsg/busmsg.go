// Package busmsg is what the bus sinks (AMQP, STOMP) share in making their
// messages: which destinations a record goes to, and the packing of JSON
// documents into message bodies (one document, or up to a number of them
// in a JSON array).
package busmsg

import "github.com/xrdmon/xrdmon/internal/record"

// Routes says where r goes: to the WLCG destination when there is one
// (wlcg) and r matches m, and to the records destination when there is
// one (records), unless r goes to WLCG and wlcgOnly is set.
func Routes(r *record.Record, m *record.WLCGMatcher, wlcg, records, wlcgOnly bool) (toWLCG, toRecords bool) {
	toWLCG = wlcg && m.Match(r)
	return toWLCG, records && !(toWLCG && wlcgOnly)
}

// Message is the body of one message being packed. Only one goroutine may
// use it. Its fields are for reading; Add and Close change them.
type Message struct {
	Body    []byte
	N       int    // documents in Body
	FirstID string // the id of Body's first document
	Type    string // the type of Body's documents
	Key     string // what Body's documents share: one with another Key starts a new message
}

// Full reports whether a document of key needs a new message: m holds
// perMsg documents already, or documents of another key.
func (m *Message) Full(perMsg int, key string) bool {
	return m.N > 0 && (m.N >= perMsg || m.Key != key)
}

// Add appends a document, which enc appends, of key, type typ and id id.
// With perMsg > 1 the documents form a JSON array.
func (m *Message) Add(perMsg int, key, typ, id string, enc func([]byte) []byte) {
	if m.N == 0 {
		m.Body = m.Body[:0]
		m.FirstID, m.Key, m.Type = id, key, typ
		if perMsg > 1 {
			m.Body = append(m.Body, '[')
		}
	} else {
		m.Body = append(m.Body, ',')
	}
	m.Body = enc(m.Body)
	m.N++
}

// Close ends the body (the array's closing bracket with perMsg > 1) and
// returns its number of documents, with m emptied for the next message
// (Body stays valid until the next Add). It returns 0 for an empty
// message.
func (m *Message) Close(perMsg int) int {
	n := m.N
	if n == 0 {
		return 0
	}
	if perMsg > 1 {
		m.Body = append(m.Body, ']')
	}
	m.N = 0
	return n
}
