package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, srv *httptest.Server, method, path string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestPageAndAssets: the page is served at / with the policy, and every
// script and stylesheet it names is served from the binary under /ui/.
func TestPageAndAssets(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	resp, page := get(t, srv, "GET", "/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp.Header.Get("Content-Security-Policy") != ContentSecurityPolicy || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers: %v", resp.Header)
	}
	// Scripts and stylesheets (links to the API's documentation and the
	// metrics are not assets).
	refs := regexp.MustCompile(`(?:<script src|<link rel="stylesheet" href)="([^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 3 {
		t.Fatalf("the page names %d assets", len(refs))
	}
	for _, m := range refs {
		ref := m[1]
		if !strings.HasPrefix(ref, "/ui/") {
			t.Errorf("%s is not an embedded asset (the page must work on a closed network)", ref)
			continue
		}
		if r, body := get(t, srv, "GET", ref); r.StatusCode != 200 || len(body) == 0 {
			t.Errorf("%s: %d", ref, r.StatusCode)
		} else if strings.HasSuffix(ref, ".js") && !strings.Contains(r.Header.Get("Content-Type"), "javascript") {
			t.Errorf("%s served as %s", ref, r.Header.Get("Content-Type"))
		}
	}
}

// TestNoInlineCode: the policy forbids inline script and style, so the page
// must hold none (it would not run), and the script never builds markup
// from strings: text from packets goes in as text only.
func TestNoInlineCode(t *testing.T) {
	page, err := assets.ReadFile("assets/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(string(page), -1) {
		if !strings.Contains(tag, ` src="`) {
			t.Errorf("inline script: %s", tag)
		}
	}
	for _, re := range []string{`\son[a-z]+=`, `\sstyle=`, `<style`, `javascript:`} {
		if m := regexp.MustCompile(re).Find(page); m != nil {
			t.Errorf("index.html holds %q, which the policy forbids", m)
		}
	}
	js, err := assets.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	code := regexp.MustCompile(`(?m)^\s*//.*$`).ReplaceAll(js, nil) // comments may name them
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(string(code), bad) {
			t.Errorf("app.js uses %s: strings from packets must go in as text", bad)
		}
	}
}

// TestOnlyThePageAndAssets: no listing of the asset tree, no second address
// for the page, no way out of it, no other method than GET and HEAD.
func TestOnlyThePageAndAssets(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for _, p := range []string{"/ui/", "/ui/vendor", "/ui/vendor/", "/ui/index.html", "/ui/../dashboard.go", "/ui/%2e%2e/dashboard.go", "/nothing", "/ui/missing.js"} {
		if r, _ := get(t, srv, "GET", p); r.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, r.StatusCode)
		}
	}
	if r, _ := get(t, srv, "POST", "/"); r.StatusCode != http.StatusMethodNotAllowed || r.Header.Get("Allow") == "" {
		t.Errorf("POST /: %d", r.StatusCode)
	}
	if r, body := get(t, srv, "HEAD", "/ui/app.js"); r.StatusCode != 200 || body != "" {
		t.Errorf("HEAD: %d %q", r.StatusCode, body)
	}
	if r, _ := get(t, srv, "GET", "/ui/vendor/uPlot.LICENSE"); r.StatusCode != 200 {
		t.Errorf("the vendored library's licence is not served: %d", r.StatusCode)
	}
}
