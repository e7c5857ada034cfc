// The commands that read or edit a collector's store from outside it: its
// outputs' cursors (xrdmon outputs) and dead letters (xrdmon deadletters).

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/store"
)

// storeFlagSet returns the flag set of the command name, which reads or
// edits the store, with --store.path: the directory of the store, as
// collect's store.path. db returns the store's database file once the
// flags are parsed.
func storeFlagSet(name string, stderr io.Writer) (fs *flag.FlagSet, db func() string) {
	fs = newFlagSet(name, helpText(name), stderr)
	dir := fs.String("store.path", config.Default().Store.Path, "`DIR`ectory of the store (as collect's store.path)")
	return fs, func() string { return filepath.Join(*dir, store.DBFile) }
}

// openReader opens the store's database file db for reading, beside a
// collector that may be running on it.
func openReader(db string) (*store.Reader, error) {
	r, err := store.OpenReader(db)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return r, nil
}

// openStopped opens the store at path to edit what only an operator
// changes (cursors, dead letters): with no collector running on it (its
// lock), and without a retention pass.
func openStopped(path string) (*store.Store, error) {
	o := store.DefaultOptions()
	o.Path = path
	o.Retention = 0
	st, err := store.Open(o, nil, nil)
	if errors.Is(err, store.ErrLocked) {
		return nil, fmt.Errorf("stop the collector first: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return st, nil
}

// runOutputs implements `xrdmon outputs`.
func runOutputs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, db := storeFlagSet("outputs", stderr)
	forget := fs.String("forget", "", "remove the cursor of the output `NAME` (the collector stopped)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *forget != "" {
		return forgetOutput(ctx, db(), *forget, stdout)
	}
	r, err := openReader(db())
	if err != nil {
		return err
	}
	defer r.Close()
	cs, err := r.Cursors(ctx)
	if err != nil {
		return err
	}
	last, err := r.HighWater(ctx)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CURSOR\tPASSED\tBEHIND\tMOVED")
	for _, c := range cs {
		fmt.Fprintf(w, "%q\t%d\t%d\t%s\n", c.Sink, c.Seq, max(last-c.Seq, 0), c.Updated.Format(time.RFC3339))
	}
	return w.Flush()
}

// forgetOutput removes the cursor of output name from the store at path.
func forgetOutput(ctx context.Context, path, name string, stdout io.Writer) error {
	if name == store.RollupCursor {
		return fmt.Errorf("%q is the rollups' cursor, not an output's: turn the rollups off (rollup.enabled) instead", name)
	}
	st, err := openStopped(path)
	if err != nil {
		return err
	}
	defer st.Close()
	if _, ok := st.Sinks()[name]; !ok {
		return fmt.Errorf("no cursor %q in the store (xrdmon outputs lists them)", name)
	}
	if err := st.DeleteCursor(ctx, name); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "forgot the cursor %q: retention no longer waits for it\n", name)
	return nil
}

// runDeadLetters implements `xrdmon deadletters`.
func runDeadLetters(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, db := storeFlagSet("deadletters", stderr)
	sink := fs.String("sink", "", "only the dead letters of this output (`NAME`, e.g. postgres)")
	del := fs.String("delete", "", "remove the dead letters of these `IDS` (comma-separated), or all (of --sink); the collector stopped")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *del != "" {
		ids, err := deadLetterIDs(*del)
		if err != nil {
			fmt.Fprintf(stderr, "xrdmon deadletters: --delete: %v\n", err)
			return errUsage
		}
		return deleteDeadLetters(ctx, db(), *sink, ids, stdout)
	}
	r, err := openReader(db())
	if err != nil {
		return err
	}
	defer r.Close()
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	var after int64
	for {
		dl, err := r.DeadLetters(ctx, *sink, after, 1000)
		if err != nil {
			return err
		}
		if len(dl) == 0 {
			return nil
		}
		for _, d := range dl {
			line, err := json.Marshal(struct {
				store.DeadLetter
				Entry json.RawMessage `json:"entry"`
			}{d, d.Data})
			if err != nil {
				return fmt.Errorf("encode dead letter %d: %w", d.ID, err)
			}
			w.Write(line)
			w.WriteByte('\n')
			after = d.ID
		}
	}
}

// deadLetterIDs parses --delete: "all" (nil) or comma-separated ids.
func deadLetterIDs(v string) ([]int64, error) {
	if v == "all" {
		return nil, nil
	}
	ids := []int64{}
	for f := range strings.SplitSeq(v, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("%q: want all or ids as listed (comma-separated)", f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// deleteDeadLetters removes the dead letters ids (nil: all) of sink from
// the store at path, which no collector may hold.
func deleteDeadLetters(ctx context.Context, path, sink string, ids []int64, stdout io.Writer) error {
	st, err := openStopped(path)
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := st.DeleteDeadLetters(ctx, sink, ids)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %d dead letters\n", n)
	return nil
}
