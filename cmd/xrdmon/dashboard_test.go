package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/xrdmon/xrdmon/internal/api"
	"github.com/xrdmon/xrdmon/internal/config"
	"github.com/xrdmon/xrdmon/internal/loadgen"
	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// The hostile record's strings: markup in the user name and the path,
// bytes that are not UTF-8, and a right-to-left override that would make
// the path's end read "exe.png".
const (
	hostileUser = `<script>window.__xss=1</script>`
	hostilePath = "/store/\"><img src=x onerror=\"window.__xss=2\">/\xff\xfe\u202egnp.exe"
)

// chromiumPath returns Debian's chromium (installed by .ci/run and `make
// test`); outside CI the test skips without it.
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (CI must install it: .ci/run)")
	}
	t.Skip("chromium is not installed: apt-get install chromium (make test does) to run the dashboard's browser test")
	return ""
}

// TestDashboard drives the dashboard in headless Chromium against a real
// collector holding a loadgen workload (imported from its capture) and one
// hostile record: the traffic totals and the charts' sums equal the
// truth, the time picker changes what is shown, search finds a user's
// transfers, and the hostile record's strings render as inert text.
// XRDMON_SCREENSHOTS=DIR saves a screenshot of every tab there.
func TestDashboard(t *testing.T) {
	chrome := chromiumPath(t)
	dir := t.TempDir()
	pcap, truthFile := dir+"/cap.pcap", dir+"/truth.json"
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"loadgen", "--pcap", pcap, "--truth", truthFile, "--servers", "4",
		"--duration", "20m", "--seed", "5", "--summary", "1m", "--redirectors", "2", "--cache-frac", "0.5"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("loadgen exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(truthFile)
	if err != nil {
		t.Fatal(err)
	}
	var truth loadgen.Truth
	if err := json.Unmarshal(b, &truth); err != nil {
		t.Fatal(err)
	}
	keep := func(c *config.Config) {
		c.Store.Path, c.Store.Retention = dir+"/store", 0
		c.Rollup.RetentionMinute, c.Rollup.RetentionHour = 0, 0 // the workload is months old
	}
	cfg := config.Default()
	cfg.FileInput.Paths, cfg.FileInput.Flush = []string{pcap}, true
	cfg.Listen.UDP, cfg.HTTP.Address, cfg.DNS.Enabled = "", "", false
	keep(cfg)
	if err := collect(context.Background(), cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("collect: %v", err)
	}
	at := truth.Start.Add(10 * time.Minute)
	appendHostile(t, dir+"/store", at)
	d := startDaemon(t, keep)

	var read, write int64
	users := map[string]int{}
	for i := range truth.Records {
		r := &truth.Records[i]
		read += r.ReadBytes + r.ReadvBytes
		write += r.WriteBytes
		users[r.User]++
	}
	// A user with a few transfers, to search for.
	user := ""
	for u, n := range users {
		if n >= 2 && n <= 40 && (user == "" || u < user) {
			user = u
		}
	}
	from, to := truth.Start.Add(-10*time.Minute).UTC(), truth.End.Add(30*time.Minute).UTC()
	base := "http://" + d.http + "/"
	custom := fmt.Sprintf("range=custom&from=%s&to=%s", from.Format(time.RFC3339), to.Format(time.RFC3339))

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 1000))
	// The browser lives at most five minutes (the test takes seconds): a
	// step that waits for something that never comes fails the test at
	// that step instead of hanging it.
	bctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	actx, cancel := chromedp.NewExecAllocator(bctx, opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()

	// act runs steps that make the page render (a navigation, a click) and
	// waits for that render to finish; it fails on the page's error box.
	act := func(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.body ? (document.body.dataset.render = 'stale', true) : false`)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; {
			done, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.body && document.body.dataset.loading === 'false' && /^[0-9]+$/.test(document.body.dataset.render || '')`))
			if err != nil {
				t.Fatal(err)
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the page did not finish rendering in 20 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		errText, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('error').hidden ? '' : document.getElementById('error').textContent`))
		if err != nil {
			t.Fatal(err)
		}
		if errText != "" {
			t.Fatalf("the page shows an error: %s", errText)
		}
	}
	// choose sets a select's value as a user would.
	choose := func(id, value string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const s = document.getElementById(%q); s.value = %q; s.dispatchEvent(new Event('change')); return true; })()`, id, value))(ctx, tg)
			return err
		})
	}
	attr := func(t *testing.T, sel, name string) int64 {
		t.Helper()
		res, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
		if err != nil || !res.Exists {
			t.Fatalf("%s[%s]: %v (present %v)", sel, name, err, res.Exists)
		}
		n, err := strconv.ParseInt(res.Value, 10, 64)
		if err != nil {
			t.Fatalf("%s[%s] = %q", sel, name, res.Value)
		}
		return n
	}
	shot := func(t *testing.T, name string) {
		out := os.Getenv("XRDMON_SCREENSHOTS")
		if out == "" {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, "dashboard-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("traffic equals the truth", func(t *testing.T) {
		act(t, chromedp.Navigate(base+"#tab=traffic&"+custom))
		if got := attr(t, "#traffic-sums", "data-read"); got != read {
			t.Errorf("total read %d bytes, truth %d", got, read)
		}
		if got := attr(t, "#traffic-sums", "data-write"); got != write {
			t.Errorf("total written %d bytes, truth %d", got, write)
		}
		if got, want := attr(t, "#traffic-sums", "data-transfers"), int64(len(truth.Records))+1; got != want {
			t.Errorf("%d transfers, truth %d and the hostile one", got, want)
		}
		// The stacked charts sum to the same totals, and were drawn.
		if got := attr(t, "#c-read", "data-sum"); got != read {
			t.Errorf("read chart sums to %d bytes, truth %d", got, read)
		}
		if got := attr(t, "#c-write", "data-sum"); got != write {
			t.Errorf("write chart sums to %d bytes, truth %d", got, write)
		}
		canvases, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#traffic canvas').length`))
		if err != nil {
			t.Fatal(err)
		}
		if canvases < 6 || attr(t, "#c-read", "data-points") < 20 || attr(t, "#c-read", "data-series") < 4 {
			t.Errorf("traffic charts not drawn: %d canvases, %d points, %d series", canvases,
				attr(t, "#c-read", "data-points"), attr(t, "#c-read", "data-series"))
		}
		shot(t, "traffic")
	})

	// Item 1 of issue 28: the x axis covers the range chosen, whatever the
	// data cover (one bucket must not span years; the last hour is an hour).
	t.Run("axes cover the chosen range", func(t *testing.T) {
		span := func(id string) (int64, int64) { return attr(t, id, "data-xmin"), attr(t, id, "data-xmax") }
		act(t, chromedp.Navigate(base+"#tab=traffic&"+custom))
		for _, id := range []string{"#c-read", "#c-xfers", "#c-duration", "#c-local"} {
			if lo, hi := span(id); lo != from.Unix() || hi != to.Unix() {
				t.Errorf("%s: axis %s – %s, range %s – %s", id, time.Unix(lo, 0).UTC(), time.Unix(hi, 0).UTC(), from, to)
			}
		}
		// A custom minute holding one bucket.
		m0 := truth.Start.Add(5 * time.Minute).Truncate(time.Minute).UTC()
		act(t, chromedp.Navigate(base+fmt.Sprintf("#tab=traffic&range=custom&from=%s&to=%s", m0.Format(time.RFC3339), m0.Add(time.Minute).Format(time.RFC3339))))
		if lo, hi := span("#c-read"); lo != m0.Unix() || hi != m0.Add(time.Minute).Unix() {
			t.Errorf("one minute: axis %s – %s", time.Unix(lo, 0).UTC(), time.Unix(hi, 0).UTC())
		}
		for _, r := range []struct {
			name string
			secs int64
		}{{"1h", 3600}, {"30d", 30 * 86400}} {
			act(t, chromedp.Navigate(base+"#tab=health&range="+r.name))
			if lo, hi := span("#c-state"); hi-lo < r.secs-120 || hi-lo > r.secs+120 {
				t.Errorf("health, %s: axis spans %d s", r.name, hi-lo)
			}
		}
	})

	// Item 2: a time without transfers (here the ten minutes before the
	// workload) is drawn as zero, not bridged by a line from the buckets
	// around it.
	t.Run("outages look like outages", func(t *testing.T) {
		act(t, chromedp.Navigate(base+"#tab=traffic&"+custom))
		type pts struct {
			Before  int `json:"before"`
			NonZero int `json:"nonzero"`
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[pts](fmt.Sprintf(`(() => {
			const d = document.getElementById('c-read').uplot.data; let before = 0, nonzero = 0;
			d[0].forEach((x, i) => { if (x < %d) { before++; for (const s of d.slice(1)) if (s[i] !== 0) nonzero++; } });
			return {before, nonzero}; })()`, truth.Start.Add(-time.Minute).Unix())))
		if err != nil {
			t.Fatal(err)
		}
		if got.Before < 8 || got.NonZero != 0 {
			t.Errorf("the empty ten minutes: %d points drawn, %d of them not zero; want about ten, all zero", got.Before, got.NonZero)
		}
		// Quantiles have no value where nothing ended: a gap, not a line.
		gaps, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`(() => { const u = document.getElementById('c-duration').uplot;
			return u.data[0].filter((x, i) => x < %d && u.data[1][i] === null).length; })()`, truth.Start.Add(-time.Minute).Unix())))
		if err != nil || gaps < 8 {
			t.Errorf("duration chart: %d gaps before the workload (%v)", gaps, err)
		}
	})

	// Item 6: one time convention (24-hour, UTC by default), readable
	// units: no "am"/"pm", no "ks", "0 s" at a duration axis' origin, no
	// rate below one per second labelled per second.
	t.Run("labels", func(t *testing.T) {
		act(t, chromedp.Navigate(base+"#tab=traffic&"+custom))
		type labels struct {
			Time, Duration, Rate []string
			Cell                 string
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[labels](`({
			Time: document.getElementById('c-read').uplot.axes[0]._values,
			Duration: document.getElementById('c-duration').uplot.axes[1]._values,
			Rate: document.getElementById('c-xfers').uplot.axes[1]._values,
			Cell: '' })`))
		if err != nil {
			t.Fatal(err)
		}
		timeRe := regexp.MustCompile(`^(\d\d-\d\d )?\d\d:\d\d$|^\d\d-\d\d$`)
		for _, l := range got.Time {
			if !timeRe.MatchString(l) {
				t.Errorf("time label %q is not 24-hour HH:MM (or MM-DD)", l)
			}
		}
		for _, l := range got.Duration {
			if strings.Contains(l, "ks") || strings.Contains(l, "0 ms") && l == "0 ms" {
				t.Errorf("duration label %q", l)
			}
		}
		units, top := map[string]bool{}, 0.0
		for _, l := range got.Rate {
			if f := strings.Fields(l); len(f) == 2 {
				units[f[1]] = true
				v, _ := strconv.ParseFloat(f[0], 64)
				top = max(top, v)
			}
		}
		if len(units) > 1 || (units["/s"] && top < 1) {
			t.Errorf("rate axis %v: mixed units, or per second below one per second", got.Rate)
		}
		if len(got.Time) < 3 || len(got.Duration) < 2 {
			t.Errorf("labels: %+v", got)
		}
	})

	// Item 7: no two series of a chart share a colour (more than the 10 of
	// the old palette here), and a legend is never taller than its chart.
	t.Run("colours and legends", func(t *testing.T) {
		act(t, chromedp.EmulateViewport(1280, 900))
		defer act(t, chromedp.EmulateViewport(1400, 1000))
		act(t, chromedp.Navigate(base+"#tab=traffic&by=user&n=30&"+custom))
		type look struct {
			Series, Distinct int
			Legend, Plot     float64
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[look](`(() => { const b = document.getElementById('c-read'), u = b.uplot;
			const cs = u.series.slice(1).map(s => s._stroke);
			return {Series: cs.length, Distinct: new Set(cs).size, Legend: b.querySelector('.u-legend').getBoundingClientRect().height,
				Plot: b.querySelector('.u-wrap').getBoundingClientRect().height}; })()`))
		if err != nil {
			t.Fatal(err)
		}
		if got.Series <= 10 || got.Distinct != got.Series {
			t.Errorf("%d series, %d colours", got.Series, got.Distinct)
		}
		if got.Legend > got.Plot/2 {
			t.Errorf("legend %.0f px high, chart %.0f px", got.Legend, got.Plot)
		}
	})

	// Item 3: at 1280 px every table fits its panel (no column hidden
	// until a scroll), on Transfers, Top and Servers.
	t.Run("tables fit", func(t *testing.T) {
		act(t, chromedp.EmulateViewport(1280, 900))
		defer act(t, chromedp.EmulateViewport(1400, 1000))
		for _, tab := range []string{"transfers", "top", "servers"} {
			act(t, chromedp.Navigate(base+"#tab="+tab+"&"+custom))
			over, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('section:not([hidden]) table.data')]
				.filter(t => t.closest('.panel').scrollWidth > t.closest('.panel').clientWidth + 1)
				.map(t => t.id + ': ' + t.closest('.panel').scrollWidth + ' > ' + t.closest('.panel').clientWidth)`))
			if err != nil {
				t.Fatal(err)
			}
			if len(over) > 0 {
				t.Errorf("%s at 1280 px: tables wider than their panels: %v", tab, over)
			}
		}
	})

	// Item 8: the transfers tab counts every record of the range (not
	// "50+"), exports the records shown as CSV, and refreshes a short
	// range that ends now by itself.
	t.Run("transfers count, export, refresh", func(t *testing.T) {
		act(t, chromedp.Navigate(base+"#tab=transfers&"+custom))
		if got, want := attr(t, "#rec-count", "data-total"), int64(len(truth.Records))+1; got != want {
			t.Errorf("transfers: total %d, truth %d and the hostile one", got, want)
		}
		lines, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.getElementById('export').csv.trim().split('\r\n').length`))
		if err != nil || lines != 51 {
			t.Errorf("CSV export: %d lines (%v), want a header and the 50 records shown", lines, err)
		}
		if got := attr(t, "body", "data-refresh"); got != 0 {
			t.Errorf("a custom range refreshes every %d s", got)
		}
		act(t, chromedp.Navigate(base+"#tab=transfers&range=1h"))
		if got := attr(t, "body", "data-refresh"); got != 30 {
			t.Errorf("the last hour refreshes every %d s, want 30", got)
		}
		act(t, chromedp.Navigate(base+"#tab=traffic&"+custom)) // where the next test starts
	})

	t.Run("time picker", func(t *testing.T) {
		// The last hour (now) holds nothing of a January workload...
		act(t, choose("range", "1h"))
		if got := attr(t, "#traffic-sums", "data-transfers"); got != 0 {
			t.Errorf("last hour: %d transfers, want 0", got)
		}
		hash, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash`))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(hash, "custom") {
			t.Errorf("permalink %q still holds the custom range", hash)
		}
		// ...and a custom range typed into the picker brings it back.
		act(t, choose("range", "custom"),
			chromedp.SetValue(chromedp.CSS(`#from`), from.Format("2006-01-02T15:04")),
			chromedp.SetValue(chromedp.CSS(`#to`), to.Format("2006-01-02T15:04")),
			chromedp.Click(chromedp.CSS(`#apply`)),
		)
		if got := attr(t, "#traffic-sums", "data-read"); got != read {
			t.Errorf("custom range: read %d bytes, truth %d", got, read)
		}
	})

	t.Run("search", func(t *testing.T) {
		act(t, chromedp.Navigate(base+"#tab=transfers&"+custom))
		act(t, chromedp.SetValue(chromedp.CSS(`#q-user`), user), chromedp.Click(chromedp.CSS(`#search button[type=submit]`)))
		cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#records tbody tr')].map(r => r.cells[1].textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		if len(cells) != users[user] {
			t.Errorf("search for %s: %d rows, truth %d records", user, len(cells), users[user])
		}
		for _, c := range cells {
			if c != user {
				t.Errorf("search for %s shows a record of %q", user, c)
			}
		}
		shot(t, "transfers")
	})

	t.Run("hostile record is text", func(t *testing.T) {
		act(t, chromedp.Click(chromedp.CSS(`#q-clear`)))
		act(t, chromedp.SetValue(chromedp.CSS(`#q-user`), hostileUser), chromedp.Click(chromedp.CSS(`#search button[type=submit]`)))
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#records tbody tr`)), chromedp.WaitVisible(chromedp.CSS(`#detail-panel`))); err != nil {
			t.Fatal(err)
		}
		type result struct {
			XSS    any    `json:"xss"`
			Imgs   int    `json:"imgs"`
			Script int    `json:"scripts"`
			User   string `json:"user"`
			Path   string `json:"path"`
			Row    string `json:"row"`
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[result](`({
			xss: window.__xss ?? null,
			imgs: document.querySelectorAll('main img').length,
			scripts: document.querySelectorAll('main script').length,
			user: document.querySelector('#detail td[data-field="user"]').textContent,
			path: document.querySelector('#detail td[data-field="path"]').textContent,
			row: document.querySelector('#records tbody tr').cells[3].textContent,
		})`))
		if err != nil {
			t.Fatal(err)
		}
		if got.XSS != nil || got.Imgs != 0 || got.Script != 0 {
			t.Errorf("the hostile record ran or made elements: __xss=%v, %d img, %d script", got.XSS, got.Imgs, got.Script)
		}
		// Each byte that is not UTF-8 becomes U+FFFD, as in the API's JSON;
		// the override is shown as a mark.
		wantPath := strings.ReplaceAll(string([]rune(hostilePath)), "\u202e", "<U+202E>")
		if got.User != hostileUser || got.Path != wantPath || got.Row != wantPath {
			t.Errorf("hostile strings not shown as text: user %q, path %q, row %q; want %q and %q", got.User, got.Path, got.Row, hostileUser, wantPath)
		}
	})

	t.Run("health follows live traffic", func(t *testing.T) {
		// Live UDP traffic, simulated three hours ago (outside the
		// ranges above): the health tab's packets-in chart counts every
		// datagram sent.
		liveTruth := dir + "/live.json"
		epoch := time.Now().Add(-3 * time.Hour).UTC().Format(time.RFC3339)
		if code := run(context.Background(), []string{"loadgen", "--udp", d.udp, "--truth", liveTruth, "--servers", "2",
			"--duration", "3m", "--seed", "9", "--epoch", epoch, "--rate", "20000"}, io.Discard, &stderr); code != 0 {
			t.Fatalf("loadgen exit %d: %s", code, stderr.String())
		}
		var live loadgen.Truth
		if b, err := os.ReadFile(liveTruth); err != nil || json.Unmarshal(b, &live) != nil || live.Emitted == 0 {
			t.Fatalf("live truth: %v", err)
		}
		// Wait for a health sample (every 10 s) that holds them all.
		for deadline := time.Now().Add(40 * time.Second); ; {
			var h api.HealthAnswer
			d.getJSON(t, "/api/v1/health", &h)
			if n := len(h.Samples); n > 1 {
				if i := slices.Index(h.Names, "xrdmon_udp_packets_received_total"); i >= 0 && i < len(h.Samples[n-1].Values) {
					if v := h.Samples[n-1].Values[i]; v != nil && int64(*v) == live.Emitted {
						break
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no health sample holds the %d datagrams sent", live.Emitted)
			}
			time.Sleep(500 * time.Millisecond)
		}
		act(t, chromedp.Navigate(base+"#tab=health&range=1h"))
		if got := attr(t, "#c-in", "data-sum"); got != live.Emitted {
			t.Errorf("packets-in chart counts %d datagrams, %d sent", got, live.Emitted)
		}
		if attr(t, "#c-in", "data-points") < 1 {
			t.Error("packets-in chart not drawn")
		}
		handled, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#t-status td[data-key="packets handled"]').textContent`))
		if err != nil {
			t.Fatal(err)
		}
		if strings.ReplaceAll(handled, ",", "") != fmt.Sprint(live.Emitted) {
			t.Errorf("status: %s packets handled, %d sent", handled, live.Emitted)
		}
		shot(t, "health")
	})

	// Item 4: the health history of the previous run survives a restart,
	// and a counter that restarts from zero draws a gap, never a spike.
	t.Run("restart keeps health and draws no spike", func(t *testing.T) {
		storeDir := t.TempDir()
		start := time.Now().Add(-40 * time.Minute).Truncate(10 * time.Second).UTC()
		const name = `xrdmon_packets_total{outcome="accounted"}`
		var hist api.HealthAnswer
		hist.Names = []string{name}
		for i := range 60 { // ten minutes at 10/s, ending at 11,282
			v := float64(11282 - 100*(59-i))
			hist.Samples = append(hist.Samples, api.HealthSample{Time: start.Add(time.Duration(i) * 10 * time.Second), Values: []*float64{&v}})
		}
		b, err := json.Marshal(hist)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(storeDir, "health-history.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		// Item 9 across the restart: a server heard every 10 s until 20
		// minutes ago is silent, and stays flagged.
		quiet := time.Now().Add(-20 * time.Minute).Unix()
		heard := fmt.Sprintf(`[{"ip":"192.0.2.77","host":"quiet.example.org","site":"T2_TEST","heard":{"fstream":%d,"summary":%d},"usual":10,"intervals":50}]`, quiet, quiet-30)
		if err := os.WriteFile(filepath.Join(storeDir, "servers-heard.json"), []byte(heard), 0o600); err != nil {
			t.Fatal(err)
		}
		d3 := startDaemon(t, func(c *config.Config) { c.Store.Path = storeDir })
		type drawn struct {
			Before int     `json:"before"`
			Max    float64 `json:"max"`
			Gaps   int     `json:"gaps"`
		}
		act(t, chromedp.Navigate("http://"+d3.http+"/#tab=health&range=1h"))
		got, err := chromedp.Run(ctx, chromedp.Evaluate[drawn](fmt.Sprintf(`(() => {
			const u = document.getElementById('c-outcome').uplot; const i = u.series.findIndex(s => s.label === 'accounted');
			let before = 0, max = 0, gaps = 0;
			u.data[0].forEach((x, k) => { const v = u.data[i][k]; if (x < %d) before++; if (v === null) gaps++; else max = Math.max(max, v); });
			return {before, max, gaps}; })()`, start.Add(10*time.Minute).Unix())))
		if err != nil {
			t.Fatal(err)
		}
		if got.Before < 60 {
			t.Errorf("%d samples of the previous run drawn, want its 60", got.Before)
		}
		if got.Max > 10.01 || got.Gaps < 2 {
			t.Errorf("accounted: highest rate %v /s (the previous run's was 10 /s: a spike), %d gaps (want the restart's)", got.Max, got.Gaps)
		}
		type flagged struct {
			Verdict, Reasons, Row string
		}
		act(t, chromedp.Navigate("http://"+d3.http+"/#tab=servers&range=1h"))
		f, err := chromedp.Run(ctx, chromedp.Evaluate[flagged](`({Verdict: document.getElementById('verdict').dataset.status,
			Reasons: document.getElementById('reasons').textContent,
			Row: (document.querySelector('#t-heard tr[data-key="192.0.2.77"]') || {dataset: {}}).dataset.silent || ''})`))
		if err != nil {
			t.Fatal(err)
		}
		if f.Verdict != "warn" || !strings.Contains(f.Reasons, "quiet.example.org") || f.Row != "true" {
			t.Errorf("a silent server: verdict %q, reasons %q, row silent %q", f.Verdict, f.Reasons, f.Row)
		}
	})

	t.Run("health, top and servers render", func(t *testing.T) {
		for _, tab := range []string{"top", "servers"} {
			act(t, chromedp.Navigate(base+"#tab="+tab+"&"+custom))
			shot(t, tab)
		}
		verdict, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`#verdict`), "data-status"))
		if err != nil {
			t.Fatal(err)
		}
		if verdict.Value != "ok" {
			t.Errorf("keeping-up verdict %q, want ok", verdict.Value)
		}
		// Item 9: every server heard is listed with its streams' times
		// (the live servers of the health test, just heard: none silent).
		var heard api.ServersAnswer
		d.getJSON(t, "/api/v1/servers", &heard)
		type row struct {
			Silent string `json:"silent"`
			Map    string `json:"map"`
		}
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]row](`[...document.querySelectorAll('#t-heard tbody tr[data-key]')].map(r => ({silent: r.dataset.silent, map: r.cells[7].textContent}))`))
		if err != nil {
			t.Fatal(err)
		}
		if len(heard.Servers) < 2 || len(rows) != len(heard.Servers) {
			t.Errorf("servers heard: the table shows %d, the API %d (want the live loadgen's)", len(rows), len(heard.Servers))
		}
		for _, r := range rows {
			if r.Silent != "false" || !strings.HasSuffix(r.Map, " ago") {
				t.Errorf("a live server: %+v", r)
			}
		}
		// Item 5: the cache and redirect tables sum every event of the
		// range (more than a page of 1,000 redirects), on the server.
		type sums struct {
			Files, Redirects, Redirected int64
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[sums](`(() => {
			const col = (id, i) => [...document.querySelectorAll('#' + id + ' tbody tr')].filter(r => r.dataset.key && r.dataset.key !== 'delay')
				.reduce((n, r) => n + Number(r.cells[i].textContent.replace(/,/g, '')), 0);
			const d = document.querySelector('#t-redirect tr[data-key="delay"]');
			return {Files: col('t-cache', 1), Redirects: col('t-redirect', 1), Redirected: Number(d.cells[1].textContent.replace(/,/g, ''))}; })()`))
		if err != nil {
			t.Fatal(err)
		}
		var redirected int64
		for i := range truth.Records {
			if truth.Records[i].RedirectHops > 0 {
				redirected++
			}
		}
		if want := (sums{truth.Events["C"], truth.Events["r"], redirected}); got != want || want.Redirects <= 1000 {
			t.Errorf("servers tab: cache files, redirects, transfers redirected %+v; truth %+v (more than 1,000 redirects)", got, want)
		}
		// The third-party copies table counts every TPC event of the truth.
		copies, err := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll('#t-tpc tbody tr')].reduce((n, r) => n + Number(r.cells[1].textContent.replace(/,/g, '')), 0)`))
		if err != nil {
			t.Fatal(err)
		}
		if int64(copies) != truth.Events["P"] {
			t.Errorf("third-party copies: %d, truth %d", copies, truth.Events["P"])
		}
		reporting := 0 // the servers that send summaries (the redirectors do not)
		for _, sv := range truth.Servers {
			if sv.Summary != nil && sv.Summary.Reports > 0 {
				reporting++
			}
		}
		// Item 10: link in and out apart, and operations, each summing to
		// the increase the servers' own counters report.
		var linkIn, linkOut, opens, errs int64
		for _, sv := range truth.Servers {
			if sv.Summary != nil {
				linkIn += sv.Summary.Increase["link.in"]
				linkOut += sv.Summary.Increase["link.out"]
				opens += sv.Summary.Increase["xrootd.ops.open"]
				errs += sv.Summary.Increase["xrootd.err"]
			}
		}
		// Errors (the forced closes loadgen's servers count), summed as
		// the servers' own counters report them.
		if got := attr(t, "#c-err", "data-sum"); got != errs || errs == 0 {
			t.Errorf("errors chart sums %d, truth %d (more than none)", got, errs)
		}
		if in, out, ops := attr(t, "#c-link-in", "data-sum"), attr(t, "#c-link", "data-sum"), attr(t, "#c-ops", "data-sum"); in != linkIn || out != linkOut || ops != opens || opens == 0 {
			t.Errorf("link in %d, out %d, opens %d; truth %d, %d, %d", in, out, ops, linkIn, linkOut, opens)
		}
		for _, id := range []string{"c-conn", "c-threads", "c-link-in", "c-link", "c-disk", "c-space"} {
			servers, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Number(document.getElementById('`+id+`').dataset.series)`))
			if err != nil {
				t.Fatal(err)
			}
			if servers != reporting {
				t.Errorf("%s chart: %d servers, truth %d", id, servers, reporting)
			}
		}
	})

	t.Run("dark and light themes", func(t *testing.T) {
		act(t, chromedp.Navigate(base+"#tab=traffic&"+custom))
		type look struct {
			Theme string `json:"theme"`
			BG    string `json:"bg"`
		}
		looks := func() look {
			l, err := chromedp.Run(ctx, chromedp.Evaluate[look](`({theme: document.documentElement.dataset.theme, bg: getComputedStyle(document.body).backgroundColor})`))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		before := looks()
		act(t, chromedp.Click(chromedp.CSS(`#theme`)))
		after := looks()
		if after.Theme == before.Theme || after.BG == before.BG || (after.Theme != "dark" && after.Theme != "light") {
			t.Errorf("the theme button: %+v, then %+v", before, after)
		}
		act(t, chromedp.Reload())
		if again := looks(); again != after {
			t.Errorf("the theme is not kept over a reload: %+v, then %+v", after, again)
		}
		if after.Theme == "dark" {
			shot(t, "traffic-dark")
		}
		act(t, chromedp.Click(chromedp.CSS(`#theme`))) // back, for the tests that follow
	})

	t.Run("API token", func(t *testing.T) {
		// A collector whose API needs a token: the page asks for it, and
		// works once it has it.
		tokenFile := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		d2 := startDaemon(t, func(c *config.Config) { c.HTTP.APITokenFile = tokenFile })
		base2 := "http://" + d2.http + "/"
		if err := chromedp.Do(ctx, chromedp.Navigate(base2+"#tab=health"), chromedp.WaitVisible(chromedp.CSS(`#tokenbox`))); err != nil {
			t.Fatal(err)
		}
		act(t, chromedp.SetValue(chromedp.CSS(`#token`), "s3cret-token"), chromedp.Click(chromedp.CSS(`#tokenform button`)))
		hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('tokenbox').hidden`))
		if err != nil || !hidden {
			t.Errorf("the token box stays open (%v)", err)
		}
		// The verdict comes from the API: it answered the token.
		if v, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`#verdict`), "data-status")); err != nil || v.Value != "ok" {
			t.Errorf("with the token, the verdict is %q (%v)", v.Value, err)
		}
	})
}

// appendHostile adds to the store at path one record whose strings are
// markup and invalid UTF-8, as a packet could carry them.
func appendHostile(t *testing.T, path string, at time.Time) {
	t.Helper()
	o := store.DefaultOptions()
	o.Path = filepath.Join(path, store.DBFile)
	o.Retention = 0
	st, err := store.Open(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := record.Record{RecordID: "feedfacefeedfacefeedfacefeedface", Start: at.Add(-time.Minute), End: at, Received: at,
		ServerIP: "192.0.2.66", User: hostileUser, Path: hostilePath, AppInfo: `<b onmouseover="window.__xss=3">x</b>`, VO: "cms"}
	if err := st.Append(context.Background(), []record.Record{r}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
