package atomicfile

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.json")
	for _, v := range []any{[]int{1, 2}, map[string]string{"a": "b"}} {
		if err := WriteJSON(path, v); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != `{"a":"b"}` {
		t.Fatalf("content %q, %v", b, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	if err := WriteJSON(path, func() {}); err == nil {
		t.Fatal("no error for a value JSON cannot encode")
	}
}

func TestReadJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.json")
	var v map[string]string
	if found, err := ReadJSON(path, 1<<10, &v); found || err != nil {
		t.Fatalf("missing file: found %v, %v", found, err)
	}
	if err := WriteJSON(path, map[string]string{"a": "b"}); err != nil {
		t.Fatal(err)
	}
	if found, err := ReadJSON(path, 1<<10, &v); !found || err != nil || v["a"] != "b" {
		t.Fatalf("found %v, %v, %v", found, v, err)
	}
	if found, err := ReadJSON(path, 4, &v); !found || err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("cut at the limit: found %v, %v", found, err)
	}
}

// TestState: without a path nothing is built or written; a failed save
// (here a directory that does not exist) is logged with Lost, and the
// file of a working save reads back.
func TestState(t *testing.T) {
	if err := (State{}).Save(func() any { t.Fatal("value built without a path"); return nil }); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	dir := t.TempDir()
	bad := State{Path: filepath.Join(dir, "missing", "f.json"), Log: log, Lost: "state not saved"}
	bad.SaveOrLog(func() any { return 1 })
	if !strings.Contains(logged.String(), "state not saved") || !strings.Contains(logged.String(), "missing") {
		t.Fatalf("log %q", logged.String())
	}
	good := State{Path: filepath.Join(dir, "f.json"), Log: log}
	good.SaveOrLog(func() any { return []int{7} })
	var v []int
	if found, err := ReadJSON(good.Path, 1<<10, &v); !found || err != nil || len(v) != 1 || v[0] != 7 {
		t.Fatalf("read back %v, %v, %v", v, found, err)
	}
}
