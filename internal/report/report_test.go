package report

import (
	"bytes"
	"context"
	"encoding/csv"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 999: "999 B", 1000: "1.00 kB", 1_234_567: "1.23 MB", 45_600_000_000: "45.6 GB",
		987_000_000_000_000: "987 TB", 2_500_000_000_000_000: "2.50 PB",
	} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
	if got := Rate(3_000_000_000, 2); got != "1.50 GB/s" {
		t.Errorf("Rate = %q", got)
	}
}

func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"/store/a.root":           "/store/a.root",
		"évé":                     "évé",
		"a\x1b[31mred":            `a\x1b[31mred`,
		"bad\xffutf8":             `bad\xffutf8`,
		"tab\there\r\n":           `tab\there\r\n`,
		"<script>x</script>":      "<script>x</script>", // a terminal shows it as text
		"\u202ereversed\u202c ok": `\u202ereversed\u202c ok`,
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}

// CSV cells from packets neither start a spreadsheet formula nor carry
// terminal control bytes (issue 25: =HYPERLINK(...) as a user name, a path
// that retitles and clears the terminal), in records and in reports.
func TestCSVCells(t *testing.T) {
	r := record.Record{User: `=HYPERLINK("http://evil.example","x")`, ServerHost: "=srv", Site: "+SITE", VO: "-vo", ClientName: "@cmd",
		Path: "/store/\x1b]0;pwned\x07\x1b[2J", Reason: record.Timeout, ReadBytes: 5, End: time.Unix(1767225600, 0)}
	var buf bytes.Buffer
	rw := NewRecordWriter(&buf, CSV)
	if err := rw.Write(&r); err != nil {
		t.Fatal(err)
	}
	if err := rw.Flush(); err != nil {
		t.Fatal(err)
	}
	s := &Summary{By: []record.Dim{record.DimUser}, Rows: []Row{{Keys: []string{"@SUM(A1:A9)"}, Transfers: 1}, {Keys: []string{"\tx\r"}}}}
	if err := WriteSummary(&buf, s, CSV); err != nil {
		t.Fatal(err)
	}
	cr := csv.NewReader(&buf)
	cr.FieldsPerRecord = -1 // a listing, then a report
	rows, err := cr.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		for _, c := range row {
			if c != "" && strings.ContainsRune("=+-@\t\r", rune(c[0])) || strings.ContainsAny(c, "\x1b\x07") {
				t.Errorf("cell %q", c)
			}
		}
	}
	if got := rows[1][1]; got != "'=srv" {
		t.Errorf("server cell %q", got)
	}
	if got := rows[1][11]; got != "timeout" {
		t.Errorf("reason cell %q", got)
	}
	if got := rows[1][3]; got != `'=HYPERLINK("http://evil.example","x")` {
		t.Errorf("user cell %q", got)
	}
	if rows[1][7] != "5" || rows[3][1] != "1" {
		t.Errorf("numbers changed: %q", rows)
	}
}

// The command line asks again when the collector is busy (503 with
// Retry-After: it serves a bounded number of queries at once).
func TestAPISourceRetriesBusy(t *testing.T) {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":"busy"}`, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"records":[{"record_id":"r1","user":"u"}]}`))
	}))
	defer srv.Close()
	var got []string
	err := APISource{URL: srv.URL}.Records(context.Background(), store.Query{}, func(r *record.Record) error {
		got = append(got, r.RecordID)
		return nil
	})
	if err != nil || len(got) != 1 || calls != 2 {
		t.Errorf("records %v after %d calls: %v", got, calls, err)
	}
}
