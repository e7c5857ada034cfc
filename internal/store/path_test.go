package store

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPathWithSpace(t *testing.T) {
	s, _ := openTest(t, func(o *Options) { o.Path = filepath.Join(filepath.Dir(o.Path), "a b#c?d", "x.db") })
	if _, err := os.Stat(s.Path()); err != nil {
		t.Fatalf("database not at %s: %v", s.Path(), err)
	}
}
