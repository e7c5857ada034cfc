package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xrdmon/xrdmon/internal/store"
)

// runDeadLetters implements `xrdmon deadletters`.
func runDeadLetters(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, dir := storeFlagSet("deadletters", stderr)
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
		return deleteDeadLetters(ctx, filepath.Join(*dir, store.DBFile), *sink, ids, stdout)
	}
	r, err := store.OpenReader(filepath.Join(*dir, store.DBFile))
	if err != nil {
		return fmt.Errorf("open store: %w", err)
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
