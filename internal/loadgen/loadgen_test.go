package loadgen

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/source"
	"github.com/xrdmon/xrdmon/internal/source/file"
)

// generate runs cfg into memory.
func generate(t testing.TB, cfg Config) (*Truth, *Memory) {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var m Memory
	truth, err := g.Run(context.Background(), &m)
	if err != nil {
		t.Fatal(err)
	}
	return truth, &m
}

func smallConfig() Config {
	cfg := DefaultConfig()
	cfg.Servers, cfg.Clients = 3, 8
	cfg.Duration = 3 * time.Minute
	cfg.CacheFrac, cfg.TPCFrac = 0.5, 0.2
	cfg.Restarts = 1
	return cfg
}

func TestDeterministic(t *testing.T) {
	cfg := smallConfig()
	cfg.Loss, cfg.Reorder, cfg.Duplicate = 0.05, 0.05, 0.05
	t1, m1 := generate(t, cfg)
	t2, m2 := generate(t, cfg)
	if len(m1.Packets) != len(m2.Packets) || len(m1.Packets) == 0 {
		t.Fatalf("runs gave %d and %d packets", len(m1.Packets), len(m2.Packets))
	}
	for i := range m1.Packets {
		a, b := m1.Packets[i], m2.Packets[i]
		if !bytes.Equal(a.Data, b.Data) || a.Sender != b.Sender || !a.Received.Equal(b.Received) {
			t.Fatalf("packet %d differs between runs", i)
		}
	}
	var j1, j2 bytes.Buffer
	if err := t1.WriteJSON(&j1); err != nil {
		t.Fatal(err)
	}
	if err := t2.WriteJSON(&j2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(j1.Bytes(), j2.Bytes()) {
		t.Error("truths differ between runs")
	}

	cfg.Seed++
	_, m3 := generate(t, cfg)
	same := len(m3.Packets) == len(m1.Packets)
	for i := 0; same && i < len(m1.Packets); i++ {
		same = bytes.Equal(m1.Packets[i].Data, m3.Packets[i].Data)
	}
	if same {
		t.Error("another seed gave the same packets")
	}
}

// TestPacketsValid decodes every packet and checks the sequence numbers of
// each counter domain of each server process are contiguous.
func TestPacketsValid(t *testing.T) {
	cfg := smallConfig()
	cfg.Restarts = 2
	cfg.FBSZ = 1400
	truth, m := generate(t, cfg)
	kinds := map[packet.Kind]int{}
	type dom struct {
		sender netip.AddrPort
		stod   uint32
		d      string
	}
	next := map[dom]uint8{}
	for i, p := range m.Packets {
		k, err := packet.Validate(p.Data)
		if err != nil {
			t.Fatalf("packet %d (%q...): %v", i, p.Data[:min(len(p.Data), 16)], err)
		}
		kinds[k]++
		h, err := packet.ParseHeader(p.Data)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Data) > cfg.FBSZ && h.Code == packet.CodeFStream {
			t.Errorf("f-stream packet of %d bytes, fbsz %d", len(p.Data), cfg.FBSZ)
		}
		d := dom{p.Sender, h.Stod, "main"}
		switch h.Code {
		case packet.CodeFStream:
			d.d = "f"
		case packet.CodeGStream:
			d.d = "g" + string(p.Data[16])
		}
		want, seen := next[d]
		if !seen && d.d[0] == 'g' {
			want = 1
		}
		if h.Pseq != want {
			t.Errorf("packet %d: %s pseq %d, want %d", i, d.d, h.Pseq, want)
		}
		next[d] = h.Pseq + 1
	}
	for _, k := range []packet.Kind{packet.KindMap, packet.KindFStream, packet.KindGStream} {
		if kinds[k] == 0 {
			t.Errorf("no %s packets", k)
		}
	}
	var perServer int64
	for _, s := range truth.Servers {
		for _, n := range s.Packets {
			perServer += n
		}
		if len(s.Stods) < 1 {
			t.Errorf("server %d: no stod", s.Index)
		}
	}
	if perServer != truth.Generated || truth.Generated != int64(len(m.Packets)) {
		t.Errorf("per-server packets %d, generated %d, captured %d", perServer, truth.Generated, len(m.Packets))
	}
}

