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
		"--duration", "20m", "--seed", "5", "--summary", "1m"}, io.Discard, &stderr); code != 0 {
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
		// The third-party copies table counts every TPC event of the truth.
		copies, err := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll('#t-tpc tbody tr')].reduce((n, r) => n + Number(r.cells[1].textContent.replace(/,/g, '')), 0)`))
		if err != nil {
			t.Fatal(err)
		}
		if int64(copies) != truth.Events["P"] {
			t.Errorf("third-party copies: %d, truth %d", copies, truth.Events["P"])
		}
		for _, id := range []string{"c-conn", "c-threads", "c-link"} {
			servers, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Number(document.getElementById('`+id+`').dataset.series)`))
			if err != nil {
				t.Fatal(err)
			}
			if servers != len(truth.Servers) {
				t.Errorf("%s chart: %d servers, truth %d", id, servers, len(truth.Servers))
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
