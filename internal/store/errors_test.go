package store

import (
	"errors"
	"fmt"
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