// decodedTotals sums the close records of a capture per user name, as a
// correlator would, by decoding it independently of the generator.
func decodedTotals(t *testing.T, pkts []source.Packet) (map[string]Bytes, int64) {
	t.Helper()
	type key struct {
		sender netip.Addr
		stod   uint32
		dict   uint32
	}
	users := map[key]string{}
	out := map[string]Bytes{}
	var closes int64
	for _, p := range pkts {
		switch packet.Classify(p.Data) {
		case packet.KindMap:
			m, err := packet.DecodeMap(p.Data)
			if err != nil {
				t.Fatal(err)
			}
			if m.Code == packet.CodeUser {
				uid, _ := m.Split()
				users[key{p.Sender.Addr(), m.Stod, m.DictID}] = string(packet.ParseUserID(uid, true).User)
			}
		case packet.KindFStream:
			f, err := packet.DecodeFStream(p.Data)
			if err != nil {
				t.Fatal(err)
			}
			fileUser := map[uint32]uint32{}
			it := f.Records()
			for it.Next() {
				r := it.Rec()
				switch r.Type {
				case packet.RecOpen:
					o := r.Open()
					users[key{p.Sender.Addr(), f.Stod, o.FileID | 1<<31}] = users[key{p.Sender.Addr(), f.Stod, o.User}]
					fileUser[o.FileID] = o.User
				case packet.RecClose:
					c := r.Close()
					u := users[key{p.Sender.Addr(), f.Stod, c.FileID | 1<<31}]
					b := out[u]
					b.Records++
					b.ReadBytes += c.Read
					b.ReadvBytes += c.Readv
					b.WriteBytes += c.Write
					out[u] = b
					closes++
				}
			}
		}
	}
	return out, closes
}

func TestTruthMatchesPackets(t *testing.T) {
	cfg := smallConfig()
	truth, m := generate(t, cfg)
	got, closes := decodedTotals(t, m.Packets)
	if closes != truth.Reasons["complete"] {
		t.Errorf("%d closes in the capture, truth expects %d complete records", closes, truth.Reasons["complete"])
	}
	// The truth's per-user totals include partial records (restarts);
	// compare complete records only.
	want := map[string]Bytes{}
	for _, r := range truth.Records {
		if r.Reason != record.Complete {
			continue
		}
		b := want[r.User]
		b.add(&r)
		want[r.User] = b
	}
	if len(got) != len(want) || len(got) == 0 {
		t.Errorf("%d users in the capture, %d in the truth", len(got), len(want))
	}
	for u, w := range want {
		if got[u] != w {
			t.Errorf("user %s: capture %+v, truth %+v", u, got[u], w)
		}
	}
	// Server and user tallies agree with the records.
	var recs, bytesSum int64
	for _, r := range truth.Records {
		recs++
		bytesSum += r.ReadBytes + r.ReadvBytes + r.WriteBytes
	}
	tot := truth.Totals()
	if tot.Records != recs || tot.ReadBytes+tot.ReadvBytes+tot.WriteBytes != bytesSum {
		t.Errorf("server totals %+v, records %d / %d bytes", tot, recs, bytesSum)
	}
	var ur int64
	for _, u := range truth.Users {
		ur += u.Records
	}
	if ur != recs {
		t.Errorf("user totals count %d records, want %d", ur, recs)
	}
	if truth.Reasons["server_restart"] == 0 {
		t.Error("a run with a restart expects no server_restart records")
	}
}

