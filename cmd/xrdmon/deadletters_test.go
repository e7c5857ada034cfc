package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// TestDeadLettersCommand: `xrdmon deadletters` lists what outputs set
// aside, beside a running writer, as JSON lines holding the reason and the
// entry; hostile text stays inside JSON strings.
func TestDeadLettersCommand(t *testing.T) {
	dir := t.TempDir()
	o := store.DefaultOptions()
	o.Path = filepath.Join(dir, "xrdmon.db")
	st, err := store.Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := record.Event{EventID: "ev1", Type: record.EventTCPMon, Provider: "T", Time: time.Unix(1700000000, 0),
		ServerIP: "192.0.2.1", Data: json.RawMessage(`{"a":"<script>"}`), Valid: true}
	rec := record.Record{RecordID: "r1", End: time.Unix(1700000000, 0), ServerIP: "192.0.2.1", Path: "/store/\"x\""}
	if err := st.Append(context.Background(), []record.Record{rec}, []record.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutDeadLetter(context.Background(), "postgres", store.Entry{Seq: 2, Event: &ev}, errors.New("value overflows numeric format")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutDeadLetter(context.Background(), "amqp", store.Entry{Seq: 1, Record: &rec}, errors.New("message too large")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runDeadLetters(context.Background(), []string{"--store.path", dir, "--sink", "postgres"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines for sink postgres, want 1:\n%s", len(lines), out.String())
	}
	var got struct {
		Sink, EntryID, Kind, Error string
		Seq                        int64
		Entry                      record.Event
	}
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("%v: %s", err, lines[0])
	}
	if got.Sink != "postgres" || got.Seq != 2 || got.Kind != "event" || got.Error != "value overflows numeric format" ||
		got.Entry.EventID != "ev1" || string(got.Entry.Data) != `{"a":"\u003cscript\u003e"}` && string(got.Entry.Data) != `{"a":"<script>"}` {
		t.Errorf("dead letter %+v", got)
	}
	out.Reset()
	if err := runDeadLetters(context.Background(), []string{"--store.path", dir}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("%d lines for every sink, want 2", n)
	}

	// --delete: refused beside a running collector (the store held), then
	// the ids given, then all of a sink.
	err = runDeadLetters(context.Background(), []string{"--store.path", dir, "--delete", "1"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "stop the collector first") {
		t.Fatalf("delete beside a running collector: %v", err)
	}
	for _, bad := range []string{"x", "1,,2", "-3", "0"} {
		if err := runDeadLetters(context.Background(), []string{"--store.path", dir, "--delete", bad}, io.Discard, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("--delete %q: %v, want a usage error", bad, err)
		}
	}
	if _, err := st.PutDeadLetter(context.Background(), "amqp", store.Entry{Seq: 2, Event: &ev}, errors.New("message too large")); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	ids := func() (out []string) {
		var b bytes.Buffer
		if err := runDeadLetters(context.Background(), []string{"--store.path", dir}, &b, io.Discard); err != nil {
			t.Fatal(err)
		}
		for l := range strings.Lines(b.String()) {
			var d struct {
				ID   int64
				Sink string
			}
			if err := json.Unmarshal([]byte(l), &d); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s:%d", d.Sink, d.ID))
		}
		return out
	}
	if got := ids(); !slices.Equal(got, []string{"postgres:1", "amqp:2", "amqp:3"}) {
		t.Fatalf("dead letters %v", got)
	}
	out.Reset()
	if err := runDeadLetters(context.Background(), []string{"--store.path", dir, "--delete", "1,99"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := ids(); !slices.Equal(got, []string{"amqp:2", "amqp:3"}) || !strings.Contains(out.String(), "deleted 1 ") {
		t.Fatalf("after --delete 1,99 (%q): %v", out.String(), got)
	}
	if err := runDeadLetters(context.Background(), []string{"--store.path", dir, "--sink", "postgres", "--delete", "all"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 2 {
		t.Fatalf("--delete all of another sink removed amqp's: %v", got)
	}
	if err := runDeadLetters(context.Background(), []string{"--store.path", dir, "--sink", "amqp", "--delete", "all"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 0 {
		t.Fatalf("after --delete all: %v", got)
	}
}
