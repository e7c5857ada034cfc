package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"

	// The SQLite driver: github.com/mattn/go-sqlite3 v1.14.52 (cgo), chosen
	// over the pure-Go modernc.org/sqlite v1.61.1 by measurement: this
	// package's BenchmarkAppend (batches of 1000 records, synchronous=FULL)
	// run against both drivers with the same code and schema, on the shared
	// 2-core build VM (load ~8, so CPU time is the fairer measure):
	//
	//	schema as shipped      modernc 30,000 rec/CPU-s   mattn 37-40,000 rec/CPU-s
	//	without the two random-key
	//	indexes (experiment)   modernc 58,000 rec/CPU-s   mattn 78-90,000 rec/CPU-s
	//	                       (wall: 24-29k/s vs 63-72k/s)
	//
	// (schema version 1; see FORMAT.md for version 2's numbers, where
	// fewer, hot index pages leave a larger share to the driver.)
	// mattn was 1.3-1.5x faster per CPU second in every run: SQLite's B-tree
	// work runs as native C rather than C translated to Go, which outweighs
	// the cgo calls (a few per row). The cost: building xrdmon needs a C
	// compiler (CGO_ENABLED=1, gcc in the build image).
	sqlite3 "github.com/mattn/go-sqlite3"
)

// sqlCtx returns the context the statements of a hot path run with: ctx
// without its cancellation. With a cancellable context the driver starts a
// goroutine and a channel for every statement and every row read, to watch
// it (and a CPU profile loses who ran the statement). The rule: the
// writer's appends, checkpoints, the rollups' transactions and the log
// reads of sinks and rollups run on sqlCtx and check ctx between
// statements, blocks or rows; queries of the API, which may run long, keep
// their cancellable context.
func sqlCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// stmtCache is how many prepared statements each connection keeps (the
// driver's cache, by SQL text): without it every Exec and Query is
// parsed and planned again, a commit's dozen statements (BEGIN, the
// block, the postings by 128, the names, COMMIT) every time, 1.3 % of the
// collector's CPU at 150,000 packets/s and an allocation or two each. The
// store's statements are a few dozen texts (the multi-row inserts have one
// full-size text each, and a shorter one for their last rows).
const stmtCache = 64

// driverName is the database/sql driver used.
const driverName = "sqlite3"

// dsn returns the data source name for the store's connections: every
// connection waits up to BusyTimeout for locks, readers are query-only,
// and each keeps its last stmtCache prepared statements.
func dsn(o Options, readOnly bool) string {
	v := url.Values{}
	v.Set("_busy_timeout", fmt.Sprint(o.BusyTimeout.Milliseconds()))
	v.Set("_stmt_cache_size", fmt.Sprint(stmtCache))
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
