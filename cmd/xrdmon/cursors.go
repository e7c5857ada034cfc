package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/xrdmon/xrdmon/internal/store"
)

// runOutputs implements `xrdmon outputs`.
func runOutputs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, dir := storeFlagSet("outputs", stderr)
	forget := fs.String("forget", "", "remove the cursor of the output `NAME` (the collector stopped)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path := filepath.Join(*dir, store.DBFile)
	if *forget != "" {
		return forgetOutput(ctx, path, *forget, stdout)
	}
	r, err := store.OpenReader(path)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
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
