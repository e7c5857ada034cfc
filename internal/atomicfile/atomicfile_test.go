package atomicfile

import (
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
