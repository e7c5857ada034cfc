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

// TestCollectSTOMPEndToEnd is the WLCG path: shoveler envelopes sent over
// STOMP to a broker (RabbitMQ's STOMP plugin here), consumed by the
// collector's STOMP input, correlated into the 50 transfers of the
// session, and the WLCG records sent by its STOMP output to another
// destination, as MONIT would receive them.
func TestCollectSTOMPEndToEnd(t *testing.T) {
	u, user, pf := testenv.RabbitSTOMP(t)
	amqpURL := testenv.AMQPURL(t)
	conn := stompconn.Config{URL: u, User: user, PasswordFile: pf, VHost: "/"}
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
	d, err := stompconn.NewDialer(conn, stompconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := d.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Disconnect()
	// The MONIT side: a subscriber to the output queue.
	sub, err := pub.Subscribe("/queue/"+out, stomp.AckAuto)
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
		if err := pub.Send("/queue/"+in, "text/plain", msg, stomp.SendOpt.Receipt, stomp.SendOpt.Header("persistent", "true")); err != nil {
			t.Fatal(err)
		}
	}
	dm := startDaemon(t, func(c *config.Config) {
		c.Listen.UDP = ""
		c.STOMPInput.Enabled, c.STOMPInput.Config = true, conn
		c.STOMPInput.Destination = "/queue/" + in
		c.Outputs.STOMP.Enabled, c.Outputs.STOMP.Config = true, conn
		c.Outputs.STOMP.Destinations.WLCG = "/queue/" + out
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
	// Acknowledgements follow the next checkpoint: the input queue drains.
	c, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for {
		q, err := ch.QueueDeclarePassive(in, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("input queue still holds %d messages", q.Messages)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := dm.stop(t); err != nil {
		t.Fatalf("collect returned %v", err)
	}
	recs := dm.records(t)
	if len(recs) != 50 {
		t.Fatalf("store has %d records, want 50", len(recs))
	}
	files := map[string]bool{}
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
