// Package atomicfile replaces a file's content as a whole: the new content
// is written to a temporary file beside it (the name with ".tmp" added),
// which is then renamed over it, so a crash leaves the old content or the
// new one, never a part.
package atomicfile

import (
	"encoding/json"
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
