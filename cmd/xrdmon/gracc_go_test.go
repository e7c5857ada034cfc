package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xrdmon/xrdmon/internal/source/sourcetest"
)

// The fields of the Go collector's GRACC document whose values come from a
// clock or from its internal server key, where xrdmon writes the server's
// times and its own server id on purpose (docs/records.md §3.4): left out
// of the field-by-field comparison.
var graccGoVolatile = []string{"@timestamp", "start_time", "end_time", "operation_time", "serverID"}

const graccGoRef = "testdata/gracc-go"

// graccDoc is one GRACC document of the Go flavour: its fields as the raw
// JSON text of their values.
type graccDoc map[string]json.RawMessage

// key identifies the access a document is about, without the fields that
// differ on purpose.
func (d graccDoc) key() string {
	var b strings.Builder
	for _, f := range []string{"server_ip", "filename", "user", "filesize", "read", "readv", "write"} {
		b.Write(d[f])
		b.WriteByte('|')
	}
	return b.String()
}

// canonical is the document without the volatile fields, as sorted
// key=value pairs.
func (d graccDoc) canonical() string {
	keys := make([]string, 0, len(d))
	for k := range d {
		if !slices.Contains(graccGoVolatile, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s,", k, d[k])
	}
	return b.String()
}

// readGRACCDocs parses JSON lines; WLCG documents (no @timestamp) are
// returned apart.
func readGRACCDocs(t *testing.T, data []byte) (gracc, wlcg []graccDoc) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var d graccDoc
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		if _, ok := d["@timestamp"]; ok {
			gracc = append(gracc, d)
		} else {
			wlcg = append(wlcg, d)
		}
	}
	return gracc, wlcg
}

// digest hashes the sorted canonical forms of docs.
func digest(docs []graccDoc) string {
	lines := make([]string, len(docs))
	for i, d := range docs {
		lines[i] = d.canonical()
	}
	slices.Sort(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// replayGRACCGo replays the real use-case capture as the Go collector's
// file output would write it: GRACC of the go flavour, WLCG records as
// WLCG only.
func replayGRACCGo(t *testing.T) (gracc, wlcg []graccDoc) {
	t.Helper()
	path := sourcetest.UseCaseCapturePath(t)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", "--schema", "gracc", "--gracc-flavour", "go", "--wlcg-only", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	return readGRACCDocs(t, stdout.Bytes())
}

// comparable drops from xrdmon's documents those the Go collector does not
// write as such: partial records it never writes (HasFileCloseMsg 0), and
// the accesses whose close arrived before their open, which it writes as
// a close without open (filename "unknown") and xrdmon as a complete
// record (their keys in uncorrelated.txt).
func comparable(docs []graccDoc, uncorrelated map[string]int) []graccDoc {
	var out []graccDoc
	for _, d := range docs {
		if string(d["HasFileCloseMsg"]) == "0" {
			continue
		}
		if k := d.key(); uncorrelated[k] > 0 {
			uncorrelated[k]--
			continue
		}
		out = append(out, d)
	}
	return out
}

// TestGRACCGoMatchesShovelerCollector compares xrdmon's go flavour with the
// output of the OSG shoveler's Go collector mode on the real capture,
// field by field, from the reference kept in testdata/gracc-go (see its
// README for how it was made): every document's fields other than the
// clock ones are equal (a digest over all 2,118 of them, and a sample of
// 40 compared field by field for a readable failure).
func TestGRACCGoMatchesShovelerCollector(t *testing.T) {
	ours, oursWLCG := replayGRACCGo(t)
	uncorrelated := map[string]int{}
	raw, err := os.ReadFile(filepath.Join(graccGoRef, "uncorrelated.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if !strings.HasPrefix(l, "#") {
			uncorrelated[l]++
		}
	}
	cmp := comparable(ours, uncorrelated)
	byKey := map[string][]graccDoc{}
	for _, d := range cmp {
		byKey[d.key()] = append(byKey[d.key()], d)
	}

	sample, err := os.ReadFile(filepath.Join(graccGoRef, "sample.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	theirs, _ := readGRACCDocs(t, sample)
	for _, d := range theirs {
		cands := byKey[d.key()]
		if len(cands) == 0 {
			t.Errorf("no xrdmon document for their %s", d.key())
			continue
		}
		o := cands[0]
		for f, v := range d {
			if slices.Contains(graccGoVolatile, f) {
				if _, ok := o[f]; !ok {
					t.Errorf("%s: field %s missing", d.key(), f)
				}
				continue
			}
			if string(o[f]) != string(v) {
				t.Errorf("%s: %s is %s, theirs %s", d.key(), f, o[f], v)
			}
		}
		for f := range o {
			if _, ok := d[f]; !ok {
				t.Errorf("%s: field %s is not theirs", d.key(), f)
			}
		}
	}

	want, err := os.ReadFile(filepath.Join(graccGoRef, "digest.txt"))
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("documents %d\nsha256 %s\n", len(cmp), digest(cmp))
	if got != string(want) {
		t.Errorf("the comparable documents differ from the Go collector's:\n got: %s\nwant: %s", got, want)
	}
	// The second server's 10 accesses are all under /store: theirs wrote 7
	// as WLCG and 3, whose close came first, as GRACC with an unknown path.
	if len(oursWLCG) != 10 {
		t.Errorf("%d WLCG documents in place of GRACC ones, want the 10 /store paths", len(oursWLCG))
	}
}

// TestMakeGRACCGoReference writes testdata/gracc-go from the output of the
// Go collector (XRDMON_GO_COLLECTOR_OUTPUT, see the README there); it is
// skipped otherwise.
func TestMakeGRACCGoReference(t *testing.T) {
	out := os.Getenv("XRDMON_GO_COLLECTOR_OUTPUT")
	if out == "" {
		t.Skip("XRDMON_GO_COLLECTOR_OUTPUT not set: nothing to make")
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	theirs, _ := readGRACCDocs(t, raw)
	ours, _ := replayGRACCGo(t)
	left := map[string]int{}
	for _, d := range ours {
		if string(d["HasFileCloseMsg"]) != "0" {
			left[d.key()]++
		}
	}
	var matched []graccDoc
	for _, d := range theirs {
		if left[d.key()] > 0 {
			left[d.key()]--
			matched = append(matched, d)
		}
	}
	var unc []string
	for k, n := range left {
		for range n {
			unc = append(unc, k)
		}
	}
	slices.Sort(unc)
	var sample bytes.Buffer
	for i := 0; i < len(matched); i += len(matched) / 40 {
		b, _ := json.Marshal(matched[i])
		sample.Write(b)
		sample.WriteByte('\n')
	}
	files := map[string]string{
		"digest.txt":       fmt.Sprintf("documents %d\nsha256 %s\n", len(matched), digest(matched)),
		"uncorrelated.txt": "# server_ip|filename|user|filesize|read|readv|write of the accesses whose close came before their open\n" + strings.Join(unc, "\n") + "\n",
		"sample.jsonl":     sample.String(),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(graccGoRef, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of their %d GRACC documents matched, %d of ours uncorrelated by theirs", len(matched), len(theirs), len(unc))
}
