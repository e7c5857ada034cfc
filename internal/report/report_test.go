package report

import (
	"testing"
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
