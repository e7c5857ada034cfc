package store

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"

	// The SQLite driver: github.com/mattn/go-sqlite3 (cgo), chosen over the
	// pure-Go modernc.org/sqlite by measurement. BenchmarkAppend with batches
	// of 1000 records, synchronous=FULL, same schema, on the shared 2-core
	// build machine (go1.26, AMD EPYC VM):
	//
	//	modernc.org/sqlite v1.61.1      58,000 records per CPU-second, 24-29k/s wall
	//	github.com/mattn/go-sqlite3 v1.14.52  78-90,000 records per CPU-second, 63-72k/s wall
	//
	// The B-tree work runs as native C instead of C translated to Go, which
	// outweighs the cgo call overhead (a few calls per row). The cost is
	// that building xrdmon needs a C compiler (CGO_ENABLED=1).
	sqlite3 "github.com/mattn/go-sqlite3"
)

// driverName is the database/sql driver used.
const driverName = "sqlite3"

// dsn returns the data source name for the store's connections: every
// connection waits up to BusyTimeout for locks, readers are query-only.
func dsn(o Options, readOnly bool) string {
	v := url.Values{}
	v.Set("_busy_timeout", fmt.Sprint(o.BusyTimeout.Milliseconds()))
	if readOnly {
		v.Set("_query_only", "1")
	}
	return "file:" + (&url.URL{Path: o.Path}).EscapedPath() + "?" + v.Encode()
}

// isDiskFull reports whether err says the disk (or SQLite's page limit) is
// full: SQLITE_FULL, or ENOSPC from the file system.
func isDiskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) {
		return true
	}
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrFull {
		return true
	}
	return strings.Contains(err.Error(), "database or disk is full")
}
