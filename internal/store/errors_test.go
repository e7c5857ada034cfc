package store

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/mattn/go-sqlite3"
)

func TestPermanent(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("network blip"), false},
		{fmt.Errorf("append: %w", ErrInvalid), true},
		{fmt.Errorf("append: %w", ErrClosed), true},
		{fmt.Errorf("append: %w", fullErr{sqlite3.Error{Code: sqlite3.ErrFull}}), false},
		{fmt.Errorf("put state: %w", sqlite3.Error{Code: sqlite3.ErrTooBig}), true},
		{fmt.Errorf("append: %w", sqlite3.Error{Code: sqlite3.ErrConstraint, ExtendedCode: sqlite3.ErrConstraintUnique}), true},
		{sqlite3.Error{Code: sqlite3.ErrCorrupt}, true},
		{sqlite3.Error{Code: sqlite3.ErrBusy}, false},
		{sqlite3.Error{Code: sqlite3.ErrLocked}, false},
		{sqlite3.Error{Code: sqlite3.ErrIoErr}, false},
	} {
		if got := Permanent(c.err); got != c.want {
			t.Errorf("Permanent(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestSecondWriterRefused: a second Open of the same store (another
// collector on the same data directory) is refused with ErrLocked naming
// the holder, while a Reader still opens; after Close the store opens
// again.
func TestSecondWriterRefused(t *testing.T) {
	s, _ := openTest(t, nil)
	_, err := Open(s.opts, nil, nil)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	if want := fmt.Sprintf("pid %d", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("message %q does not name the holder (%s)", err, want)
	}
	r, err := OpenReader(s.opts.Path)
	if err != nil {
		t.Fatalf("reader beside the writer: %v", err)
	}
	r.Close()
	o := s.opts
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(o, nil, nil)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	s2.Close()
}
