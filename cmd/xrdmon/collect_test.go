package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"slices"

	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.yaml.in/yaml/v3"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/packet"
	"github.com/xrdmon/xrdmon/internal/pipeline"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
	"github.com/xrdmon/xrdmon/internal/testenv"
	"github.com/xrdmon/xrdmon/internal/units"
)

// session builds the datagrams of one XRootD server with n client sessions,
// each reading one file: ident, login, path, f-stream open/xfr/close/disc.
type session struct {
	stod   uint32
	sid    uint64
	mainSq uint8
	fSq    uint8
	dict   uint32
}

func (s *session) mapRec(code byte, dict uint32, info string) []byte {
	s.mainSq++
	return packet.AppendMap(nil, packet.Header{Code: code, Pseq: s.mainSq, Stod: s.stod}, dict, []byte(info))
}

// files returns the datagrams for n sessions and the bytes read per file
// (1000*(i+1)).
func (s *session) files(n int, t0 int32) [][]byte {
	sid := strconv.FormatUint(s.sid, 10)
	out := [][]byte{s.mapRec(packet.CodeIdent, 0, "=/xrootd.1:"+sid+"@srv.example.org\n&site=TEST&port=1094&inst=anon&pgm=xrootd&ver=v5.7.0")}
	var fb packet.FStreamBuilder
	for i := range n {
		s.dict += 2
		user, file := s.dict, s.dict+1
		uid := fmt.Sprintf("xroot/alice%d.%d:%s@client%d.example.org", i, i, sid, i)
		out = append(out,
			s.mapRec(packet.CodeUser, user, uid+"\n&p=gsi&n=/DC=org/CN=alice&h=client.example.org&o=cms&r=&g=/cms&m=&I=4"),
			s.mapRec(packet.CodePath, file, uid+"\n/store/data/file"+strconv.Itoa(i)+".root"))
		s.fSq++
		fb.Reset(nil, packet.Header{Pseq: s.fSq, Stod: s.stod}, t0, t0+1, s.sid, true)
		fb.Open(packet.FileOpen{FileID: file, FileSize: 1 << 20, HasLFN: true, User: user, LFN: []byte("/store/data/file" + strconv.Itoa(i) + ".root")})
		fb.Xfr(packet.FileXfr{FileID: file, Read: 500})
		fb.Close(packet.FileClose{FileID: file, Read: int64(1000 * (i + 1)), HasOps: true, Ops: packet.Ops{Read: 3, RdMin: 100, RdMax: 600}})
		fb.Disc(user)
		out = append(out, fb.Finish(t0+2))
	}
	return out
}

func freePort(t *testing.T, network string) int {
	t.Helper()
	switch network {
	case "udp":
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	default:
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
}

// daemon runs collect in the background on loopback ports and a temp store.
type daemon struct {
	cfg    *config.Config
	cancel context.CancelFunc
	done   chan error
	udp    string
	http   string
}

func startDaemon(t *testing.T, mutate func(*config.Config)) *daemon {
	t.Helper()
	cfg := config.Default()
	d := &daemon{
		udp:  fmt.Sprintf("127.0.0.1:%d", freePort(t, "udp")),
		http: fmt.Sprintf("127.0.0.1:%d", freePort(t, "tcp")),
	}
	cfg.Listen.UDP = d.udp
	cfg.Listen.RcvBuf = 8 << 20
	cfg.HTTP.Address = d.http
	cfg.Store.Path = t.TempDir()
	cfg.DNS.Enabled = false
	if mutate != nil {
		mutate(cfg)
	}
	d.udp = cfg.Listen.UDP
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d.cfg = cfg
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done = cancel, make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	go func() { d.done <- collect(ctx, cfg, log); close(d.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done: // the result, or closed after stop took it
		case <-time.After(30 * time.Second):
		}
	})
	d.waitHTTP(t)
	return d
}

func (d *daemon) waitHTTP(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + d.http + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("collector did not come up")
}

// getJSON decodes the JSON answer of GET path on the daemon's HTTP server.
func (d *daemon) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + d.http + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// metric reads one sample's value from /metrics ("name" or "name{labels}").
func (d *daemon) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + d.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func (d *daemon) waitMetric(t *testing.T, series string, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if d.metric(t, series) >= want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not reach %v (is %v)", series, want, d.metric(t, series))
}

