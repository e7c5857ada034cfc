package busmsg

import (
	"strconv"
	"testing"
)

func TestMessage(t *testing.T) {
	doc := func(i int) func([]byte) []byte {
		return func(b []byte) []byte { return strconv.AppendInt(b, int64(i), 10) }
	}
	var m Message
	if m.Close(3) != 0 {
		t.Fatal("an empty message closed with documents")
	}
	m.Add(3, "k", "t", "id1", doc(1))
	m.Add(3, "k", "t", "id2", doc(2))
	if m.Full(3, "k") || !m.Full(3, "other") {
		t.Fatal("Full wrong with 2 of 3 documents")
	}
	m.Add(3, "k", "t", "id3", doc(3))
	if !m.Full(3, "k") {
		t.Fatal("not Full with 3 of 3 documents")
	}
	if n := m.Close(3); n != 3 || string(m.Body) != "[1,2,3]" || m.FirstID != "id1" || m.Type != "t" || m.Key != "k" {
		t.Fatalf("closed %d: %q %+v", n, m.Body, m)
	}
	m.Add(1, "k2", "t2", "id4", doc(4))
	if n := m.Close(1); n != 1 || string(m.Body) != "4" || m.FirstID != "id4" {
		t.Fatalf("single document: %d %q", n, m.Body)
	}
}
