package record

import (
	"bytes"
	"testing"
	"unsafe"
)

// TestTypeEventIn: typing into an arena's free capacity gives the bytes
// ParseEvent gives for every line of the differential corpus (valid,
// repaired and invalid, every provider), takes from the arena exactly
// what it reports, and caps Data where it ends so that nothing appended
// to it reaches the next event's bytes.
func TestTypeEventIn(t *testing.T) {
	chunk := make([]byte, 0, 1<<16)
	inArena := 0
	for i, in := range diffCorpus(3000) {
		if cap(chunk)-len(chunk) < len(in.line)+64 {
			chunk = make([]byte, 0, 1<<16)
		}
		typ, want, valid := ParseEvent(in.provider, []byte(in.line))
		e := Event{Provider: string(in.provider), Raw: []byte(in.line)}
		room := chunk[len(chunk):]
		used, ok := TypeEventIn(&e, room)
		if e.Type != typ || ok != valid || e.Valid != valid || !bytes.Equal(e.Data, want) || e.Raw != nil {
			t.Fatalf("line %d %c %q: type %v valid %v data %s; ParseEvent: %v %v %s", i, in.provider, in.line, e.Type, ok, e.Data, typ, valid, want)
		}
		if cap(e.Data) != len(e.Data) {
			t.Fatalf("line %d: data of length %d has capacity %d", i, len(e.Data), cap(e.Data))
		}
		inRoom := len(e.Data) > 0 && unsafe.SliceData(e.Data) == unsafe.SliceData(room)
		if inRoom != (used > 0) || (used > 0 && used != len(e.Data)) {
			t.Fatalf("line %d: used %d of the arena, data of %d bytes in it: %v", i, used, len(e.Data), inRoom)
		}
		chunk = chunk[:len(chunk)+used]
		if used > 0 {
			inArena++
		}
	}
	if inArena < 2500 {
		t.Errorf("%d of 3000 lines typed into the arena", inArena)
	}
	// No room: Data is an allocation of its own.
	e := Event{Provider: "C", Raw: []byte(`{"event":"file_close","lfn":"/x","size":1}`)}
	if used, ok := TypeEventIn(&e, make([]byte, 0, 8)); used != 0 || !ok || len(e.Data) == 0 {
		t.Errorf("a full arena: used %d, valid %v, data %s", used, ok, e.Data)
	}
}
