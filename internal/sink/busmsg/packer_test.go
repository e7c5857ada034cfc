package busmsg

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// sent is one message a Packer handed to its send function.
type sent struct {
	kind      int
	key, typ  string
	firstID   string
	n         int
	documents int // JSON documents in the body
}

func packAll(t *testing.T, rt Routing[int], f Format, batch []store.Entry) []sent {
	t.Helper()
	var out []sent
	p, err := NewPacker(rt, f, nil, func(_ context.Context, k int, m *Message, n int) error {
		docs := 1
		if f.RecordsPerMessage > 1 {
			var arr []json.RawMessage
			if err := json.Unmarshal(m.Body, &arr); err != nil {
				t.Fatalf("message body is not a JSON array: %v: %s", err, m.Body)
			}
			docs = len(arr)
		} else if !json.Valid(m.Body) {
			t.Fatalf("message body is not JSON: %s", m.Body)
		}
		out = append(out, sent{k, m.Key, m.Type, m.FirstID, n, docs})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Pack(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPackerRoutes: a record matching the WLCG rules goes to the WLCG
// kind and (unless WLCGOnly) the records kind, others to the records kind
// only; events go to the kind Routing.Event names, and nothing goes to a
// kind without a name; messages hold at most RecordsPerMessage documents
// and a new one starts when the key changes.
func TestPackerRoutes(t *testing.T) {
	const wlcgK, recordsK, eventsK = 0, 1, 2
	rec := func(id, path string) store.Entry {
		return store.Entry{Record: &record.Record{RecordID: id, Path: path}}
	}
	ev := func(id string, typ record.EventType) store.Entry {
		return store.Entry{Event: &record.Event{EventID: id, Type: typ}}
	}
	batch := []store.Entry{
		rec("r1", "/store/a"), rec("r2", "/other/b"), rec("r3", "/store/c"),
		ev("e1", record.EventTPC), ev("e2", record.EventTPC), ev("e3", record.EventCacheFileClose),
	}
	rt := Routing[int]{
		Names: []string{wlcgK: "wlcg", recordsK: "records", eventsK: "events"},
		WLCG:  wlcgK, Records: recordsK, RecordKey: "file-close",
		Event: func(ev *record.Event) (int, string) { return eventsK, string(ev.Type) },
	}
	for _, tc := range []struct {
		name string
		rt   func(Routing[int]) Routing[int]
		f    Format
		want []sent
	}{
		{"one per message", nil, DefaultFormat(), []sent{
			{wlcgK, "file-close", "wlcg", "r1", 1, 1},
			{recordsK, "file-close", "gracc", "r1", 1, 1},
			{recordsK, "file-close", "gracc", "r2", 1, 1},
			{wlcgK, "file-close", "wlcg", "r3", 1, 1},
			{recordsK, "file-close", "gracc", "r3", 1, 1},
			{eventsK, "tpc", "tpc", "e1", 1, 1},
			{eventsK, "tpc", "tpc", "e2", 1, 1},
			{eventsK, "cache_file_close", "cache_file_close", "e3", 1, 1},
		}},
		{"packed, WLCG only", nil, Format{RecordsPerMessage: 2, GRACCFlavour: record.GRACCGo, WLCGOnly: true}, []sent{
			{eventsK, "tpc", "tpc", "e1", 2, 2},
			{wlcgK, "file-close", "wlcg", "r1", 2, 2},
			{recordsK, "file-close", "gracc", "r2", 1, 1},
			{eventsK, "cache_file_close", "cache_file_close", "e3", 1, 1},
		}},
		{"no records destination, no events", func(rt Routing[int]) Routing[int] {
			rt.Names = []string{wlcgK: "wlcg", recordsK: "", eventsK: ""}
			return rt
		}, Format{RecordsPerMessage: 5, GRACCFlavour: record.GRACCPython}, []sent{
			{wlcgK, "file-close", "wlcg", "r1", 2, 2},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rt
			if tc.rt != nil {
				r = tc.rt(rt)
			}
			// Messages of one kind go in order; across kinds the order
			// is not a contract.
			byKind := func(a, b sent) int { return a.kind - b.kind }
			got := packAll(t, r, tc.f, batch)
			slices.SortStableFunc(got, byKind)
			slices.SortStableFunc(tc.want, byKind)
			if !slices.Equal(got, tc.want) {
				t.Errorf("sent\n%v\nwant\n%v", fmt.Sprint(got), fmt.Sprint(tc.want))
			}
		})
	}
}

// TestPackerRefusesFlavour: an unknown GRACC flavour is an error at once.
func TestPackerRefusesFlavour(t *testing.T) {
	_, err := NewPacker(Routing[int]{Names: []string{"x"}}, Format{GRACCFlavour: "perl"}, nil,
		func(context.Context, int, *Message, int) error { return nil })
	if err == nil {
		t.Fatal("no error for gracc flavour perl")
	}
}
