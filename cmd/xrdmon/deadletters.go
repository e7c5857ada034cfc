package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/store"
)

const deadLettersSynopsis = "[--store.path DIR] [--sink NAME]\n\n" +
	"Lists the entries an output's destination refused for good (a row PostgreSQL\n" +
	"rejects, a message over the broker's size limit), which the output set aside\n" +
	"instead of retrying: one JSON line each, with the sink, the entry's log\n" +
	"position, the destination's reason and the entry in the native schema\n" +
	"(docs/records.md). Safe while a collector runs on the store."

// runDeadLetters implements `xrdmon deadletters`.
func runDeadLetters(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("deadletters", deadLettersSynopsis, stderr)
	dir := fs.String("store.path", config.Default().Store.Path, "`DIR`ectory of the store (as collect's store.path)")
	sink := fs.String("sink", "", "only the dead letters of this output (`NAME`, e.g. postgres)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	r, err := store.OpenReader(filepath.Join(*dir, "xrdmon.db"))
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
