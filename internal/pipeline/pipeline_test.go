package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/xrdmon/xrdmon/internal/correlate"
	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/store"
)

// fakeStore records what the pipeline writes, in order, and can fail.
type fakeStore struct {
	mu       sync.Mutex
	log      []string // "append", "state <key>", "ack <n>"
	recs     []record.Record
	evs      []record.Event
	progress []record.Record
	states   map[string][]byte
	failLeft int   // Append calls that fail before one succeeds
	failWith error // the error of those calls (default: a transient one)
	getErr   error // the error of every GetState
	// failAfter, when set, makes the Append after that many successful
	// ones fail once (a disk filling in the middle of a commit).
	failAfter, appends int
}

func (f *fakeStore) AppendWithProgress(_ context.Context, recs []record.Record, evs []record.Event, progress []record.Record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failLeft > 0 {
		f.failLeft--
		if f.failWith != nil {
			return f.failWith
		}
		return errors.New("disk on fire")
	}
	if f.failAfter > 0 && f.appends == f.failAfter {
		f.failAfter = 0
		return errors.New("disk full")
	}
	f.appends++
	f.log = append(f.log, "append")
	f.recs = append(f.recs, recs...)
	f.evs = append(f.evs, evs...)
	f.progress = append(f.progress, progress...)
	return nil
}

func (f *fakeStore) PutState(_ context.Context, key string, blob []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.states == nil {
		f.states = map[string][]byte{}
	}
	f.states[key] = append([]byte(nil), blob...)
	f.log = append(f.log, "state "+key)
	return nil
}

func (f *fakeStore) GetState(_ context.Context, key string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.getErr != nil {
		return nil, f.getErr
	}
	return f.states[key], nil
}

func (f *fakeStore) note(s string) {
	f.mu.Lock()
	f.log = append(f.log, s)
	f.mu.Unlock()
}

// transfer returns the datagrams of one file read on a server: login, and
// an f packet with open, (optionally) close and disconnect.
func transfer(stod uint32, seq *uint8, fseq *uint8, user, file uint32, closed bool) [][]byte {
	*seq++
	uid := "xroot/alice.1:77@client.example.org"
	u := packet.AppendMap(nil, packet.Header{Code: packet.CodeUser, Pseq: *seq, Stod: stod}, user, []byte(uid+"\n&p=gsi&n=alice&h=c&o=cms&r=&g=&m=&I=4"))
	*fseq++
	var fb packet.FStreamBuilder
	fb.Reset(nil, packet.Header{Pseq: *fseq, Stod: stod}, 1700000000, 1700000001, 77, true)
	fb.Open(packet.FileOpen{FileID: file, FileSize: 10, HasLFN: true, User: user, LFN: []byte("/store/f")})
	fb.Xfr(packet.FileXfr{FileID: file, Read: 5})
	if closed {
		fb.Close(packet.FileClose{FileID: file, Read: 10})
	}
	return [][]byte{u, fb.Finish(1700000002)}
}

func batchOf(sender string, pkts [][]byte, ack func() error, freed *int32, mu *sync.Mutex) *source.Batch {
	b := &source.Batch{Ack: ack}
	for _, p := range pkts {
		b.Packets = append(b.Packets, source.Packet{Data: p, Sender: netip.MustParseAddrPort(sender), Received: time.Now()})
	}
	b.Free = func() { mu.Lock(); *freed++; mu.Unlock() }
	return b
}

func testOptions() Options {
	o := DefaultOptions()
	o.Shards = 2
	o.FlushInterval = 10 * time.Millisecond
	o.CheckpointInterval = 30 * time.Millisecond
	return o
}

// start runs a pipeline of o over st and returns its input and the
// channel of Run's result.
func start(t *testing.T, o Options, st Store) (chan<- *source.Batch, <-chan error) {
	t.Helper()
	p, err := New(context.Background(), o, st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *source.Batch)
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background(), in) }()
	return in, done
}

