package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/stompconn"
	"github.com/xrdmon/xrdmon/internal/testenv"
)

// TestCollectSTOMPEndToEnd is the WLCG path, on RabbitMQ's STOMP plugin
// and on an ActiveMQ the test starts: shoveler envelopes sent over STOMP,
// consumed by the collector's STOMP input, correlated into the 50
// transfers of the session, and their WLCG records sent by its STOMP
// output to another destination, as MONIT would receive them; the input
// is left empty (every message acknowledged).
func TestCollectSTOMPEndToEnd(t *testing.T) {
	t.Run("rabbitmq", func(t *testing.T) {
		u, user, pf := testenv.RabbitSTOMP(t)
		amqpURL := testenv.AMQPURL(t)
		in, out := testenv.Uniq("xrdmon-test-stomp-in"), testenv.Uniq("xrdmon-test-stomp-wlcg")
		t.Cleanup(func() {
			if c, err := amqp.Dial(amqpURL); err == nil {
				if ch, err := c.Channel(); err == nil {
					_, _ = ch.QueueDelete(in, false, false, false)
					_, _ = ch.QueueDelete(out, false, false, false)
				}
				c.Close()
			}
		})
		collectSTOMP(t, stompconn.Config{URL: u, User: user, PasswordFile: pf, VHost: "/"}, "/queue/"+in, "/queue/"+out)
	})
	t.Run("activemq", func(t *testing.T) {
		a := testenv.StartActiveMQ(t, false)
		collectSTOMP(t, stompconn.Config{URL: a.URL}, "/queue/"+testenv.Uniq("xrdmon-test-stomp-in"), "/queue/"+testenv.Uniq("xrdmon-test-stomp-wlcg"))
	})
}

// collectSTOMP runs the WLCG path on one broker: the session's envelopes
// to in, the collector between in and out, MONIT's subscriber on out.
func collectSTOMP(t *testing.T, conn stompconn.Config, in, out string) {
	d, err := stompconn.NewDialer(conn, stompconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := d.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Disconnect()
	// The MONIT side: a subscriber to the output destination.
	sub, err := pub.Subscribe(out, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]string{} // xrdmon-id -> body
	go func() {
		for m := range sub.C {
			if m.Err != nil {
				return
			}
			mu.Lock()
			got[m.Header.Get("xrdmon-id")] = string(m.Body)
			mu.Unlock()
		}
	}()

	s := &session{stod: 1700000000, sid: 77}
	for _, p := range s.files(50, 1700000100) {
		msg, _ := json.Marshal(map[string]string{"remote": "[2001:db8::7]:9930", "version": "1.4.0", "data": base64.StdEncoding.EncodeToString(p)})
		if err := pub.Send(in, "text/plain", msg, stomp.SendOpt.Receipt, stomp.SendOpt.Header("persistent", "true")); err != nil {
			t.Fatal(err)
		}
	}
	dm := startDaemon(t, func(c *config.Config) {
		c.Listen.UDP = ""
		c.STOMPInput.Enabled, c.STOMPInput.Config = true, conn
		c.STOMPInput.Destination = in
		c.Outputs.STOMP.Enabled, c.Outputs.STOMP.Config = true, conn
		c.Outputs.STOMP.Destinations.WLCG = out
	})
	dm.waitMetric(t, `xrdmon_records_total{kind="complete",reason="none"}`, 50)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 50 WLCG records reached the output destination", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Acknowledgements follow the next checkpoint (2 s).
	time.Sleep(3 * time.Second)
	if err := dm.stop(t); err != nil {
		t.Fatalf("collect returned %v", err)
	}
	// Everything was acknowledged: the input destination is empty.
	rest, err := pub.Subscribe(in, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-rest.C:
		t.Errorf("a message is left on the input after the collector acknowledged everything: %.80s (%v)", m.Body, m.Err)
	case <-time.After(time.Second):
	}
	recs := dm.records(t)
	if len(recs) != 50 {
		t.Fatalf("store has %d records, want 50", len(recs))
	}
	files := map[string]bool{}
	mu.Lock()
	defer mu.Unlock()
	for i := range recs {
		r := &recs[i]
		if r.ServerIP != "2001:db8::7" || r.Partial() {
			t.Fatalf("record %+v", r)
		}
		files[r.Path] = true
		if body, want := got[r.RecordID], string(record.AppendWLCG(nil, r)); body != want {
			t.Errorf("WLCG message of %s:\n got %s\nwant %s", r.RecordID, body, want)
		}
	}
	for i := range 50 {
		if p := fmt.Sprintf("/store/data/file%d.root", i); !files[p] {
			t.Errorf("no record of %s", p)
		}
	}
}
