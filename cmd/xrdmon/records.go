package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/api"
	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/report"
	"github.com/xrdmon/xrdmon/internal/store"
)

// queryFlags are the flags xrdmon records and xrdmon report share: where
// the records are (a store, or a collector's API) and which ones.
type queryFlags struct {
	cfgPath, storePath string
	url, tokenFile     string
	since, until       string
	server, site, user string
	path, reason       string
	partial            bool
	format             string
}

func (q *queryFlags) register(fs *flag.FlagSet, since string) {
	fs.StringVar(&q.cfgPath, "config", "", "read store.path from this collector configuration `FILE`")
	fs.StringVar(&q.storePath, "store.path", "", "`DIR`ectory of the store (as collect's store.path; default "+config.Default().Store.Path+")")
	fs.StringVar(&q.url, "url", "", "ask a running collector's API at this `URL` (e.g. http://127.0.0.1:9939) instead of reading a store")
	fs.StringVar(&q.tokenFile, "token-file", "", "with --url: the API's bearer token is in this `FILE`")
	fs.StringVar(&q.since, "since", since, "records that ended after this `time`: a duration back from now (90m, 24h, 7d), RFC 3339 or Unix seconds")
	fs.StringVar(&q.until, "until", "", "records that ended before this `time` (same forms; default now)")
	fs.StringVar(&q.server, "server", "", "only this server (`host` name, or address)")
	fs.StringVar(&q.site, "site", "", "only this `site`")
	fs.StringVar(&q.user, "user", "", "only this client `user` name")
	fs.StringVar(&q.path, "path", "", "only paths under this `prefix`")
	fs.StringVar(&q.reason, "reason", "", "only partial records of this `reason` (timeout, disconnect, ...)")
	fs.BoolVar(&q.partial, "partial", false, "only partial records")
	fs.StringVar(&q.format, "format", "table", "output `format`: table (humanised), csv or json (exact)")
}

// open returns the record source and the query the flags describe.
func (q *queryFlags) open() (report.Source, store.Query, report.Format, func(), error) {
	f, err := report.ParseFormat(q.format)
	if err != nil {
		return nil, store.Query{}, "", nil, err
	}
	now := time.Now()
	sq := store.Query{Server: q.server, Site: q.site, User: q.user, PathPrefix: q.path, Reason: record.Reason(q.reason), Partial: q.partial}
	if sq.From, err = api.ParseTime(q.since, now); err != nil {
		return nil, sq, f, nil, fmt.Errorf("--since: %w", err)
	}
	if sq.To, err = api.ParseTime(q.until, now); err != nil {
		return nil, sq, f, nil, fmt.Errorf("--until: %w", err)
	}
	if !sq.To.IsZero() && !sq.To.After(sq.From) {
		return nil, sq, f, nil, fmt.Errorf("--until %s is not after --since %s: the window is empty (a duration counts back from now: --since 2h --until 1h)",
			sq.To.UTC().Format(time.RFC3339), sq.From.UTC().Format(time.RFC3339))
	}
	if sq.Reason != record.Complete && !slices.Contains(record.Reasons, sq.Reason) {
		names := make([]string, len(record.Reasons))
		for i, r := range record.Reasons {
			names[i] = string(r)
		}
		return nil, sq, f, nil, fmt.Errorf("--reason %q is not a partial reason (%s)", q.reason, strings.Join(names, ", "))
	}
	if q.url != "" {
		src := report.APISource{URL: q.url}
		if q.tokenFile != "" {
			if src.Token, err = api.ReadToken(q.tokenFile); err != nil {
				return nil, sq, f, nil, err
			}
		}
		return src, sq, f, func() {}, nil
	}
	dir := q.storePath
	if dir == "" {
		cfg, err := config.Load(q.cfgPath, os.Environ(), nil)
		if err != nil {
			return nil, sq, f, nil, err
		}
		dir = cfg.Store.Path
	}
	db := filepath.Join(dir, store.DBFile)
	if _, err := os.Stat(db); err != nil && q.storePath == "" && q.cfgPath == "" {
		return nil, sq, f, nil, fmt.Errorf("no store at %s (%w): run this in the collector's directory, or name the store with --store.path DIR (or --config FILE), or ask a running collector with --url http://HOST:9939", db, err)
	}
	r, err := openReader(db)
	if err != nil {
		return nil, sq, f, nil, err
	}
	return report.StoreSource{R: r}, sq, f, func() { r.Close() }, nil
}

var errEnough = errors.New("enough records")

