package pipeline

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/xrdmon/xrdmon/internal/backoff"
	"github.com/xrdmon/xrdmon/internal/record"
)

// The commit's enrichment: what the writer does to a barrier's output
// before it appends it, as named steps, in order. Each runs in the
// writer's goroutine, on what the shards drained (correlate.Output).

// enrich runs the enrichment steps on br's output: the events typed, the
// records linked to their redirects, the hosts named (of the progress
// snapshots too, which are appended as they are: store.Entry.Progress).
func (p *Pipeline) enrich(ctx context.Context, br *barrier) error {
	p.typeEvents(br)
	if err := p.linkRedirects(ctx, br); err != nil {
		return err
	}
	p.name(br.out.Records, br.out.Events)
	p.name([][]record.Record{br.out.Progress}, nil)
	return nil
}

// typeEvents types the events (record.TypeEvent: JSON of g-stream lines
// and summaries is parsed here, off the packet path) and counts those that
// are not valid. Many events (a g-stream flood, the end of a replay) are
// typed on every core: the commit waits for them.
func (p *Pipeline) typeEvents(br *barrier) {
	evs := br.out.Events
	n := runtime.GOMAXPROCS(0)
	if n < 2 || len(evs) < 2*typePart {
		p.typeEventsOf(evs)
		return
	}
	n = min(n, len(evs)/typePart)
	var wg sync.WaitGroup
	for w := range n {
		part := evs[w*len(evs)/n : (w+1)*len(evs)/n]
		wg.Go(func() { p.typeEventsOf(part) })
	}
	wg.Wait()
}

// typePart is the least number of events typeEvents gives one core.
const typePart = 512

// typeEventsOf types evs and counts those that are not valid. Their typed
// payloads are written into chunks of at most typeChunk bytes: an
// allocation per chunk, not per event.
func (p *Pipeline) typeEventsOf(evs []record.Event) {
	var (
		invalid uint64
		chunk   []byte
		need    int // what the events left to type may take
	)
	for i := range evs {
		need += len(evs[i].Raw) + 64
	}
	for i := range evs {
		e := &evs[i]
		if room := len(e.Raw) + 64; cap(chunk)-len(chunk) < room && room <= typeChunk/4 {
			chunk = make([]byte, 0, min(need, typeChunk))
		}
		need -= len(e.Raw) + 64
		used, valid := record.TypeEventIn(e, chunk[len(chunk):])
		chunk = chunk[:len(chunk)+used]
		if !valid {
			invalid++
		}
	}
	if invalid > 0 {
		p.invalidEvents.Add(invalid)
	}
}

// typeChunk is the most bytes of typed payloads typeEventsOf allocates at
// once.
const typeChunk = 32 << 10

// linkRedirects gives the records and redirects to the redirect linker,
// which may hold records back until their redirects can have come, and
// gives back held ones (correlate.Linker.Commit). In a cluster it also
// gets the other shards' redirects, committed by their collectors (they
// are stored already: not appended here).
func (p *Pipeline) linkRedirects(ctx context.Context, br *barrier) error {
	lev := br.out.Events
	if p.feed != nil {
		foreign, err := p.foreignRedirects(ctx)
		if err != nil {
			return err
		}
		if len(foreign) > 0 {
			lev = append(foreign, br.out.Events...)
		}
	}
	br.out.Records = p.linker.Commit(br.out.Records, lev, br.out.Opens, br.now, br.flush)
	for _, c := range br.out.Records {
		br.nrecs += len(c)
	}
	st := p.linker.Stats()
	p.linkStats.Store(&st)
	return nil
}

// foreignRedirects reads the other shards' redirects, retrying as a
// commit does: the linker must not decide opens without them.
func (p *Pipeline) foreignRedirects(ctx context.Context) ([]record.Event, error) {
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 0; ; attempt++ {
		evs, err := p.feed.ForeignRedirects(ctx)
		if err == nil {
			return evs, nil
		}
		p.ready.Store(false)
		p.m.commitErrors.Inc()
		if attempt%10 == 0 {
			p.log.Warn("Reading the other shards' redirects failed; retrying", "err", err, "attempt", attempt+1)
		}
		t := time.NewTimer(retry.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("stopped while reading the other shards' redirects (input not acknowledged): %w", err)
		case <-t.C:
		}
	}
}

// name fills server and client host names from the DNS cache, waiting at most
// DNSMaxWait in total for names still being looked up.
func (p *Pipeline) name(chunks [][]record.Record, evs []record.Event) {
	if p.namer == nil {
		return
	}
	deadline := time.Now().Add(p.opts.DNSMaxWait)
	waiter, _ := p.namer.(resolvedWaiter)
	for {
		var wake <-chan struct{}
		if waiter != nil {
			wake = waiter.Resolved() // before the look: a lookup ending after it wakes the wait
		}
		missing := false
		for _, recs := range chunks {
			for i := range recs {
				r := &recs[i]
				if !p.nameServer(&r.ServerHost, r.ServerIP) {
					missing = true
				}
				if r.ClientName == "" && r.ClientHost != "" {
					if n, ok := p.lookup(r.ClientHost); ok {
						r.ClientName = n
					} else if isAddr(r.ClientHost) {
						missing = true
					}
				}
			}
		}
		for i := range evs {
			if !p.nameServer(&evs[i].ServerHost, evs[i].ServerIP) {
				missing = true
			}
		}
		if !missing || !time.Now().Before(deadline) {
			return
		}
		wait := time.NewTimer(time.Until(deadline))
		if wake == nil { // a Namer that cannot say: look again soon
			wait.Reset(min(10*time.Millisecond, time.Until(deadline)))
		}
		select {
		case <-wake:
		case <-wait.C:
		}
		wait.Stop()
	}
}

// nameServer sets *host, when empty, to the name of the server address
// ip; false when it is still empty (the name not known yet).
func (p *Pipeline) nameServer(host *string, ip string) bool {
	if *host != "" {
		return true
	}
	n, ok := p.lookup(ip)
	if ok {
		*host = n
	}
	return ok
}

// resolvedWaiter is a Namer that can wake a wait for names
// (dnscache.Cache.Resolved).
type resolvedWaiter interface {
	Resolved() <-chan struct{}
}

// lookup names an address text (an IP, maybe in brackets, maybe
// IPv4-mapped); a text that is not an address is already a name.
func (p *Pipeline) lookup(text string) (string, bool) {
	a, ok := parseAddr(text)
	if !ok {
		return "", false
	}
	return p.namer.Lookup(a)
}

func isAddr(text string) bool { _, ok := parseAddr(text); return ok }

func parseAddr(text string) (netip.Addr, bool) {
	if len(text) > 2 && text[0] == '[' && text[len(text)-1] == ']' {
		text = text[1 : len(text)-1]
	}
	a, err := netip.ParseAddr(text)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}
