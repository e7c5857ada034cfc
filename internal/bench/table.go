package bench

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Columns are the table's column names, in the order of WriteTable and
// WriteCSV.
var Columns = []string{
	"step", "servers", "clients", "sent", "offered_pps", "accepted_pps", "seq_gaps", "kernel_drops", "loss_pct",
	"cpu_s_per_100k", "peak_rss_mib", "latency_p50_ms", "latency_p99_ms",
	"expected", "complete", "partial", "missing", "wrong_bytes", "open", "unexpected", "sender_cpu_s_per_100k",
	"events_expected", "events_stored", "rollups_caught_up_s", "rollups_read_back", "sim_speed",
}

// laterColumns are the columns added since the first CSV files: older
// files lack them, and read as unknown.
var laterColumns = map[string]bool{
	"sender_cpu_s_per_100k": true, "events_expected": true, "events_stored": true,
	"rollups_caught_up_s": true, "rollups_read_back": true, "sim_speed": true,
}

// NullColumns are the columns of a null target's rows (Row.Null): no records, the datagrams received instead.
var NullColumns = []string{
	"step", "servers", "clients", "sent", "offered_pps", "received", "received_pps", "kernel_drops", "loss_pct",
	"cpu_s_per_100k", "peak_rss_mib", "sender_cpu_s_per_100k",
}

// columns returns the columns for rows: NullColumns when they are a null
// target's.
func columns(rows []Row) []string {
	if len(rows) > 0 && rows[0].Null {
		return NullColumns
	}
	return Columns
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }

func (r *Row) fields() []string {
	if r.Null {
		return []string{
			r.Step, strconv.Itoa(r.Servers), strconv.Itoa(r.Clients), strconv.FormatInt(r.Sent, 10),
			strconv.FormatFloat(r.Offered, 'f', 0, 64), strconv.FormatInt(r.Received, 10), strconv.FormatFloat(r.Accepted, 'f', 0, 64),
			strconv.FormatInt(r.KernelDrops, 10), strconv.FormatFloat(r.LossPct, 'f', 3, 64),
			strconv.FormatFloat(r.CPUPer100k, 'f', 3, 64), strconv.FormatFloat(float64(r.PeakRSS)/(1<<20), 'f', 1, 64),
			strconv.FormatFloat(r.SenderCPUPer100k, 'f', 3, 64),
		}
	}
	gaps := "-"
	if r.SeqGaps >= 0 {
		gaps = strconv.FormatInt(r.SeqGaps, 10)
	}
	caughtUp, readBack := "-", "-"
	if r.RollupsCaughtUp >= 0 {
		caughtUp = strconv.FormatFloat(r.RollupsCaughtUp.Seconds(), 'f', 1, 64)
	}
	if r.RollupsReadBack >= 0 {
		readBack = strconv.FormatInt(r.RollupsReadBack, 10)
	}
	simSpeed := "-" // a file from before the column
	if r.SimSpeed > 0 {
		simSpeed = strconv.FormatFloat(r.SimSpeed, 'f', 1, 64)
	}
	return []string{
		r.Step, strconv.Itoa(r.Servers), strconv.Itoa(r.Clients), strconv.FormatInt(r.Sent, 10),
		strconv.FormatFloat(r.Offered, 'f', 0, 64), strconv.FormatFloat(r.Accepted, 'f', 0, 64),
		gaps, strconv.FormatInt(r.KernelDrops, 10), strconv.FormatFloat(r.LossPct, 'f', 3, 64),
		strconv.FormatFloat(r.CPUPer100k, 'f', 3, 64), strconv.FormatFloat(float64(r.PeakRSS)/(1<<20), 'f', 1, 64),
		ms(r.LatencyP50), ms(r.LatencyP99),
		strconv.Itoa(r.Expected), strconv.Itoa(r.Complete), strconv.Itoa(r.Partial), strconv.Itoa(r.Missing),
		strconv.Itoa(r.WrongBytes), strconv.Itoa(r.Open), strconv.Itoa(r.Unexpected),
		strconv.FormatFloat(r.SenderCPUPer100k, 'f', 3, 64),
		strconv.FormatInt(r.EventsExpected, 10), strconv.FormatInt(r.EventsStored, 10),
		caughtUp, readBack, simSpeed,
	}
}