// TestAckAfterCheckpoint: a batch is acknowledged only after its records are
// appended and every shard's state has been checkpointed; every batch is
// freed exactly once; records come out complete.
func TestAckAfterCheckpoint(t *testing.T) {
	st := &fakeStore{}
	p, err := New(context.Background(), testOptions(), st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *source.Batch)
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background(), in) }()

	var mu sync.Mutex
	var freed int32
	senders := []string{"192.0.2.1:1094", "192.0.2.2:1094", "[2001:db8::3]:1094", "192.0.2.4:1094"}
	for i, sender := range senders {
		var seq, fseq uint8
		n := i
		in <- batchOf(sender, transfer(1700000000, &seq, &fseq, 10, 11, true), func() error {
			st.note("ack " + string(rune('0'+n)))
			return nil
		}, &freed, &mu)
	}
	close(in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(st.recs) != 4 {
		t.Fatalf("%d records, want 4", len(st.recs))
	}
	for _, r := range st.recs {
		if r.Partial() || r.ReadBytes != 10 || r.User != "alice" {
			t.Errorf("record %+v", r)
		}
	}
	if freed != 4 {
		t.Errorf("batches freed %d times, want 4", freed)
	}
	// Every ack comes after an append and after both shards' states that
	// follow it in the log.
	log := strings.Join(st.log, ",")
	for _, n := range "0123" {
		ack := strings.Index(log, "ack "+string(n))
		if ack < 0 {
			t.Fatalf("batch %c never acknowledged: %s", n, log)
		}
		before := log[:ack]
		if !strings.Contains(before, "append") || !strings.Contains(before, "state correlate/0-of-2") ||
			!strings.Contains(before, "state correlate/1-of-2") {
			t.Errorf("ack %c before its records and checkpoint were durable: %s", n, log)
		}
	}
	if s := p.Stats(); s.Accounted != 8 || s.TotalRejected() != 0 || s.TotalLost() != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestAckPacketsCheckpointsEarly: with AckPackets, acknowledgeable input
// does not wait for the checkpoint interval: once that many packets wait,
// the next batch brings a checkpoint, after which they are acknowledged.
// (The broker sends at most prefetch unacknowledged messages: without this
// the input would run at prefetch per checkpoint interval.)
func TestAckPacketsCheckpointsEarly(t *testing.T) {
	st := &fakeStore{}
	o := testOptions()
	o.FlushInterval, o.CheckpointInterval = time.Hour, time.Hour // no timed commit
	o.AckPackets = 4
	in, done := start(t, o, st)

	var mu sync.Mutex
	var freed int32
	acked := make(chan int, 8)
	for i := range 2 { // 2 batches of 2 packets: 4 packets wait
		var seq, fseq uint8
		in <- batchOf(fmt.Sprintf("192.0.2.%d:1094", i+1), transfer(1700000000, &seq, &fseq, 10, 11, true), func() error {
			st.note(fmt.Sprintf("ack %d", i))
			acked <- i
			return nil
		}, &freed, &mu)
	}
	for range 2 {
		select {
		case <-acked:
		case <-time.After(10 * time.Second):
			st.mu.Lock()
			t.Fatalf("not acknowledged while the input is open: %v", st.log)
		}
	}
	log := func() string { st.mu.Lock(); defer st.mu.Unlock(); return strings.Join(st.log, ",") }()
	ack := strings.Index(log, "ack 0")
	if before := log[:ack]; !strings.Contains(before, "append") || !strings.Contains(before, "state correlate/0-of-2") ||
		!strings.Contains(before, "state correlate/1-of-2") {
		t.Errorf("acknowledged before records and checkpoint were durable: %s", log)
	}
	close(in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(st.recs) != 2 {
		t.Errorf("%d records, want 2", len(st.recs))
	}
}

// TestCommitBytes: with CommitBytes set, a commit comes after that many
// bytes of datagrams, though neither CommitPackets nor the flush interval
// is due: the records of each are appended while the input goes on.
func TestCommitBytes(t *testing.T) {
	st := &fakeStore{}
	o := testOptions()
	o.FlushInterval, o.CheckpointInterval = time.Hour, time.Hour // no timed commit
	o.StateKey = ""
	o.CommitBytes = 1
	in, done := start(t, o, st)
	var mu sync.Mutex
	var freed int32
	for i := range 3 {
		var seq, fseq uint8
		in <- batchOf(fmt.Sprintf("192.0.2.%d:1094", i+1), transfer(1700000000, &seq, &fseq, 10, 11, true), nil, &freed, &mu)
		deadline := time.Now().Add(10 * time.Second)
		for {
			st.mu.Lock()
			n := len(st.recs)
			st.mu.Unlock()
			if n == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("batch %d: %d records appended while the input is open, want %d", i, n, i+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
	close(in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRestoreFromCheckpoint: a file opened before the pipeline stops is
// completed by a close after a new pipeline restores the checkpoint.
func TestRestoreFromCheckpoint(t *testing.T) {
	// Checkpoints are stored compressed; a plain one (written before
	// they were) is restored too.
	t.Run("compressed", func(t *testing.T) { restoreFromCheckpoint(t, false) })
	t.Run("plain", func(t *testing.T) { restoreFromCheckpoint(t, true) })
}

func restoreFromCheckpoint(t *testing.T, plain bool) {
	st := &fakeStore{}
	var mu sync.Mutex
	var freed int32
	var seq, fseq uint8
	run := func(pkts [][]byte) {
		p, err := New(context.Background(), testOptions(), st, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		in := make(chan *source.Batch, 1)
		in <- batchOf("192.0.2.9:1094", pkts, nil, &freed, &mu)
		close(in)
		if err := p.Run(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	run(transfer(1700000000, &seq, &fseq, 20, 21, false))
	if len(st.recs) != 0 {
		t.Fatalf("records before the close: %+v", st.recs)
	}
	shards := 0
	for key, blob := range st.states {
		if !strings.HasPrefix(key, "correlate/") || strings.HasSuffix(key, "/redirects") {
			continue
		}
		shards++
		if !bytes.HasPrefix(blob, []byte(shardStateMagic)) {
			t.Fatalf("checkpoint %s not compressed: %q", key, blob[:min(len(blob), 16)])
		}
		if plain {
			raw, err := io.ReadAll(shardState(blob))
			if err != nil {
				t.Fatal(err)
			}
			st.states[key] = raw
		}
	}
	if shards != testOptions().Shards {
		t.Fatalf("%d shard checkpoints", shards)
	}
	fseq++
	var fb packet.FStreamBuilder
	fb.Reset(nil, packet.Header{Pseq: fseq, Stod: 1700000000}, 1700000100, 1700000101, 77, true)
	fb.Close(packet.FileClose{FileID: 21, Read: 99})
	run([][]byte{fb.Finish(1700000102)})
	if len(st.recs) != 1 || st.recs[0].Partial() || st.recs[0].ReadBytes != 99 || st.recs[0].User != "alice" {
		t.Fatalf("records %+v", st.recs)
	}
}

// TestStoreFailureRetries: a failing store delays the commit and the ack;
// nothing is dropped.
func TestStoreFailureRetries(t *testing.T) {
	st := &fakeStore{failLeft: 3}
	p, err := New(context.Background(), testOptions(), st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var freed int32
	var seq, fseq uint8
	acked := make(chan struct{})
	in := make(chan *source.Batch, 1)
	in <- batchOf("192.0.2.5:1094", transfer(1700000000, &seq, &fseq, 30, 31, true), func() error {
		if st.failLeft > 0 {
			t.Error("acknowledged while the store was failing")
		}
		close(acked)
		return nil
	}, &freed, &mu)
	close(in)
	if err := p.Run(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	select {
	case <-acked:
	default:
		t.Fatal("batch never acknowledged")
	}
	if len(st.recs) != 1 {
		t.Fatalf("%d records, want 1", len(st.recs))
	}
}

// TestFlushOnExit: replay mode writes still-open files as end_of_input
// partial records with the bytes of their last isXfr.
func TestFlushOnExit(t *testing.T) {
	var seq, fseq uint8
	st := replayOne(t, "192.0.2.6:1094", transfer(1700000000, &seq, &fseq, 40, 41, false))
	if len(st.recs) != 1 || st.recs[0].Reason != record.EndOfInput || st.recs[0].ReadBytes != 5 {
		t.Fatalf("records %+v", st.recs)
	}
	if len(st.states) != 0 {
		t.Errorf("checkpointed with StateKey empty: %v", st.states)
	}
}

// TestPrunesOtherLayouts: once every shard has checkpointed, the
// checkpoints of another shard count are dropped from the real store (they
// are never restored, and would hold the store's duplicate window open),
// and other keys stay.
func TestPrunesOtherLayouts(t *testing.T) {
	so := store.DefaultOptions()
	so.Path = filepath.Join(t.TempDir(), "store.db")
	st, err := store.Open(so, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	o := testOptions()
	o.Shards = 2
	for _, k := range []string{o.StateKey + "/0-of-4", o.StateKey + "/3-of-4", "other/0-of-4"} {
		if err := st.PutState(ctx, k, []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	p, err := New(ctx, o, st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *source.Batch)
	close(in)
	if err := p.Run(ctx, in); err != nil { // the last barrier checkpoints
		t.Fatal(err)
	}
	for k, want := range map[string]bool{
		o.StateKey + "/0-of-2": true, o.StateKey + "/1-of-2": true,
		o.StateKey + "/0-of-4": false, o.StateKey + "/3-of-4": false, "other/0-of-4": true,
	} {
		_, err := st.GetState(ctx, k)
		if got := err == nil; got != want {
			t.Errorf("state %s present = %v (%v), want %v", k, got, err, want)
		}
	}
}

// TestEventsEveryShardCount: g-stream events of several servers, which hash
// to different shards, are stored exactly once whatever the shard count, in
// barriers without records (where a later shard's answer used to replace
// the events of an earlier one) and in barriers with records.
func TestEventsEveryShardCount(t *testing.T) {
	senders := []string{"192.0.2.10:1094", "192.0.2.11:1094", "192.0.2.12:1094", "192.0.2.13:1094", "198.51.100.7:1094", "[2001:db8::5]:1094"}
	const perSender = 60
	for _, shards := range []int{1, 2, 4} {
		for _, withRecords := range []bool{false, true} {
			t.Run(fmt.Sprintf("shards=%d/records=%v", shards, withRecords), func(t *testing.T) {
				st := &fakeStore{}
				o := testOptions()
				o.Shards = shards
				p, err := New(context.Background(), o, st, nil, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				var freed int32
				in := make(chan *source.Batch, 4)
				done := make(chan error, 1)
				go func() { done <- p.Run(context.Background(), in) }()
				wantRecs := 0
				for i := range perSender {
					for si, sender := range senders {
						h := packet.Header{Code: packet.CodeGStream, Pseq: uint8(i), Stod: 1700000000}
						line := fmt.Appendf(nil, `{"event":"throttle_update","io_wait":%d,"io_active":%d,"io_total":3}`, i, si)
						pkts := [][]byte{packet.AppendGStream(nil, h, 1700000000, 1700000001, packet.ProviderCache, 9, [][]byte{line})}
						if withRecords && i%20 == 0 && si%2 == 0 {
							seq, fseq := uint8(i/20), uint8(i/20)
							pkts = append(pkts, transfer(1700000000, &seq, &fseq, uint32(100+i), uint32(1000+i), true)...)
							wantRecs++
						}
						in <- batchOf(sender, pkts, nil, &freed, &mu)
					}
					if i%10 == 0 {
						time.Sleep(15 * time.Millisecond) // let barriers fall between batches
					}
				}
				close(in)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				want := perSender * len(senders)
				if len(st.evs) != want {
					t.Fatalf("%d events stored, want %d", len(st.evs), want)
				}
				seen := map[string]bool{}
				for i := range st.evs {
					k := st.evs[i].ServerIP + " " + string(st.evs[i].Data)
					if seen[k] {
						t.Fatalf("event stored twice: %s", k)
					}
					seen[k] = true
				}
				if len(st.recs) != wantRecs {
					t.Errorf("%d records, want %d", len(st.recs), wantRecs)
				}
			})
		}
	}
}

// runFailing runs one transfer through a pipeline on st and returns Run's
// error and whether the batch was acknowledged; cancel, when set, is
// called once Run has been retrying for a while.
func runFailing(t *testing.T, st *fakeStore, cancelAfter time.Duration) (error, bool) {
	t.Helper()
	p, err := New(context.Background(), testOptions(), st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if cancelAfter > 0 {
		time.AfterFunc(cancelAfter, cancel)
	}
	var mu sync.Mutex
	var freed int32
	var seq, fseq uint8
	var acked atomic.Bool
	in := make(chan *source.Batch, 1)
	in <- batchOf("192.0.2.5:1094", transfer(1700000000, &seq, &fseq, 30, 31, true), func() error { acked.Store(true); return nil }, &freed, &mu)
	close(in)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, in) }()
	select {
	case err := <-done:
		return err, acked.Load()
	case <-time.After(time.Minute):
		t.Fatal("Run did not return: the pipeline stalls on a failing store")
	}
	return nil, false
}

// TestPermanentStoreErrorStops: an error the store will repeat (a row over
// SQLite's size limit) ends Run with that error instead of retrying it
// forever, and the input is not acknowledged.
func TestPermanentStoreErrorStops(t *testing.T) {
	tooBig := fmt.Errorf("put state: %w", sqlite3.Error{Code: sqlite3.ErrTooBig})
	err, acked := runFailing(t, &fakeStore{failLeft: 1 << 30, failWith: tooBig}, 0)
	if err == nil || !errors.Is(err, tooBig) {
		t.Fatalf("Run = %v, want the permanent error", err)
	}
	if acked {
		t.Error("input acknowledged although nothing was stored")
	}
}

// TestShutdownWhileStoreFails: a store that keeps failing with a transient
// error is retried until ctx is cancelled; then Run ends, unacknowledged.
func TestShutdownWhileStoreFails(t *testing.T) {
	err, acked := runFailing(t, &fakeStore{failLeft: 1 << 30}, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not acknowledged") {
		t.Fatalf("Run = %v, want an error saying the input was not acknowledged", err)
	}
	if acked {
		t.Error("input acknowledged although nothing was stored")
	}
}

// TestUnreadableCheckpointRefusesStart: only a missing checkpoint means an
// empty state; an error reading it, or a checkpoint that does not decode,
// stops New instead of silently forgetting every open transfer.
func TestUnreadableCheckpointRefusesStart(t *testing.T) {
	o := testOptions()
	if _, err := New(context.Background(), o, &fakeStore{getErr: fmt.Errorf("get state: %w", store.ErrNotFound)}, nil, nil, nil); err != nil {
		t.Fatalf("missing checkpoint: %v", err)
	}
	if _, err := New(context.Background(), o, &fakeStore{getErr: errors.New("I/O error")}, nil, nil, nil); err == nil {
		t.Fatal("a checkpoint that could not be read was taken as no checkpoint")
	}
	bad := &fakeStore{states: map[string][]byte{}}
	for i := range o.Shards {
		bad.states[fmt.Sprintf("%s/%d-of-%d", o.StateKey, i, o.Shards)] = []byte("not a checkpoint")
	}
	if _, err := New(context.Background(), o, bad, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("corrupt checkpoint: New = %v, want an error", err)
	}
}

// TestInputClock: with time following the input, a file of a capture
// times out when the capture's clock passes its TTL (not the wall clock,
// which would expire every file of an old capture at once), and a
// capture whose clock never passes it keeps the file open.
func TestInputClock(t *testing.T) {
	captured := time.Unix(1700000000, 0)
	for _, tc := range []struct {
		name  string
		later time.Duration // when the capture's last packet came
		want  record.Reason
	}{
		{"within the TTL", time.Hour, record.EndOfInput},
		{"past the TTL", 25 * time.Hour, record.Timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &fakeStore{}
			o := testOptions()
			o.InputClock, o.FlushOnExit, o.StateKey = true, true, ""
			p, err := New(context.Background(), o, st, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var freed int32
			var seq, fseq uint8
			in := make(chan *source.Batch, 2)
			b := batchOf("192.0.2.6:1094", transfer(1700000000, &seq, &fseq, 40, 41, false), nil, &freed, &mu)
			for i := range b.Packets {
				b.Packets[i].Received = captured
			}
			in <- b
			// Another server's packet, tc.later in the capture.
			var seq2, fseq2 uint8
			b2 := batchOf("192.0.2.7:1094", transfer(1700000000, &seq2, &fseq2, 50, 51, true), nil, &freed, &mu)
			for i := range b2.Packets {
				b2.Packets[i].Received = captured.Add(tc.later)
			}
			in <- b2
			close(in)
			if err := p.Run(context.Background(), in); err != nil {
				t.Fatal(err)
			}
			var got []record.Reason
			for _, r := range st.recs {
				if r.ServerIP == "192.0.2.6" {
					got = append(got, r.Reason)
				}
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("open file of the first server: %v, want [%s]", got, tc.want)
			}
		})
	}
}

// TestDrainCommitsEveryChunk: a commit of more records than one chunk
// (3,000 files flushed at the end of input) reaches the store whole: every
// file once, in chunks of at most correlate.RecordChunk records.
func TestDrainCommitsEveryChunk(t *testing.T) {
	const n = 3000
	var fseq uint8
	var pkts [][]byte
	for id := uint32(1); id <= n; id += 100 {
		var fb packet.FStreamBuilder
		fseq++
		fb.Reset(nil, packet.Header{Pseq: fseq, Stod: 1700000000}, 1700000000, 1700000001, 77, true)
		for j := id; j < id+100; j++ {
			fb.Open(packet.FileOpen{FileID: j, FileSize: 10, HasLFN: true, LFN: []byte("/store/f")})
		}
		pkts = append(pkts, fb.Finish(1700000002))
	}
	st := replayOne(t, "192.0.2.7:1094", pkts)
	seen := map[uint32]bool{}
	for _, r := range st.recs {
		if seen[r.FileID] || r.Reason != record.EndOfInput {
			t.Fatalf("record %d twice or not end_of_input: %+v", r.FileID, r)
		}
		seen[r.FileID] = true
	}
	if len(seen) != n {
		t.Fatalf("%d records, want %d", len(seen), n)
	}
	if appends := strings.Count(strings.Join(st.log, " "), "append"); appends < (n+correlate.RecordChunk-1)/correlate.RecordChunk {
		t.Errorf("%d appends for %d records: chunks were gathered", appends, n)
	}
}

// replayOne runs one batch of pkts from sender through a pipeline set up as
// replay sets it (no checkpoints, open files flushed at the end) and
// returns what it stored.
func replayOne(t *testing.T, sender string, pkts [][]byte) *fakeStore {
	t.Helper()
	return replayInto(t, &fakeStore{}, sender, pkts)
}

func replayInto(t *testing.T, st *fakeStore, sender string, pkts [][]byte) *fakeStore {
	t.Helper()
	o := testOptions()
	o.FlushOnExit = true
	o.StateKey = ""
	p, err := New(context.Background(), o, st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var freed int32
	in := make(chan *source.Batch, 1)
	in <- batchOf(sender, pkts, nil, &freed, &mu)
	close(in)
	if err := p.Run(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRetryAfterPartOfACommit: a commit of several chunks whose second
// append fails (a disk filling up) is retried from that chunk: the first
// chunk, already durable, is not appended again (the store drops again
// only what an earlier process wrote), and every record is stored once.
func TestRetryAfterPartOfACommit(t *testing.T) {
	const n = 3000
	var fseq uint8
	var pkts [][]byte
	for id := uint32(1); id <= n; id += 100 {
		var fb packet.FStreamBuilder
		fseq++
		fb.Reset(nil, packet.Header{Pseq: fseq, Stod: 1700000000}, 1700000000, 1700000001, 78, true)
		for j := id; j < id+100; j++ {
			fb.Open(packet.FileOpen{FileID: j, FileSize: 10, HasLFN: true, LFN: []byte("/store/f")})
		}
		pkts = append(pkts, fb.Finish(1700000002))
	}
	st := replayInto(t, &fakeStore{failAfter: 1}, "192.0.2.8:1094", pkts)
	seen := map[uint32]int{}
	for _, r := range st.recs {
		seen[r.FileID]++
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("file %d stored %d times", id, c)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d records, want %d", len(seen), n)
	}
}

// TestShedProgressWhileBusy: while the input is behind (ShedProgressWhile
// reports true at a commit), the shards take no progress snapshots and
// count them; the records are unchanged. Without it the same input makes
// its snapshot.
func TestShedProgressWhileBusy(t *testing.T) {
	for _, busy := range []bool{false, true} {
		st := &fakeStore{}
		o := testOptions()
		o.Progress = true
		p, err := New(context.Background(), o, st, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.ShedProgressWhile(func() bool { return busy })
		in := make(chan *source.Batch)
		done := make(chan error, 1)
		go func() { done <- p.Run(context.Background(), in) }()
		var mu sync.Mutex
		var freed int32
		var seq, fseq uint8
		const stod = 1700000000
		in <- batchOf("192.0.2.9:1094", transfer(stod, &seq, &fseq, 10, 11, false), nil, &freed, &mu)
		// A commit after the open: its barrier carries the shedding.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			st.mu.Lock()
			n := st.appends
			st.mu.Unlock()
			if n > 0 || time.Now().After(deadline) {
				break
			}
		}
		fseq++
		var fb packet.FStreamBuilder
		fb.Reset(nil, packet.Header{Pseq: fseq, Stod: stod}, stod+120, stod+121, 77, true)
		fb.Xfr(packet.FileXfr{FileID: 11, Read: 7}) // two minutes after the open
		in <- batchOf("192.0.2.9:1094", [][]byte{fb.Finish(stod + 122)}, nil, &freed, &mu)
		close(in)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		shed := p.Stats().ProgressShed
		switch {
		case busy && (len(st.progress) != 0 || shed != 1):
			t.Errorf("busy: %d snapshots, %d shed; want 0 and 1", len(st.progress), shed)
		case !busy && (len(st.progress) != 1 || shed != 0 || st.progress[0].ReadBytes != 7):
			t.Errorf("not busy: %d snapshots, %d shed; want one of 7 bytes and 0", len(st.progress), shed)
		}
	}
}
