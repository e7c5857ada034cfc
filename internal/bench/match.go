package bench

import (
	"slices"
	"sync"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
)

// Status of an expected record after the run.
const (
	stMissing  uint8 = iota // never seen
	stComplete              // seen complete with the right bytes
	stPartial               // seen as a partial record
	stWrong                 // seen complete with different bytes
)

// expected is the compact ground truth of one record.
type expected struct {
	read, readv, write int64
	seen               int64 // ns since the step start when first seen; 0: not seen
	open               bool  // end_of_input: still open when the run ended
	status             uint8
}

type idKey struct {
	srv    int32
	fileID uint32
	stod   int64
}

type pathKey struct {
	srv  int32
	path string
}

// matcher holds a step's ground truth, fed by the generator's Record hook,
// and checks the collector's records against it. Safe for concurrent use.
type matcher struct {
	mu     sync.Mutex
	start  time.Time
	byPath bool // also index by (server, path), for collectors without file ids

	servers map[string]int32
	exp     []expected
	byID    map[idKey]int32
	paths   map[pathKey][]int32

	sentN  []int   // from the Sent hook: records 0..sentN[k]-1 were sent
	sentAt []int64 // ... by sentAt[k] (ns since start)

	open       int // expected records still open at the end (not to be written)
	seenN      int // expected records seen, not counting open ones
	unexpected int // observed records matching no expected one
	duplicates int // observed again after a match
	late       int // first seen after the step's measurement ended
}

func newMatcher(start time.Time, byPath bool) *matcher {
	return &matcher{
		start: start, byPath: byPath,
		servers: make(map[string]int32), byID: make(map[idKey]int32), paths: make(map[pathKey][]int32),
	}
}

func (m *matcher) server(ip string) int32 {
	s, ok := m.servers[ip]
	if !ok {
		s = int32(len(m.servers))
		m.servers[ip] = s
	}
	return s
}

// add records expected record i (the generator's Record hook).
func (m *matcher) add(i int, r *record.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i != len(m.exp) {
		panic("bench: expected records out of order")
	}
	e := expected{read: r.ReadBytes, readv: r.ReadvBytes, write: r.WriteBytes, open: r.Reason == record.EndOfInput}
	if r.Reason != record.Complete && !e.open {
		e.read, e.readv, e.write = -1, -1, -1 // a partial: bytes are not compared
	}
	m.exp = append(m.exp, e)
	if e.open {
		m.open++
	}
	srv := m.server(r.ServerIP)
	m.byID[idKey{srv, r.FileID, r.ServerStod}] = int32(i)
	if m.byPath {
		k := pathKey{srv, r.Path}
		m.paths[k] = append(m.paths[k], int32(i))
	}
}

// sent records the generator's Sent hook.
func (m *matcher) sent(n int, at time.Time) {
	m.mu.Lock()
	m.sentN = append(m.sentN, n)
	m.sentAt = append(m.sentAt, at.Sub(m.start).Nanoseconds())
	m.mu.Unlock()
}

// observe matches records first seen at time at; late marks records seen
// after the measurement (their latency is not counted).
func (m *matcher) observe(obs []Observed, at time.Time, late bool) {
	if len(obs) == 0 {
		return
	}
	ns := max(at.Sub(m.start).Nanoseconds(), 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range obs {
		o := &obs[i]
		idx := m.find(o)
		if idx < 0 {
			m.unexpected++
			continue
		}
		e := &m.exp[idx]
		if e.seen != 0 {
			m.duplicates++
			continue
		}
		e.seen = ns
		if !e.open {
			m.seenN++
		}
		if late {
			e.seen = -ns
			m.late++
		}
		switch {
		case o.Partial || e.read < 0:
			e.status = stPartial
		case o.Read == e.read && o.Readv == e.readv && o.Write == e.write:
			e.status = stComplete
		default:
			e.status = stWrong
		}
	}
}

// find returns the expected record o matches, or -1.
func (m *matcher) find(o *Observed) int {
	srv, ok := m.servers[o.ServerIP]
	if !ok {
		return -1
	}
	if o.HasID {
		if i, ok := m.byID[idKey{srv, o.FileID, o.Stod}]; ok {
			return int(i)
		}
		if !m.byPath {
			return -1
		}
	}
	cands := m.paths[pathKey{srv, o.Path}]
	first := -1
	for _, c := range cands {
		e := &m.exp[c]
		if e.seen != 0 {
			continue
		}
		if first < 0 {
			first = int(c)
		}
		if e.read == o.Read && e.readv == o.Readv && e.write == o.Write {
			return int(c)
		}
	}
	if first < 0 && len(cands) > 0 {
		return int(cands[0]) // every candidate already seen: a duplicate
	}
	return first
}

// progress returns the expected records seen so far and those expected
// (neither counting the ones still open at the end).
func (m *matcher) progress() (seen, expected int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seenN, len(m.exp) - m.open
}

// pending returns the number of expected records not yet seen, not
// counting those still open at the end of the run.
func (m *matcher) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for i := range m.exp {
		if m.exp[i].seen == 0 && !m.exp[i].open {
			n++
		}
	}
	return n
}

// Check is the comparison of a step's records with the ground truth.
type Check struct {
	Expected   int // records the collector must write (not counting Open)
	Complete   int // seen complete with the right bytes
	Partial    int // seen as partial records
	Missing    int // never seen
	WrongBytes int // seen complete with different byte counts
	Open       int // still open when the generator stopped (not expected)
	Unexpected int // records matching no expected record
	Duplicates int // records seen more than once
}

// result returns the check and the latencies (sorted) of the records seen
// during the measurement.
func (m *matcher) result() (Check, []time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := Check{Unexpected: m.unexpected, Duplicates: m.duplicates}
	var lat []time.Duration
	for i := range m.exp {
		e := &m.exp[i]
		if e.open {
			c.Open++
			continue
		}
		c.Expected++
		switch {
		case e.seen == 0:
			c.Missing++
		case e.status == stComplete:
			c.Complete++
		case e.status == stPartial:
			c.Partial++
		case e.status == stWrong:
			c.WrongBytes++
		}
		if e.seen > 0 {
			if sent, ok := m.sentTime(i); ok {
				lat = append(lat, time.Duration(max(e.seen-sent, 0)))
			}
		}
	}
	slices.Sort(lat)
	return c, lat
}

// sentTime returns when the last packet of record i was written.
func (m *matcher) sentTime(i int) (int64, bool) {
	k, _ := slices.BinarySearch(m.sentN, i+1)
	if k == len(m.sentN) {
		return 0, false
	}
	return m.sentAt[k], true
}

// percentile returns the p-th percentile (0..100) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1)*p/100 + 0.5)
	return sorted[min(max(i, 0), len(sorted)-1)]
}