func TestImpairments(t *testing.T) {
	base := smallConfig()
	clean, cm := generate(t, base)
	cfg := base
	cfg.Loss, cfg.Duplicate, cfg.Reorder = 0.1, 0.05, 0.05
	imp, im := generate(t, cfg)
	if imp.Generated != clean.Generated || len(imp.Records) != len(clean.Records) {
		t.Errorf("impairments changed the generated stream: %d/%d packets, %d/%d records",
			imp.Generated, clean.Generated, len(imp.Records), len(clean.Records))
	}
	if imp.Lossless || !clean.Lossless {
		t.Error("Lossless flag wrong")
	}
	if imp.Dropped == 0 || imp.Duplicated == 0 || imp.Reordered == 0 {
		t.Errorf("no impairment applied: %+v", imp)
	}
	if got := int64(len(im.Packets)); got != imp.Generated-imp.Dropped+imp.Duplicated || got != imp.Emitted {
		t.Errorf("%d packets out, want %d-%d+%d", got, imp.Generated, imp.Dropped, imp.Duplicated)
	}
	var dropped int64
	for _, s := range imp.Servers {
		for _, n := range s.Dropped {
			dropped += n
		}
	}
	if dropped != imp.Dropped {
		t.Errorf("per-server dropped %d, total %d", dropped, imp.Dropped)
	}
	// Every impaired packet is one of the clean run's.
	set := map[string]bool{}
	for _, p := range cm.Packets {
		set[string(p.Data)] = true
	}
	for _, p := range im.Packets {
		if !set[string(p.Data)] {
			t.Fatal("impaired run sent a packet the clean run did not generate")
		}
	}
}

func TestCount(t *testing.T) {
	cfg := smallConfig()
	cfg.Duration, cfg.Count, cfg.Restarts = 0, 777, 0
	truth, m := generate(t, cfg)
	if len(m.Packets) != 777 || truth.Generated != 777 {
		t.Errorf("%d packets, generated %d, want 777", len(m.Packets), truth.Generated)
	}
	if truth.Reasons["end_of_input"] == 0 {
		t.Error("an abrupt end expects end_of_input records")
	}
}

func TestFStreamFill(t *testing.T) {
	cfg := smallConfig()
	cfg.Clients, cfg.FBSZ, cfg.FStat = 64, 1000, time.Minute
	cfg.TransferMax = 10 * time.Second
	_, m := generate(t, cfg)
	full := 0
	for _, p := range m.Packets {
		if p.Data[0] == packet.CodeFStream {
			if n := int(binary.BigEndian.Uint16(p.Data[2:4])); n > cfg.FBSZ {
				t.Fatalf("f-stream packet of %d bytes > fbsz", n)
			} else if n > cfg.FBSZ-packet.CloseSSQSize {
				full++
			}
		}
	}
	if full == 0 {
		t.Error("no f-stream packet was flushed because it was full")
	}
}

func TestCaptureFiles(t *testing.T) {
	cfg := smallConfig()
	_, m := generate(t, cfg)
	dir := t.TempDir()
	for _, format := range []string{"jsonl", "pcap"} {
		g, _ := New(cfg)
		path := filepath.Join(dir, "c."+format)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		var out Output
		if format == "jsonl" {
			out = NewJSONL(f)
		} else if out, err = NewPcap(f, DefaultCollector); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Run(context.Background(), out); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		got := readCapture(t, path)
		if len(got) != len(m.Packets) {
			t.Fatalf("%s: read %d packets, wrote %d", format, len(got), len(m.Packets))
		}
		for i := range got {
			if !bytes.Equal(got[i].Data, m.Packets[i].Data) || got[i].Sender != m.Packets[i].Sender {
				t.Fatalf("%s: packet %d differs", format, i)
			}
			if format == "pcap" && !got[i].Received.Equal(m.Packets[i].Received) {
				t.Fatalf("pcap: packet %d at %s, want %s", i, got[i].Received, m.Packets[i].Received)
			}
		}
	}
}