// stop cancels the daemon (as SIGTERM does) and returns its error.
func (d *daemon) stop(t *testing.T) error {
	t.Helper()
	d.cancel()
	select {
	case err := <-d.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("collector did not stop within 30s")
		return nil
	}
}

func (d *daemon) records(t *testing.T) []record.Record {
	t.Helper()
	o := store.DefaultOptions()
	o.Path = d.cfg.Store.Options().Path
	st, err := store.Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs, err := st.Query(context.Background(), store.Query{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func sendUDP(t *testing.T, addr string, pkts [][]byte) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, p := range pkts {
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCollectUDPEndToEnd: packets over real UDP become complete records in
// the store, with the server's identity, the user's login and the bytes.
func TestCollectUDPEndToEnd(t *testing.T) {
	d := startDaemon(t, nil)
	s := &session{stod: 1700000000, sid: 258305997245184}
	pkts := s.files(20, 1700000100)
	sendUDP(t, d.udp, pkts)
	d.waitMetric(t, `xrdmon_records_total{kind="complete",reason="none"}`, 20)
	// Made is not yet stored: the API answers from the store, after the commit.
	d.waitMetric(t, `xrdmon_pipeline_records_committed_total`, 20)
	if got := d.metric(t, `xrdmon_packets_total{outcome="accounted"}`); got != float64(len(pkts)) {
		t.Errorf("accounted packets = %v, want %d", got, len(pkts))
	}
	if got := d.metric(t, `xrdmon_packets_lost_total{domain="main"}`) + d.metric(t, `xrdmon_packets_lost_total{domain="fstream"}`); got != 0 {
		t.Errorf("lost = %v, want 0", got)
	}
	// The query API answers from the store beside the running collector.
	var page struct {
		Records []record.Record `json:"records"`
	}
	d.getJSON(t, "/api/v1/records?user=alice3&limit=100", &page)
	if len(page.Records) != 1 || page.Records[0].Path != "/store/data/file3.root" {
		t.Errorf("/api/v1/records?user=alice3: %+v", page.Records)
	}
	var st status
	d.getJSON(t, "/api/v1/status", &st)
	if st.Packets.Accounted != uint64(len(pkts)) || st.Records.Complete != 20 || st.Store.LastSeq < 20 {
		t.Errorf("/api/v1/status: %+v", st)
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("collect returned %v", err)
	}
	recs := d.records(t)
	if len(recs) != 20 {
		t.Fatalf("store has %d records, want 20", len(recs))
	}
	byPath := map[string]record.Record{}
	for _, r := range recs {
		byPath[r.Path] = r
	}
	r, ok := byPath["/store/data/file3.root"]
	if !ok {
		t.Fatalf("no record for file3; have %v", byPath)
	}
	if r.Partial() || r.ReadBytes != 4000 || r.User != "alice3" || r.VO != "cms" || r.Site != "TEST" ||
		r.ServerIP != "127.0.0.1" || r.ServerID != 258305997245184 || r.FileSize != 1<<20 || !r.HasOps || r.ReadOps != 3 {
		t.Errorf("record = %+v", r)
	}
	if r.Start != time.Unix(1700000100, 0).UTC() || r.End != time.Unix(1700000102, 0).UTC() {
		t.Errorf("times %v..%v, want the server's isTime window", r.Start, r.End)
	}
}

// TestCollectGracefulShutdown: every packet the collector has received is in
// the store after SIGTERM, and open transfers survive in the checkpoint: a
// second run completes them.
func TestCollectGracefulShutdown(t *testing.T) {
	dir := t.TempDir()
	mut := func(c *config.Config) { c.Store.Path = dir }
	d := startDaemon(t, mut)
	s := &session{stod: 1700000000, sid: 42}
	pkts := s.files(300, 1700000100)
	sendUDP(t, d.udp, pkts)
	d.waitMetric(t, "xrdmon_udp_packets_received_total", float64(len(pkts)))
	if err := d.stop(t); err != nil {
		t.Fatalf("collect returned %v", err)
	}
	if recs := d.records(t); len(recs) != 300 {
		t.Fatalf("after shutdown the store has %d records, want 300", len(recs))
	}
}

// TestStopOrder: at the end of the input the rollups are stopped, and have
// returned, before the outputs are stopped, so that their last flush is in
// the store before the outputs (PostgreSQL exports the rollups) take their
// last look at it. The sleeps stand for the rollups' last flush and the
// outputs' drain: stopped at once, the outputs would return first.
func TestStopOrder(t *testing.T) {
	o := store.DefaultOptions()
	o.Path = filepath.Join(t.TempDir(), store.DBFile)
	st, err := store.Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	po := pipeline.DefaultOptions()
	po.StateKey = ""
	pipe, err := pipeline.New(context.Background(), po, st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	stopsLate := func(name string, d time.Duration) output {
		return output{name, func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(d)
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			return nil
		}}
	}
	derived := []output{stopsLate("rollup", 50*time.Millisecond)}
	outputs := []output{stopsLate("postgres", time.Millisecond), stopsLate("jsonl", time.Millisecond)}
	// No source: the input has ended before it began.
	if err := runGroup(context.Background(), pipe, nil, derived, outputs, nil, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if len(order) != 3 || order[0] != "rollup" {
		t.Errorf("stopped in the order %v, want the rollups, then the outputs", order)
	}
}

// TestCollectAMQPEndToEnd: shoveler messages consumed from RabbitMQ become
// records, and are acknowledged (the queue ends empty).
func TestCollectAMQPEndToEnd(t *testing.T) {
	url := testenv.AMQPURL(t)
	queue := fmt.Sprintf("xrdmon-test-collect-%d", time.Now().UnixNano())
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	s := &session{stod: 1700000000, sid: 77}
	pkts := s.files(50, 1700000100)
	for _, p := range pkts {
		msg, _ := json.Marshal(map[string]string{"remote": "[2001:db8::7]:9930", "version": "1.4.0", "data": base64.StdEncoding.EncodeToString(p)})
		if err := ch.Publish("", queue, false, false, amqp.Publishing{Body: msg, DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemon(t, func(c *config.Config) {
		c.Listen.UDP = ""
		c.AMQPInput.Enabled = true
		c.AMQPInput.URL = url
		c.AMQPInput.Queue = queue
		c.AMQPInput.Exchange = "-"
	})
	d.waitMetric(t, `xrdmon_records_total{kind="complete",reason="none"}`, 50)
	// Acks follow the next checkpoint: wait for the queue to drain.
	deadline := time.Now().Add(20 * time.Second)
	for {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue still holds %d messages", q.Messages)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("collect returned %v", err)
	}
	recs := d.records(t)
	if len(recs) != 50 {
		t.Fatalf("store has %d records, want 50", len(recs))
	}
	for _, r := range recs {
		if r.ServerIP != "2001:db8::7" || r.Partial() {
			t.Fatalf("record %+v", r)
		}
	}
}

// TestCollectAllowList: senders outside listen.allow are dropped and counted.
func TestCollectAllowList(t *testing.T) {
	d := startDaemon(t, func(c *config.Config) { c.Listen.Allow = []string{"10.0.0.0/8"} })
	s := &session{stod: 1700000000, sid: 5}
	sendUDP(t, d.udp, s.files(3, 1700000100))
	d.waitMetric(t, `xrdmon_packets_denied_total{source="udp"}`, 10)
	if got := d.metric(t, `xrdmon_packets_total{outcome="accounted"}`); got != 0 {
		t.Errorf("accounted %v packets from a denied sender", got)
	}
}

// TestCollectCommandLine: flags, --print-config, bad configuration.
func TestCollectCommandLine(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"collect", "--print-config", "--listen.udp=:9999", "--dns.ttl=2h"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), `udp: :9999`) || !strings.Contains(out.String(), "ttl: 2h") {
		t.Fatalf("print-config: code %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	code = run(context.Background(), []string{"collect", "--listen.rcvbuf=-5"}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "listen.rcvbuf") {
		t.Fatalf("bad value: code %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	code = run(context.Background(), []string{"collect", "--no-such-flag"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "no-such-flag") {
		t.Fatalf("unknown flag: code %d, stderr %q", code, errb.String())
	}
}

func TestCommands(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "xrdmon ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "collect") {
		t.Fatalf("help: %d %q", code, out.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: %d %q", code, errb.String())
	}
	if code := run(context.Background(), nil, &out, &errb); code != 2 {
		t.Fatalf("no command: %d", code)
	}
}

// fOpenXfr builds an f packet with an open and an isXfr of 777 bytes, using
// the f-stream sequence number of the packet it replaces.
func fOpenXfr(s *session, user, file uint32) []byte {
	var fb packet.FStreamBuilder
	fb.Reset(nil, packet.Header{Pseq: s.fSq, Stod: s.stod}, 1700000300, 1700000301, s.sid, true)
	fb.Open(packet.FileOpen{FileID: file, FileSize: 10, HasLFN: true, User: user, LFN: []byte("/store/open/forever")})
	fb.Xfr(packet.FileXfr{FileID: file, Read: 777})
	return fb.Finish(1700000302)
}

// TestCollectRestartKeepsOpenTransfers: files opened before a restart of the
// collector close after it, and come out as complete records with the
// login's details: the correlation state was checkpointed at shutdown and
// restored at start.
func TestCollectRestartKeepsOpenTransfers(t *testing.T) {
	dir := t.TempDir()
	udpPort := freePort(t, "udp")
	mut := func(c *config.Config) {
		c.Store.Path = dir
		c.Listen.UDP = fmt.Sprintf("127.0.0.1:%d", udpPort)
	}
	s := &session{stod: 1700000000, sid: 31}
	sid := strconv.FormatUint(s.sid, 10)
	var before, after [][]byte
	before = append(before, s.mapRec(packet.CodeIdent, 0, "=/xrootd.1:"+sid+"@srv.example.org\n&site=T2_TEST&port=1094&inst=anon&pgm=xrootd&ver=v5.7.0"))
	var fb packet.FStreamBuilder
	s.fSq++
	fb.Reset(nil, packet.Header{Pseq: s.fSq, Stod: s.stod}, 1700000100, 1700000101, s.sid, true)
	for i := range 5 {
		user, file := uint32(10+2*i), uint32(11+2*i)
		uid := fmt.Sprintf("xroot/bob%d.%d:%s@client.example.org", i, i, sid)
		before = append(before, s.mapRec(packet.CodeUser, user, uid+"\n&p=gsi&n=bob&h=client.example.org&o=atlas&r=&g=&m=&I=6"))
		fb.Open(packet.FileOpen{FileID: file, FileSize: 5000, HasLFN: true, User: user, LFN: []byte(fmt.Sprintf("/atlas/long/%d", i))})
		fb.Xfr(packet.FileXfr{FileID: file, Read: 100})
	}
	before = append(before, fb.Finish(1700000102))
	s.fSq++
	fb.Reset(nil, packet.Header{Pseq: s.fSq, Stod: s.stod}, 1700003600, 1700003601, s.sid, true)
	for i := range 5 {
		fb.Close(packet.FileClose{FileID: uint32(11 + 2*i), Read: 5000})
	}
	after = append(after, fb.Finish(1700003602))

	d := startDaemon(t, mut)
	sendUDP(t, d.udp, before)
	d.waitMetric(t, `xrdmon_state_entries{kind="open_files"}`, 5)
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := len(d.records(t)); n != 0 {
		t.Fatalf("%d records before the closes arrived", n)
	}

	d = startDaemon(t, mut)
	sendUDP(t, d.udp, after)
	d.waitMetric(t, `xrdmon_records_total{kind="complete",reason="none"}`, 5)
	if got := d.metric(t, `xrdmon_packets_lost_total{domain="fstream"}`); got != 0 {
		t.Errorf("restart caused %v false lost packets", got)
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	recs := d.records(t)
	if len(recs) != 5 {
		t.Fatalf("%d records, want 5", len(recs))
	}
	for _, r := range recs {
		if r.Partial() || r.ReadBytes != 5000 || r.VO != "atlas" || !r.IPv6 || r.Site != "T2_TEST" ||
			r.Start != time.Unix(1700000100, 0).UTC() || r.End != time.Unix(1700003602, 0).UTC() {
			t.Errorf("record %+v", r)
		}
	}
}

// ptrServer is a DNS server on loopback answering PTR queries from names.
func ptrServer(t *testing.T, names map[string]string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	zone := map[string]string{}
	for ip, name := range names {
		rev, err := dns.ReverseAddr(ip)
		if err != nil {
			t.Fatal(err)
		}
		zone[rev] = name
	}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) },
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(r)
			name, ok := "", false
			if len(r.Question) == 1 && r.Question[0].Qtype == dns.TypePTR {
				name, ok = zone[strings.ToLower(r.Question[0].Name)]
			}
			if !ok {
				m.SetRcode(r, dns.RcodeNameError)
			} else {
				m.Answer = append(m.Answer, &dns.PTR{Hdr: dns.RR_Header{Name: r.Question[0].Name,
					Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 3600}, Ptr: name})
			}
			_ = w.WriteMsg(m)
		})}
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// TestCollectReverseDNS: server and client addresses are named by reverse
// DNS (a real DNS server on loopback); an address without a name stays an
// address.
func TestCollectReverseDNS(t *testing.T) {
	resolver := ptrServer(t, map[string]string{
		"127.0.0.2":   "xrootd.example.org.",
		"192.0.2.55":  "worker55.example.org.",
		"2001:db8::9": "v6worker.example.org.",
	})
	d := startDaemon(t, func(c *config.Config) {
		c.DNS.Enabled = true
		c.DNS.Server = resolver
		c.DNS.MaxWait = units.Duration(2 * time.Second)
	})
	s := &session{stod: 1700000000, sid: 808}
	sid := strconv.FormatUint(s.sid, 10)
	var pkts [][]byte
	var fb packet.FStreamBuilder
	s.fSq++
	fb.Reset(nil, packet.Header{Pseq: s.fSq, Stod: s.stod}, 1700000100, 1700000101, s.sid, true)
	for i, host := range []string{"192.0.2.55", "[2001:db8::9]", "192.0.2.77"} {
		user, file := uint32(100+2*i), uint32(101+2*i)
		uid := fmt.Sprintf("xroot/carol.%d:%s@%s", i, sid, host)
		pkts = append(pkts, s.mapRec(packet.CodeUser, user, uid+"\n&p=gsi&n=carol&h=x&o=lhcb&r=&g=&m=&I=4"))
		fb.Open(packet.FileOpen{FileID: file, FileSize: 1, HasLFN: true, User: user, LFN: []byte("/lhcb/" + strconv.Itoa(i))})
		fb.Close(packet.FileClose{FileID: file, Read: 1})
	}
	pkts = append(pkts, fb.Finish(1700000102))
	// From 127.0.0.2: 127.0.0.1 is named by /etc/hosts before DNS.
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2")}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(d.udp)))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkts {
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	d.waitMetric(t, `xrdmon_records_total{kind="complete",reason="none"}`, 3)
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"/lhcb/0": "worker55.example.org", "/lhcb/1": "v6worker.example.org", "/lhcb/2": ""}
	for _, r := range d.records(t) {
		if r.ServerHost != "xrootd.example.org" {
			t.Errorf("%s: server host %q", r.Path, r.ServerHost)
		}
		if r.ClientName != want[r.Path] {
			t.Errorf("%s: client name %q, want %q (client host %q)", r.Path, r.ClientName, want[r.Path], r.ClientHost)
		}
	}
}

// TestCollectSecondOnSameStoreRefused: a second collector on the data
// directory of a running one refuses to start with a message naming the
// lock, and the first keeps collecting.
func TestCollectSecondOnSameStoreRefused(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, func(c *config.Config) { c.Store.Path = dir })
	cfg := config.Default()
	cfg.Listen.UDP = fmt.Sprintf("127.0.0.1:%d", freePort(t, "udp"))
	cfg.HTTP.Address = ""
	cfg.Store.Path = dir
	cfg.DNS.Enabled = false
	err := collect(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "xrdmon.db.lock") {
		t.Fatalf("second collector: %v, want a refusal naming the lock", err)
	}
	s := &session{stod: 1700000000, sid: 43}
	pkts := s.files(20, 1700000100)
	sendUDP(t, d.udp, pkts)
	d.waitMetric(t, "xrdmon_udp_packets_received_total", float64(len(pkts)))
	if err := d.stop(t); err != nil {
		t.Fatalf("first collector: %v", err)
	}
	if recs := d.records(t); len(recs) != 20 {
		t.Fatalf("%d records, want 20", len(recs))
	}
}

// TestMetricsDocumented: every metric a collector with every component on
// exports is named in docs/metrics.md (the outputs and the AMQP input
// point at a closed port: they only need to exist).
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^# HELP (xrdmon_\w+) `).FindAllSubmatch(exportedMetrics(t), -1)
	if len(names) < 50 {
		t.Fatalf("only %d xrdmon metrics exported", len(names))
	}
	for _, n := range names {
		if !bytes.Contains(doc, []byte("`"+string(n[1])+"`")) {
			t.Errorf("metric %s is not in docs/metrics.md", n[1])
		}
	}
}

// exportedMetrics returns what /metrics shows of a collector with every
// component on (UDP, RabbitMQ and STOMP inputs, every output, DNS); the brokers it
// names do not answer, which registers their metrics all the same.
func exportedMetrics(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	d := startDaemon(t, func(c *config.Config) {
		c.DNS.Enabled = true
		c.AMQPInput.Enabled, c.AMQPInput.URL = true, "amqp://guest:guest@127.0.0.1:1/"
		c.Outputs.AMQP.Enabled, c.Outputs.AMQP.URL = true, "amqp://guest:guest@127.0.0.1:1/"
		c.STOMPInput.Enabled, c.STOMPInput.URL = true, "stomp://127.0.0.1:1"
		c.Outputs.STOMP.Enabled, c.Outputs.STOMP.URL = true, "stomp://127.0.0.1:1"
		c.Outputs.STOMP.Destinations.WLCG = "/topic/xrootd.wlcg"
		c.Outputs.Postgres.Enabled, c.Outputs.Postgres.URL = true, "postgres://postgres@127.0.0.1:1/test"
		c.Outputs.JSONL.Enabled, c.Outputs.JSONL.Path = true, filepath.Join(dir, "out.jsonl")
	})
	// The outputs register their cursors (and so the backlog gauge) as
	// their loops start, beside the server: scrape until they have.
	var body []byte
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + d.http + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(body, []byte("xrdmon_sink_backlog_records")) || time.Now().After(deadline) {
			return body
		}
	}
}

// TestPrintConfigIsDefault: `collect --print-config` with nothing set
// prints the defaults (every section its component's DefaultConfig), and
// xrdmon.example.yaml loads to the same (internal/config TestExample).
func TestPrintConfigIsDefault(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"collect", "--print-config"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got, err := config.Parse(out.Bytes())
	if err != nil {
		t.Fatalf("parse --print-config output: %v\n%s", err, out.String())
	}
	// Every key is printed (Parse alone would fill missing ones from the
	// defaults).
	var tree map[string]any
	if err := yaml.Unmarshal(out.Bytes(), &tree); err != nil {
		t.Fatal(err)
	}
	var leaves func(prefix string, m map[string]any) []string
	leaves = func(prefix string, m map[string]any) []string {
		var ks []string
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
				ks = append(ks, leaves(prefix+k+".", sub)...)
			} else {
				ks = append(ks, prefix+k)
			}
		}
		return ks
	}
	printed := leaves("", tree)
	slices.Sort(printed)
	keys := config.Keys()
	slices.Sort(keys)
	if !slices.Equal(printed, keys) {
		t.Errorf("--print-config prints keys\n%v\nwant\n%v", printed, keys)
	}
	want := config.Default()
	got.Listen.Allow, want.Listen.Allow = nil, nil
	got.Listen.NAT, want.Listen.NAT = nil, nil
	got.FileInput.Paths, want.FileInput.Paths = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("--print-config differs from the defaults:\n%s", out.String())
	}
}
