package store

import (
	"errors"

	"github.com/mattn/go-sqlite3"
)

// ErrPermanent marks an error of another Append implementation (a writer
// that cannot write) as permanent: Permanent reports true for any error
// wrapping it.
var ErrPermanent = errors.New("permanent failure")

// Permanent reports whether an error of Append or PutState will come back if
// the same call is retried: the data or the database is at fault, not the
// moment. A caller must not retry such a call forever.
//
// Permanent: an invalid entry (ErrInvalid), a closed store (ErrClosed), and
// SQLite's TOOBIG (a row over the size limit), CONSTRAINT, CORRUPT, NOTADB,
// MISUSE, READONLY, RANGE, SCHEMA, FORMAT and AUTH. Everything else is
// transient, in particular a full disk (ErrFull: retry once space is freed),
// BUSY, LOCKED, IOERR, NOMEM, PROTOCOL and errors that are not SQLite's.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrFull) {
		return false
	}
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrClosed) || errors.Is(err, ErrPermanent) {
		return true
	}
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code {
	case sqlite3.ErrTooBig, sqlite3.ErrConstraint, sqlite3.ErrCorrupt, sqlite3.ErrNotADB,
		sqlite3.ErrMisuse, sqlite3.ErrReadonly, sqlite3.ErrRange, sqlite3.ErrSchema,
		sqlite3.ErrFormat, sqlite3.ErrAuth:
		return true
	}
	return false
}