func TestShovelerEnvelope(t *testing.T) {
	data := []byte("some datagram \x00\xff")
	sender := netip.MustParseAddrPort("127.0.0.5:20003")
	s, err := source.ParseShoveler(AppendShoveler(nil, sender, data))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Data, data) || s.Sender != sender || string(s.Version) != ShovelerVersion {
		t.Errorf("round trip gave %+v", s)
	}
}

func TestValidate(t *testing.T) {
	bad := DefaultConfig()
	bad.Servers, bad.Loss, bad.FBSZ = 0, 2, 10
	err := bad.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"servers", "loss", "fbsz"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if def := DefaultConfig(); def.Validate() != nil {
		err := def.Validate()
		t.Errorf("default config: %v", err)
	}
}

func TestScenario(t *testing.T) {
	base := DefaultConfig()
	cases := []struct {
		spec  string
		param string
		vals  []float64
	}{
		{"clients", "clients", []float64{50, 100, 150, 200, 250, 300, 350, 400}},
		{"many-servers", "servers", []float64{10, 100, 1000, 10000}},
		{"rate=1000, 2000", "rate", []float64{1000, 2000}},
		{"transfer=60..240 x2", "transfer", []float64{60, 120, 240}},
		{"xfr=3,30", "xfr", []float64{3, 30}},
	}
	for _, c := range cases {
		sc, err := ParseScenario(c.spec, base)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if sc.Param != c.param || fmt.Sprint(sc.Values) != fmt.Sprint(c.vals) {
			t.Errorf("%s: %s=%v, want %s=%v", c.spec, sc.Param, sc.Values, c.param, c.vals)
		}
		steps, err := sc.Steps()
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if len(steps) != len(c.vals) {
			t.Errorf("%s: %d steps", c.spec, len(steps))
		}
	}
	sc, _ := ParseScenario("long-transfers", base)
	steps, _ := sc.Steps()
	if steps[0].Config.TransferMin != 10*time.Minute || steps[0].Config.LongFrac != 0 {
		t.Errorf("long-transfers step 0: %+v", steps[0].Config)
	}
	sc, _ = ParseScenario("xfr=30", base)
	if steps, _ = sc.Steps(); steps[0].Config.XfrEvery != 30 || steps[0].Config.FStat != base.FStat {
		t.Errorf("xfr=30 step 0: an isXfr every %d fstat of %s", steps[0].Config.XfrEvery, steps[0].Config.FStat)
	}
	for _, bad := range []string{"nope", "clients=", "bogus=1..2", "clients=5..1 step 1", "clients=1..5 step 0", "clients=0"} {
		sc, err := ParseScenario(bad, base)
		if err == nil {
			_, err = sc.Steps()
		}
		if err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestHotPathAllocs checks that generating packets does not allocate per
// packet in steady state (records off).
func TestHotPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocations")
	}
	cfg := DefaultConfig()
	cfg.Servers, cfg.Clients = 20, 50
	cfg.Duration = 30 * time.Minute
	cfg.KeepRecords = false
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var d Discard
	allocs := testing.AllocsPerRun(1, func() {
		d = Discard{}
		if _, err := g.Run(context.Background(), &d); err != nil {
			t.Fatal(err)
		}
	})
	perPacket := allocs / float64(d.Packets)
	t.Logf("%.0f allocations for %d packets (%.4f per packet)", allocs, d.Packets, perPacket)
	if perPacket > 0.05 {
		t.Errorf("%.3f allocations per packet", perPacket)
	}
}

// readCapture reads a capture file with the replay source.
func readCapture(t *testing.T, path string) []source.Packet {
	t.Helper()
	src, err := file.New(file.Options{Paths: []string{path}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *source.Batch, 4)
	done := make(chan error, 1)
	go func() { done <- src.Run(context.Background(), ch); close(ch) }()
	var out []source.Packet
	for b := range ch {
		for _, p := range b.Packets {
			out = append(out, source.Packet{Data: bytes.Clone(p.Data), Sender: p.Sender, Received: p.Received})
		}
		if b.Free != nil {
			b.Free()
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return out
}
