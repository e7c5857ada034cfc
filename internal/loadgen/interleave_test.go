package loadgen

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
)

// interleave returns the packets of every server in an order a bus could
// deliver them: servers interleaved at random, and each packet of a server
// delayed behind up to maxDelay later packets of the same server.
func interleave(pkts []source.Packet, maxDelay int, rng *rand.Rand) []source.Packet {
	byServer := map[netip.Addr][]source.Packet{}
	var order []netip.Addr
	for _, p := range pkts {
		a := p.Sender.Addr()
		if _, ok := byServer[a]; !ok {
			order = append(order, a)
		}
		byServer[a] = append(byServer[a], p)
	}
	for _, a := range order {
		s := byServer[a]
		// Each packet gets a key: its position plus a random delay; a
		// stable sort by key moves it behind at most maxDelay others.
		keys := make([]int, len(s))
		for i := range s {
			keys[i] = i + rng.IntN(maxDelay+1)
		}
		idx := make([]int, len(s))
		for i := range idx {
			idx[i] = i
		}
		sortStable(idx, func(x, y int) bool { return keys[x] < keys[y] })
		shuffled := make([]source.Packet, len(s))
		for i, j := range idx {
			shuffled[i] = s[j]
		}
		byServer[a] = shuffled
	}
	out := make([]source.Packet, 0, len(pkts))
	for len(order) > 0 {
		i := rng.IntN(len(order))
		a := order[i]
		out = append(out, byServer[a][0])
		if byServer[a] = byServer[a][1:]; len(byServer[a]) == 0 {
			order = append(order[:i], order[i+1:]...)
		}
	}
	return out
}

func sortStable(idx []int, less func(x, y int) bool) {
	for i := 1; i < len(idx); i++ { // insertion sort: nearly sorted input
		for j := i; j > 0 && less(idx[j], idx[j-1]); j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
}

// TestInterleavingsKeepEveryClose is the property of the sequence tracker
// and the correlator together: whatever order a bus delivers the servers'
// packets in (servers interleaved at random, each server's packets delayed
// behind up to maxDelay of its later ones), every file close of the truth
// yields exactly one complete record, and no datagram is dropped as a
// duplicate.
func TestInterleavingsKeepEveryClose(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 2 * time.Minute
	cfg.Servers = 5
	cfg.Seed = 11
	cfg.Drain = true
	truth, capture := generatePcap(t, cfg)
	pkts := readCapture(t, capture)
	want := map[string]bool{}
	for i := range truth.Records {
		if truth.Records[i].Reason == record.Complete {
			want[recordKey(&truth.Records[i])] = true
		}
	}
	if len(want) < 100 {
		t.Fatalf("only %d complete records in the truth", len(want))
	}
	for _, maxDelay := range []int{0, 3, 15, 40} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("delay=%d/seed=%d", maxDelay, seed), func(t *testing.T) {
				order := interleave(pkts, maxDelay, rand.New(rand.NewPCG(seed, uint64(maxDelay))))
				sh := correlate.NewShard(correlate.DefaultConfig())
				var last time.Time
				var recs []record.Record
				for _, p := range order {
					sh.Handle(p.Data, p.Sender, p.Received)
					if p.Received.After(last) {
						last = p.Received
					}
					recs, _, _ = drainShard(sh, recs, nil)
				}
				sh.Flush(last)
				recs, _, _ = drainShard(sh, recs, nil)
				st := sh.Stats()
				if st.Duplicates != 0 {
					t.Errorf("%d datagrams dropped as duplicates (there are none)", st.Duplicates)
				}
				complete := map[string]int{}
				for i := range recs {
					if recs[i].Reason == record.Complete {
						complete[recordKey(&recs[i])]++
					}
				}
				missing, twice := 0, 0
				for k := range want {
					switch complete[k] {
					case 0:
						missing++
						for i := range recs {
							if recordKey(&recs[i]) == k && missing <= 3 {
								t.Logf("close %s: record %s (read %d)", k, recs[i].Reason, recs[i].ReadBytes)
							}
						}
					case 1:
					default:
						twice++
					}
				}
				if missing > 0 || twice > 0 || len(complete) != len(want) {
					t.Errorf("%d closes of the truth: %d without a complete record, %d with more than one, %d complete records in all (reordered %d, stale %d, lost %d)",
						len(want), missing, twice, len(complete), st.Reordered, st.Stale, st.TotalLost())
				}
				if maxDelay < 16 && st.TotalLost() != 0 {
					t.Errorf("%d counted lost with every packet delivered within the reorder window", st.TotalLost())
				}
			})
		}
	}
}
