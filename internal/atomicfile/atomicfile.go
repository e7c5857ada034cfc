// Package atomicfile replaces a file's content as a whole: the new content
// is written to a temporary file beside it (the name with ".tmp" added),
// which is then renamed over it, so a crash leaves the old content or the
// new one, never a part. ReadJSON reads such a file back.
package atomicfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
)

// Write replaces the content of the file path with b; a new file gets the
// permissions perm. The errors are os.WriteFile's and os.Rename's, as
// they are.
func Write(path string, b []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// WriteJSON replaces the content of the file path with the JSON of v
// (json.Marshal), with Write; a new file is readable by its owner only.
func WriteJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return Write(path, b, 0o600)
}

// ReadJSON decodes the JSON in the file path, of which it reads at most
// limit bytes, into v. A missing file is not an error: found is false. An
// error opening the file is os.Open's; a decoding error is prefixed with
// the path.
func ReadJSON(path string, limit int64, v any) (found bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := json.NewDecoder(io.LimitReader(f, limit)).Decode(v); err != nil {
		return true, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// State is a component's state kept across restarts in a JSON file: read
// once at start (ReadJSON), replaced as the component goes (WriteJSON). A
// failed save costs only what a restart would have found, so SaveOrLog
// logs it and the component goes on.
type State struct {
	Path string       // the file; "": nothing is kept
	Log  *slog.Logger // for a failed save; nil: not logged
	// Lost says what a failed save loses, as its log message ("Health
	// history not saved; a restart will start it empty").
	Lost string
}

// Save replaces the file with the JSON of what value returns; without a
// Path it does nothing (and does not call value).
func (s State) Save(value func() any) error {
	if s.Path == "" {
		return nil
	}
	if err := WriteJSON(s.Path, value()); err != nil {
		return fmt.Errorf("save %s: %w", s.Path, err)
	}
	return nil
}

// SaveOrLog is Save, logging a failure (a full disk) with Lost.
func (s State) SaveOrLog(value func() any) {
	if err := s.Save(value); err != nil && s.Log != nil {
		s.Log.Warn(s.Lost, "err", err)
	}
}
