package correlate

import (
	"bufio"
	"os"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/sourcetest"
)

// The captured packets hold map records only (u, i, d, T from three
// servers, two of them behind one shoveler address): no f-stream, so no
// records, but every packet is accounted and the state is as expected.
func TestRealPackets(t *testing.T) {
	f, err := os.Open(sourcetest.RealPacketsPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := NewShard(DefaultConfig())
	now := time.Unix(1748891940, 0)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		p, err := source.ParseShoveler(sc.Bytes())
		if err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		s.Handle(p.Data, p.Sender, now)
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Packets != uint64(n) || st.Accounted != uint64(n) || st.TotalRejected() != 0 {
		t.Errorf("packets %d accounted %d rejected %v", st.Packets, st.Accounted, st.Rejected)
	}
	if st.TotalLost() != 0 || st.Duplicates != 0 || st.Reordered != 0 || st.Stale != 0 {
		t.Errorf("sequence: %+v", st)
	}
	if st.Servers != 3 || st.Sessions != 5 || st.PendingRefs != 2 || st.OpenFiles != 0 {
		t.Errorf("state: servers %d sessions %d pending %d files %d", st.Servers, st.Sessions, st.PendingRefs, st.OpenFiles)
	}
	if recs, evs := drain(s); len(recs) != 0 || len(evs) != 0 {
		t.Error("records or events from map records")
	}
	// The T record (Uc=1995247) and the i record attach to their session.
	var found bool
	for _, inc := range s.incList {
		if i, ok := s.sessIdx.get(dictKey(inc.id, 1995247)); ok {
			found = true
			ss := s.sess.at(i)
			if ss.token == nil || ss.token.subject != "jacob.lange" || ss.token.org != "https://osdf.igwn.org/cit" ||
				ss.appInfo != "Go-http-client/1.1" || ss.prot != "https" || ss.login.authProt != "https" {
				t.Errorf("session: %+v token %+v", ss, ss.token)
			}
		}
	}
	if !found {
		t.Error("session 1995247 not found")
	}
	s.Flush(now)
	if st := s.Stats(); st.TotalLost() != 0 || st.TotalRecords() != 0 || st.Servers != 0 {
		t.Errorf("after flush: %+v", st)
	}
}

// TestRealPacketsOutOfOrder: the captured packets delivered newest first,
// as a bus may deliver them after a delay: each is applied (the first one
// seen marks nothing before it as seen), none is taken for a duplicate or
// counted lost, and the state is that of the in-order run.
func TestRealPacketsOutOfOrder(t *testing.T) {
	f, err := os.Open(sourcetest.RealPacketsPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pkts []source.Packet
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		p, err := source.ParseShoveler(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, source.Packet{Data: append([]byte(nil), p.Data...), Sender: p.Sender})
	}
	now := time.Unix(1748891940, 0)
	s := NewShard(DefaultConfig())
	for i := len(pkts) - 1; i >= 0; i-- {
		s.Handle(pkts[i].Data, pkts[i].Sender, now)
	}
	// Each again: true duplicates, recognised by their bytes.
	for i := range pkts {
		s.Handle(pkts[i].Data, pkts[i].Sender, now)
	}
	st := s.Stats()
	n := uint64(len(pkts))
	if st.Accounted != 2*n || st.TotalRejected() != 0 || st.TotalLost() != 0 {
		t.Errorf("accounted %d of %d, rejected %d, lost %d", st.Accounted, 2*n, st.TotalRejected(), st.TotalLost())
	}
	if st.Duplicates != n || st.SeqCollisions != 0 {
		t.Errorf("%d duplicates (want %d, the second delivery), %d collisions", st.Duplicates, n, st.SeqCollisions)
	}
	if st.Servers != 3 || st.Sessions != 5 || st.PendingRefs != 2 {
		t.Errorf("state: servers %d sessions %d pending %d", st.Servers, st.Sessions, st.PendingRefs)
	}
}