// WriteTable writes rows as an aligned text table, with the header line
// when header is set. A null target's rows have NullColumns.
func WriteTable(w io.Writer, rows []Row, header bool) {
	cols := columns(rows)
	width := make([]int, len(cols))
	for i, c := range cols {
		width[i] = max(len(c), 7)
	}
	cells := make([][]string, len(rows))
	for k := range rows {
		cells[k] = rows[k].fields()
		for i, c := range cells[k] {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(f []string) {
		var b strings.Builder
		for i, c := range f {
			if i > 0 {
				b.WriteString("  ")
			}
			if i == 0 {
				fmt.Fprintf(&b, "%-*s", width[i], c)
			} else {
				fmt.Fprintf(&b, "%*s", width[i], c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	if header {
		line(cols)
	}
	for _, c := range cells {
		line(c)
	}
}

// WriteCSV writes the header and rows as CSV (NullColumns for a null
// target's rows).
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(columns(rows))
	for i := range rows {
		_ = cw.Write(rows[i].fields())
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

// WriteSVG draws a line chart of the rows: offered rate on the x axis,
// loss % (left axis) and p50/p99 latency (right axis). When every step
// offered about the same rate (a scenario varying clients, servers...),
// the x axis is the scenario's parameter instead.
func WriteSVG(w io.Writer, rows []Row, title string) error {
	const W, H = 760.0, 420.0
	const l, r, t, b = 70.0, 80.0, 40.0, 60.0
	pw, ph := W-l-r, H-t-b
	xval, xlabel := func(r Row) float64 { return r.Offered }, "offered rate (packets/s)"
	if lo, hi, vlo, vhi := rangeOf(rows); len(rows) > 1 && hi < 1.2*lo && vhi > vlo {
		param, _, _ := strings.Cut(rows[0].Step, "=")
		xval, xlabel = func(r Row) float64 { return r.Value }, param+fmt.Sprintf(" (at %s packets/s)", short(math.Round(hi/1000)*1000))
	}
	xmax, lossMax, latMax := 1.0, 1.0, 1.0
	for _, row := range rows {
		xmax = math.Max(xmax, xval(row))
		lossMax = math.Max(lossMax, row.LossPct)
		latMax = math.Max(latMax, float64(row.LatencyP99)/1e6)
	}
	xmax, lossMax, latMax = niceCeil(xmax), niceCeil(lossMax), niceCeil(latMax)
	x := func(row Row) float64 { return l + pw*xval(row)/xmax }
	yl := func(v float64) float64 { return t + ph*(1-v/lossMax) }
	yr := func(v float64) float64 { return t + ph*(1-v/latMax) }
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&s, `<rect width="%g" height="%g" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&s, `<text x="%g" y="22" text-anchor="middle" font-size="15">%s</text>`+"\n", W/2, xmlEscape(title))
	for i := 0; i <= 5; i++ {
		f := float64(i) / 5
		gx, gy := l+pw*f, t+ph*(1-f)
		fmt.Fprintf(&s, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#ddd"/>`+"\n", l, gy, l+pw, gy)
		fmt.Fprintf(&s, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", gx, t+ph+18, short(xmax*f))
		fmt.Fprintf(&s, `<text x="%g" y="%g" text-anchor="end" fill="#c0392b">%s</text>`+"\n", l-6, gy+4, short(lossMax*f))
		fmt.Fprintf(&s, `<text x="%g" y="%g" fill="#2c6fbb">%s</text>`+"\n", l+pw+6, gy+4, short(latMax*f))
	}
	fmt.Fprintf(&s, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#333"/>`+"\n", l, t, pw, ph)
	fmt.Fprintf(&s, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", l+pw/2, H-18, xmlEscape(xlabel))
	fmt.Fprintf(&s, `<text transform="translate(18 %g) rotate(-90)" text-anchor="middle" fill="#c0392b">loss (%%)</text>`+"\n", t+ph/2)
	fmt.Fprintf(&s, `<text transform="translate(%g %g) rotate(90)" text-anchor="middle" fill="#2c6fbb">latency close→durable (ms)</text>`+"\n", W-22, t+ph/2)
	series := []struct {
		name, color, dash string
		y                 func(Row) float64
	}{
		{"loss %", "#c0392b", "", func(r Row) float64 { return yl(r.LossPct) }},
		{"latency p99", "#2c6fbb", "", func(r Row) float64 { return yr(float64(r.LatencyP99) / 1e6) }},
		{"latency p50", "#2c6fbb", ` stroke-dasharray="5 4"`, func(r Row) float64 { return yr(float64(r.LatencyP50) / 1e6) }},
	}
	for k, se := range series {
		var pts []string
		for _, row := range rows {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(row), se.y(row)))
		}
		fmt.Fprintf(&s, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", se.color, se.dash, strings.Join(pts, " "))
		for _, row := range rows {
			fmt.Fprintf(&s, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s</title></circle>`+"\n", x(row), se.y(row), se.color, xmlEscape(row.Step))
		}
		ly := t + 14 + float64(k)*16
		fmt.Fprintf(&s, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"%s/><text x="%g" y="%g">%s</text>`+"\n",
			l+10, ly, l+34, ly, se.color, se.dash, l+40, ly+4, se.name)
	}
	s.WriteString("</svg>\n")
	_, err := io.WriteString(w, s.String())
	if err != nil {
		return fmt.Errorf("write svg: %w", err)
	}
	return nil
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// rangeOf returns the smallest and largest offered rate and parameter value.
func rangeOf(rows []Row) (lo, hi, vlo, vhi float64) {
	lo, vlo = math.Inf(1), math.Inf(1)
	hi, vhi = math.Inf(-1), math.Inf(-1)
	for _, r := range rows {
		lo, hi = math.Min(lo, r.Offered), math.Max(hi, r.Offered)
		vlo, vhi = math.Min(vlo, r.Value), math.Max(vhi, r.Value)
	}
	return lo, hi, vlo, vhi
}

// ReadCSV reads rows written by WriteCSV (to print or chart them again).
// Columns are found by name; the parameter value is taken from the step
// name ("clients=50").
func ReadCSV(r io.Reader) ([]Row, error) {
	recs, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("read csv: %w", err)
	}
	if len(recs) == 0 {
		return nil, errors.New("read csv: empty")
	}
	col := make(map[string]int)
	for i, c := range recs[0] {
		col[c] = i
	}
	_, null := col["received"]
	want := Columns
	if null {
		want = NullColumns
	}
	for _, c := range want {
		if _, ok := col[c]; !ok && !laterColumns[c] {
			return nil, fmt.Errorf("read csv: no column %q", c)
		}
	}
	var rows []Row
	for n, rec := range recs[1:] {
		var bad error
		f := func(name string) float64 {
			i, ok := col[name]
			if !ok {
				return 0
			}
			s := rec[i]
			if s == "-" {
				return -1
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil && bad == nil {
				bad = fmt.Errorf("read csv: line %d, %s: %w", n+2, name, err)
			}
			return v
		}
		i := func(name string) int { return int(f(name)) }
		msd := func(name string) time.Duration { return time.Duration(f(name) * 1e6) }
		row := Row{
			Step: rec[col["step"]], Servers: i("servers"), Clients: i("clients"), Sent: int64(f("sent")),
			Offered: f("offered_pps"), Accepted: f("accepted_pps"), SeqGaps: int64(f("seq_gaps")),
			SenderCPUPer100k: f("sender_cpu_s_per_100k"),
			EventsExpected:   int64(f("events_expected")), EventsStored: int64(f("events_stored")),
			RollupsCaughtUp: -1, RollupsReadBack: -1,
			KernelDrops: int64(f("kernel_drops")), LossPct: f("loss_pct"), CPUPer100k: f("cpu_s_per_100k"),
			PeakRSS: int64(f("peak_rss_mib") * (1 << 20)), LatencyP50: msd("latency_p50_ms"), LatencyP99: msd("latency_p99_ms"),
			SimSpeed: f("sim_speed"),
			Check: Check{Expected: i("expected"), Complete: i("complete"), Partial: i("partial"), Missing: i("missing"),
				WrongBytes: i("wrong_bytes"), Open: i("open"), Unexpected: i("unexpected")},
		}
		if null {
			row.Null, row.Received, row.Accepted, row.SeqGaps = true, int64(f("received")), f("received_pps"), -1
		}
		if _, ok := col["rollups_caught_up_s"]; ok {
			if v := f("rollups_caught_up_s"); v >= 0 {
				row.RollupsCaughtUp = time.Duration(v * 1e9)
			}
		}
		if _, ok := col["rollups_read_back"]; ok {
			row.RollupsReadBack = int64(f("rollups_read_back"))
		}
		if _, v, ok := strings.Cut(row.Step, "="); ok {
			row.Value, _ = strconv.ParseFloat(v, 64)
		}
		if bad != nil {
			return nil, bad
		}
		rows = append(rows, row)
	}
	return rows, nil
}
