//go:build crash

package crash

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// hostileRSSBound is the peak resident memory the collector may reach
// under every attack of TestHostileInput, with correlate.max_state_bytes at
// hostileStateBudget (docs/limits.md): the state budget, the store's and
// the Go runtime's own, and the batches in flight.
const (
	hostileStateBudget = "64MiB"
	hostileRSSBound    = 256 << 20
	poisonEvents       = 200 // g-stream events with numbers no float64 holds
)

// attacker sends datagrams from its own loopback address, as a hostile
// host on the network would (each attack from another address, so that
// per-address protections are what is tested).
type attacker struct {
	t    *testing.T
	conn *net.UDPConn
	stod uint32
	seq  uint8
	fseq uint8
}

func newAttacker(t *testing.T, from, to string) *attacker {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp", to)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(from)}, raddr)
	if err != nil {
		t.Fatalf("bind %s: %v", from, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &attacker{t: t, conn: conn, stod: uint32(time.Now().Unix()) - 1000}
}

// send writes d, pacing so that the attacks do not simply overflow the
// socket buffer (that is loss the collector counts, not what is tested).
func (a *attacker) send(d []byte) {
	if _, err := a.conn.Write(d); err != nil && !strings.Contains(err.Error(), "message too long") {
		a.t.Fatalf("send: %v", err)
	}
	time.Sleep(20 * time.Microsecond)
}

func (a *attacker) uid(user string, pid int, sid uint64) []byte {
	return packet.AppendUserID(nil, packet.UserID{Prot: []byte("xroot"), User: []byte(user),
		PID: []byte(strconv.Itoa(pid)), SID: []byte(strconv.FormatUint(sid, 10)), Host: []byte("evil.example.org")})
}

func (a *attacker) mapRec(code byte, dict uint32, uid, payload []byte) []byte {
	a.seq++
	info := append(append(append([]byte(nil), uid...), '\n'), payload...)
	return packet.AppendMap(nil, packet.Header{Code: code, Pseq: a.seq, Stod: a.stod}, dict, info)
}

func (a *attacker) fstream(sid uint64, fill func(*packet.FStreamBuilder)) []byte {
	a.fseq++
	var fb packet.FStreamBuilder
	now := int32(time.Now().Unix())
	fb.Reset(nil, packet.Header{Pseq: a.fseq, Stod: a.stod}, now-1, now, sid, true)
	fill(&fb)
	return fb.Finish(now)
}

// TestHostileInput runs every attack of issue "Nothing lost, nothing
// stalls" against the real binary while a well-behaved loadgen stream
// runs, with the PostgreSQL output on: afterwards every record and event
// of the well-behaved servers is in the store and in PostgreSQL, the
// collector kept committing, its peak RSS stayed under hostileRSSBound,
// a second collector on its store was refused, profiles were not served,
// and SIGTERM ended it within 10 s.
func TestHostileInput(t *testing.T) {
	base := testenv.PostgresURL(t)
	pu, _ := url.Parse(base)
	hostPort := pu.Host
	if pu.Port() == "" {
		hostPort = net.JoinHostPort(pu.Hostname(), "5432")
	}
	dbURL := newDatabase(t, base, hostPort)
	dir := t.TempDir()
	udpAddr := freeUDPAddr(t)
	c := startCollector(t, dir, filepath.Join(t.TempDir(), "collector.log"),
		"--listen.udp="+udpAddr, "--listen.rcvbuf=64MiB",
		"--correlate.max_state_bytes="+hostileStateBudget,
		"--outputs.postgres.enabled=true", "--outputs.postgres.url="+dbURL)

	// The well-behaved servers: loadgen over UDP (records and g-stream
	// events), for the whole time of the attacks.
	cfg := udpLoadConfig(41)
	cfg.CacheFrac, cfg.TPCFrac = 0.5, 0.2
	load := udpLoad(t, udpAddr, cfg)

	big := strings.Repeat("/a-long-directory-name", 60_000/22)
	rng := rand.New(rand.NewPCG(41, 42))
	attacks := []struct {
		name string
		from string
		run  func(a *attacker)
	}{
		{"d records of 60 KB", "127.0.0.61", func(a *attacker) {
			uid := a.uid("mallory", 1, 66)
			for i := range uint32(10_000) {
				a.send(a.mapRec(packet.CodePath, i+1, uid, []byte(big+strconv.Itoa(int(i)))))
			}
		}},
		{"opens with 60 KB paths", "127.0.0.62", func(a *attacker) {
			for i := range uint32(5_000) {
				a.send(a.fstream(66, func(fb *packet.FStreamBuilder) {
					fb.Open(packet.FileOpen{FileID: i + 1, HasLFN: true, LFN: []byte(big[:60_000-200] + strconv.Itoa(int(i)))})
				}))
			}
		}},
		{"logins of 30 KB", "127.0.0.63", func(a *attacker) {
			for i := range uint32(10_000) {
				l := packet.Login{HasAuth: true, AuthProt: []byte("gsi"), Name: []byte(big[:30_000] + strconv.Itoa(int(i)))}
				a.send(a.mapRec(packet.CodeUser, i+1, a.uid("m"+strconv.Itoa(int(i)), int(i), 66), packet.AppendLogin(nil, l)))
			}
		}},
		{"forged server identities", "127.0.0.64", func(a *attacker) {
			for range 10_000 {
				a.stod = rng.Uint32()
				sid := rng.Uint64() & (1<<48 - 1)
				uid := packet.AppendUserID(nil, packet.UserID{Prot: []byte("="), User: []byte("xrootd"), PID: []byte("1"),
					SID: []byte(strconv.FormatUint(sid, 10)), Host: []byte("evil.example.org")})
				a.send(a.mapRec(packet.CodeIdent, 0, uid, packet.AppendServerIdent(nil, packet.ServerIdent{Site: []byte("EVIL"), Port: 1094})))
			}
		}},
		{"sessions that disconnect", "127.0.0.65", func(a *attacker) {
			for i := range uint32(5_000) {
				a.send(a.mapRec(packet.CodeUser, i+1, a.uid("d", int(i), 66), nil))
				a.send(a.fstream(66, func(fb *packet.FStreamBuilder) { fb.Disc(i + 1) }))
			}
		}},
		{"garbage", "127.0.0.66", func(a *attacker) {
			buf := make([]byte, 65_000)
			for i := range 5_000 {
				n := 1 + rng.IntN(1500)
				if i%500 == 0 {
					n = len(buf) // a datagram as large as UDP carries
				}
				for j := range buf[:n] {
					buf[j] = byte(rng.Uint32())
				}
				switch i % 5 {
				case 1: // a header that lies about the length
					buf[0], buf[2], buf[3] = 'f', 0xff, 0xff
				case 2: // an unknown code
					buf[0] = 'Z'
				case 3: // a map record with non-UTF-8 text
					copy(buf, a.mapRec(packet.CodeUser, 7, []byte("xroot/\xff\xfe.1:66@h"), []byte("&p=\xc3\x28")))
				}
				a.send(buf[:n])
			}
		}},
		{"poison g-stream numbers", "127.0.0.67", func(a *attacker) {
			for i := range poisonEvents {
				a.seq++
				line := fmt.Appendf(nil, `{"a":1e200000,"b":-1e400,"i":%d}`, i)
				now := int32(time.Now().Unix())
				a.send(packet.AppendGStream(nil, packet.Header{Code: packet.CodeGStream, Pseq: a.seq, Stod: a.stod}, now-1, now, 'T', 66, [][]byte{line}))
			}
		}},
	}
	attackers := map[string]bool{}
	for _, at := range attacks {
		attackers[at.from] = true
	}
	for _, at := range attacks {
		start := time.Now()
		at.run(newAttacker(t, at.from, udpAddr))
		if !c.running() {
			t.Fatalf("collector died during %q: %v\n%s", at.name, c.err, tail(c.log, 20))
		}
		// Still committing: /readyz answers ready.
		if code := readyz(c); code != http.StatusOK {
			t.Errorf("after %q /readyz = %d", at.name, code)
		}
		t.Logf("attack %q: %s, collector RSS %d MB", at.name, time.Since(start).Round(time.Millisecond), rss(t, c)>>20)
	}

	// A second collector on the same store is refused, and says why.
	second := exec2(t, "collect", "--store.path="+dir, "--listen.udp=127.0.0.1:0", "--http.address=", "--dns.enabled=false")
	if second.err == nil || !strings.Contains(second.out, "in use by another process") {
		t.Errorf("second collector on the store: %v\n%s", second.err, second.out)
	}
	// Profiles are not served by default, and HTTP is on loopback.
	if resp, err := http.Get("http://" + c.http + "/debug/pprof/cmdline"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("/debug/pprof/cmdline answered %d", resp.StatusCode)
		}
	}

	var truth *loadgen.Truth = load()
	waitStored(t, c, 2*time.Minute)
	m, _ := c.metrics()
	peak := hwm(t, c)
	stopStart := time.Now()
	if err := c.stop(10 * time.Second); err != nil {
		t.Errorf("SIGTERM: %v\n%s", err, tail(c.log, 20))
	}
	stopTook := time.Since(stopStart)
	if peak > hostileRSSBound {
		t.Errorf("peak RSS %d MB, bound %d MB", peak>>20, hostileRSSBound>>20)
	}

	// Nothing of the well-behaved servers lost, in the store and in
	// PostgreSQL.
	recs, evs := storeContents(t, dir)
	good := map[string]record.Record{}
	for id, r := range recs {
		if !attackers[r.ServerIP] { // the attackers' partial records of their opens
			good[id] = r
		}
	}
	// Attack datagrams may overflow the socket (counted lost, by the
	// attackers' sequence numbers); the well-behaved servers' must not be.
	t.Logf("packets counted lost: %v; kernel drops: %v", sumPrefix(m, "xrdmon_packets_lost_total"), sumPrefix(m, "xrdmon_udp_kernel_drops_total"))
	checkTruth(t, good, truth)
	var wantEvents int64 = poisonEvents
	for _, n := range truth.Events {
		wantEvents += n
	}
	if int64(len(evs)) != wantEvents {
		t.Errorf("%d g-stream events stored, want the truth's %d and the %d poison ones", len(evs), wantEvents-poisonEvents, poisonEvents)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var inPG, eventsInPG int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM xrdmon.records WHERE record_id = ANY($1)`, keys(good)).Scan(&inPG); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM xrdmon.events`).Scan(&eventsInPG); err != nil {
		t.Fatal(err)
	}
	if int64(eventsInPG) != wantEvents {
		t.Errorf("PostgreSQL holds %d events, want %d (the poison ones normalised, not refused)", eventsInPG, wantEvents)
	}
	if inPG != len(good) {
		t.Errorf("PostgreSQL holds %d of the %d records of the well-behaved servers", inPG, len(good))
	}
	dead := sumPrefix(m, "xrdmon_sink_dead_letters_total")
	t.Logf("RESULT hostile: %d records and %d events of the well-behaved servers stored (truth %d records), %d in PostgreSQL; "+
		"peak RSS %d MB (bound %d MB); truncated fields %v; state bytes %v; dead letters %v; rejected %v; shutdown %s",
		len(good), len(evs), len(truth.Records), inPG, peak>>20, hostileRSSBound>>20,
		sumPrefix(m, "xrdmon_fields_truncated_total"), sumPrefix(m, "xrdmon_state_bytes"), dead,
		sumPrefix(m, "xrdmon_packets_rejected_total"), stopTook.Round(time.Millisecond))
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// status returns a field of /proc/PID/status in bytes (VmRSS, VmHWM).
func status(t testing.TB, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func rss(t testing.TB, c *collector) int64 { return status(t, c.cmd.Process.Pid, "VmRSS") }
func hwm(t testing.TB, c *collector) int64 { return status(t, c.cmd.Process.Pid, "VmHWM") }

type result struct {
	out string
	err error
}

// exec2 runs xrdmon with args for at most 20 s and returns its output.
func exec2(t testing.TB, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, xrdmonBin, args...).CombinedOutput()
	return result{string(out), err}
}