// runRecords implements `xrdmon records`.
func runRecords(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("records", helpText("records"), stderr)
	var q queryFlags
	q.register(fs, "1h")
	limit := fs.Int("limit", 1000, "at most this many `records` (0: all)")
	oldest := fs.Bool("oldest", false, "the oldest records first (default: the newest first)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, stderr); err != nil {
		return err
	}
	if *limit < 0 {
		fmt.Fprintln(stderr, "xrdmon records: --limit must be 0 (all) or more")
		return errUsage
	}
	src, sq, f, done, err := q.open()
	if err != nil {
		return err
	}
	defer done()
	sq.Newest = !*oldest
	w := report.NewRecordWriter(stdout, f)
	// Every record of the window is counted (up to countCap), the first
	// --limit written: the note says how many were left out.
	shown, total := 0, 0
	err = src.Records(ctx, sq, func(r *record.Record) error {
		if *limit == 0 || shown < *limit {
			if err := w.Write(r); err != nil {
				return err
			}
			shown++
		}
		if total++; total >= countCap {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	order := "newest first"
	if *oldest {
		order = "oldest first"
	}
	switch {
	case errors.Is(err, errEnough):
		fmt.Fprintf(stderr, "xrdmon records: %s of more than %s records in the window shown, %s (--limit, --oldest, --since)\n", count(shown), count(total), order)
	case shown < total:
		fmt.Fprintf(stderr, "xrdmon records: %s of %s records in the window shown, %s (--limit 0 for all, --oldest)\n", count(shown), count(total), order)
	default:
		fmt.Fprintf(stderr, "xrdmon records: %s records, %s\n", count(total), order)
	}
	return nil
}

// countCap bounds the records `xrdmon records` counts past its --limit.
const countCap = 10_000_000

// count writes n with thousands separators.
func count(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// noArgs refuses arguments after the flags (a misplaced value, a flag
// without its dashes): they are not silently ignored.
func noArgs(fs *flag.FlagSet, stderr io.Writer) error {
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (every option is a flag: %s -h)\n", fs.Name(), fs.Arg(0), fs.Name())
		return errUsage
	}
	return nil
}

// runReport implements `xrdmon report`.
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", helpText("report"), stderr)
	var q queryFlags
	q.register(fs, "24h")
	by := fs.String("by", "", "group by these `dimensions` (comma-separated)")
	top := fs.String("top", "", "the top groups of this `dimension` by bytes moved")
	n := fs.Int("n", 10, "with --top: how many `groups`")
	from := fs.String("source", "auto", "sum the `rollups` (fast; whole minutes), the `records` (exact window, any filter), or auto: rollups when they answer")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, stderr); err != nil {
		return err
	}
	if *n < 1 {
		fmt.Fprintf(stderr, "xrdmon report: --n %d: want at least 1 group\n", *n)
		return errUsage
	}
	spec, limit := *by, 0
	switch {
	case *by != "" && *top != "":
		fmt.Fprintln(stderr, "xrdmon report: --by and --top exclude each other")
		return errUsage
	case *top != "":
		spec, limit = *top, *n
	case spec == "":
		spec = "site"
	}
	dims, err := record.ParseDims(spec)
	if err != nil {
		fmt.Fprintf(stderr, "xrdmon report: %v\n", err)
		return errUsage
	}
	filtered := q.server != "" || q.site != "" || q.user != "" || q.path != "" || q.reason != "" || q.partial
	switch *from {
	case "auto", "records":
	case "rollups":
		if filtered {
			fmt.Fprintln(stderr, "xrdmon report: --source rollups takes no record filter (--server, --site, --user, --path, --reason, --partial); group with --by instead")
			return errUsage
		}
	default:
		fmt.Fprintf(stderr, "xrdmon report: --source %q: want auto, rollups or records\n", *from)
		return errUsage
	}
	src, sq, f, done, err := q.open()
	if err != nil {
		return err
	}
	defer done()
	to := sq.To
	if to.IsZero() {
		to = time.Now()
	}
	var s *report.Summary
	if rs, ok := src.(report.RollupSource); ok && *from != "records" && !filtered {
		s, err = rs.Rollups(ctx, dims, sq.From, to, limit)
		if errors.Is(err, report.ErrNoRollups) && *from == "auto" {
			s, err = nil, nil // sum the records
		}
		if err != nil {
			return err
		}
	}
	if s == nil {
		if s, err = report.Summarize(ctx, src, sq, dims, limit); err != nil {
			return err
		}
	}
	return report.WriteSummary(stdout, s, f)
}
