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
