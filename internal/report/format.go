package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/xrdmon/xrdmon/internal/record"
)

// Format is an output format.
type Format string

// The output formats: aligned tables with humanised numbers for people,
// CSV and JSON with exact numbers for programs.
const (
	Table Format = "table"
	CSV   Format = "csv"
	JSON  Format = "json"
)

// ParseFormat reads a --format value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case Table, CSV, JSON:
		return f, nil
	}
	return "", fmt.Errorf("format %q: want table, csv or json", s)
}

// Bytes humanises a byte count: "1.23 TB" (powers of 1000, as
// accounting reports them).
func Bytes(n int64) string {
	const units = "kMGTPE"
	if n < 1000 && n > -1000 {
		return strconv.FormatInt(n, 10) + " B"
	}
	f, i := float64(n)/1000, 0
	for (f >= 1000 || f <= -1000) && i < len(units)-1 {
		f /= 1000
		i++
	}
	return strconv.FormatFloat(f, 'f', prec(f), 64) + " " + units[i:i+1] + "B"
}

// Count writes n with thousands separators: "1,234,567".
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Rate humanises bytes per second: "1.2 GB/s".
func Rate(bytes int64, seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	return Bytes(int64(float64(bytes)/seconds)) + "/s"
}

func prec(f float64) int {
	switch f = max(f, -f); {
	case f >= 100:
		return 0
	case f >= 10:
		return 1
	}
	return 2
}

// Text makes a string from a packet safe for a terminal: control
// characters, invalid UTF-8 and other unprintable runes are written as Go
// escapes, so a path or user name cannot move the cursor, change colours
// or hide text.
func Text(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

// Cell makes a string from a packet safe for a CSV cell that a person
// opens in a spreadsheet or prints to a terminal: control characters are
// escaped as Text does, and a cell a spreadsheet would take for a formula
// (beginning with =, +, -, @, a tab or a carriage return, such as
// =HYPERLINK(...) as a user name) gets a leading apostrophe, which shows
// it as text (OWASP, "CSV Injection").
func Cell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		s = "'" + s
	}
	return Text(s)
}

// recordColumns are the columns of a record listing.
// duration_seconds is the transfer's duration (end - start, seconds).
var recordColumns = []string{"end", "server", "site", "user", "vo", "client", "path", "read_bytes", "readv_bytes", "write_bytes", "duration_seconds", "reason"}

// recordTexts are the indices of the columns that hold texts (from
// packets, or a reason), not numbers or times: the cells CSV neutralises.
var recordTexts = columnIndices(recordColumns, "server", "site", "user", "vo", "client", "path", "reason")

// columnIndices returns the indices of names in columns; a name that is
// not a column is a programming error.
func columnIndices(columns []string, names ...string) []int {
	out := make([]int, len(names))
	for i, n := range names {
		j := slices.Index(columns, n)
		if j < 0 {
			panic("report: no column " + n)
		}
		out[i] = j
	}
	return out
}

// Widths of a table's text columns (runes): longer texts are cut in the
// middle (…), so that a listing fits a terminal; CSV and JSON are exact.
var recordWidths = map[int]int{1: 28, 2: 16, 3: 20, 4: 10, 5: 28, 6: 56}

// clip cuts s to at most n runes, keeping its start and end (a path's
// file name) around an ellipsis.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 5 {
		return s
	}
	tail := (n - 1) / 2
	return string(r[:n-1-tail]) + "…" + string(r[len(r)-tail:])
}

func recordValues(r *record.Record, human bool) []string {
	read, readv, write := r.ReadBytes, r.ReadvBytes, r.WriteBytes
	secs := 0.0
	if !r.Start.IsZero() && r.End.After(r.Start) {
		secs = r.End.Sub(r.Start).Seconds()
	}
	reason := string(r.Reason)
	if reason == "" {
		reason = "complete"
	}
	v := []string{
		r.End.UTC().Format(time.RFC3339), r.Dim(record.DimServer), r.Site, r.User, r.VO, r.Client(), r.Path,
		strconv.FormatInt(read, 10), strconv.FormatInt(readv, 10), strconv.FormatInt(write, 10), strconv.FormatFloat(secs, 'f', -1, 64), reason,
	}
	if human {
		v[0] = r.End.UTC().Format("2006-01-02 15:04:05")
		v[7], v[8], v[9], v[10] = Bytes(read), Bytes(readv), Bytes(write), (time.Duration(secs) * time.Second).String()
		for i, s := range v {
			v[i] = Text(s)
			if w, ok := recordWidths[i]; ok {
				v[i] = clip(v[i], w)
			}
		}
	}
	return v
}

// RecordWriter writes records in a format.
type RecordWriter struct {
	f   Format
	w   io.Writer
	tw  *tabwriter.Writer
	cw  *csv.Writer
	buf []byte
}

// NewRecordWriter starts a listing on w.
func NewRecordWriter(w io.Writer, f Format) *RecordWriter {
	rw := &RecordWriter{f: f, w: w}
	switch f {
	case Table:
		rw.tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(rw.tw, strings.ToUpper(strings.Join(recordColumns, "\t")))
	case CSV:
		rw.cw = csv.NewWriter(w)
		rw.cw.Write(recordColumns) //nolint:errcheck // reported by Flush
	}
	return rw
}

// Write writes one record.
func (rw *RecordWriter) Write(r *record.Record) error {
	switch rw.f {
	case Table:
		_, err := fmt.Fprintln(rw.tw, strings.Join(recordValues(r, true), "\t"))
		return err
	case CSV:
		v := recordValues(r, false)
		for _, i := range recordTexts {
			v[i] = Cell(v[i])
		}
		return rw.cw.Write(v)
	}
	rw.buf = append(record.AppendJSON(rw.buf[:0], r), '\n')
	_, err := rw.w.Write(rw.buf)
	return err
}

// Flush ends the listing.
func (rw *RecordWriter) Flush() error {
	switch rw.f {
	case Table:
		return rw.tw.Flush()
	case CSV:
		rw.cw.Flush()
		return rw.cw.Error()
	}
	return nil
}

// WriteSummary writes s in format f.
func WriteSummary(w io.Writer, s *Summary, f Format) error {
	head := make([]string, 0, len(s.By)+7)
	for _, d := range s.By {
		head = append(head, string(d))
	}
	// transfer_seconds: the transfers' durations summed (bytes over it is
	// the table's average rate).
	head = append(head, "transfers", "partial", "read_bytes", "readv_bytes", "write_bytes", "users", "transfer_seconds")
	switch f {
	case JSON:
		type out struct {
			From  time.Time    `json:"from,omitzero"`
			To    time.Time    `json:"to,omitzero"`
			By    []record.Dim `json:"by"`
			Rows  []Row        `json:"rows"`
			Total Row          `json:"total"`
		}
		rows := s.Rows
		if rows == nil {
			rows = []Row{}
		}
		total := s.Total
		total.Keys = []string{}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out{s.From, s.To, s.By, rows, total})
	case CSV:
		cw := csv.NewWriter(w)
		cw.Write(head) //nolint:errcheck // reported by Flush
		for _, r := range s.Rows {
			v := make([]string, 0, len(head))
			for _, k := range r.Keys {
				v = append(v, Cell(k))
			}
			v = append(v,
				strconv.FormatInt(r.Transfers, 10), strconv.FormatInt(r.Partial, 10),
				strconv.FormatInt(r.ReadBytes, 10), strconv.FormatInt(r.ReadvBytes, 10), strconv.FormatInt(r.WriteBytes, 10),
				strconv.Itoa(r.Users), strconv.FormatFloat(r.Seconds, 'f', -1, 64))
			cw.Write(v) //nolint:errcheck // reported by Flush
		}
		cw.Flush()
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	th := make([]string, 0, len(head))
	for _, d := range s.By {
		th = append(th, strings.ToUpper(string(d)))
	}
	th = append(th, "TRANSFERS", "PARTIAL", "READ", "READV", "WRITTEN", "USERS", "AVG RATE")
	fmt.Fprintln(tw, strings.Join(th, "\t")+"\t")
	row := func(keys []string, r *Row) {
		v := make([]string, 0, len(th))
		for _, k := range keys {
			if k == "" {
				k = "(unknown)"
			}
			v = append(v, Text(k))
		}
		v = append(v, strconv.FormatInt(r.Transfers, 10), strconv.FormatInt(r.Partial, 10),
			Bytes(r.ReadBytes), Bytes(r.ReadvBytes), Bytes(r.WriteBytes), strconv.Itoa(r.Users), Rate(r.Bytes(), r.Seconds))
		fmt.Fprintln(tw, strings.Join(v, "\t")+"\t")
	}
	for i := range s.Rows {
		keys := make([]string, len(s.Rows[i].Keys))
		for j, k := range s.Rows[i].Keys {
			keys[j] = clip(k, 48)
		}
		row(keys, &s.Rows[i])
	}
	total := make([]string, len(s.By))
	total[0] = "TOTAL"
	for i := 1; i < len(total); i++ {
		total[i] = " "
	}
	row(total, &s.Total)
	return tw.Flush()
}
