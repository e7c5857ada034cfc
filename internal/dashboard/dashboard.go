// Package dashboard serves xrdmon's web page: health, traffic, top lists,
// transfers and per-server panels, drawn in the browser from the query API
// (/api/v1). Every asset is embedded in the binary (no CDN: sites run
// collectors on closed networks), including the one charting library,
// uPlot, vendored under assets/vendor.
//
// Everything the page shows from a packet is attacker-controlled; the page
// only ever puts it in the document as text (textContent, never innerHTML),
// and the Content-Security-Policy forbids inline script and every origin
// but this one, so a string that gets through anyway cannot run.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy is the policy every dashboard response carries:
// scripts, styles, images and API calls from this origin only; no inline
// script, no plugins, no framing.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the page at / and its assets under /ui/; every other path
// is not found.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		switch p := path.Clean(r.URL.Path); {
		case p == "/":
			h.Set("Cache-Control", "no-cache")
			http.ServeFileFS(w, r, sub, "index.html")
		case strings.HasPrefix(p, "/ui/") && isFile(sub, p[len("/ui/"):]):
			h.Set("Cache-Control", "no-cache")
			http.ServeFileFS(w, r, sub, p[len("/ui/"):])
		default:
			http.NotFound(w, r)
		}
	})
}

// isFile reports whether name is a regular file of fsys other than the
// page itself (no directory listings, no second address for the page).
func isFile(fsys fs.FS, name string) bool {
	if name == "index.html" {
		return false
	}
	st, err := fs.Stat(fsys, name)
	return err == nil && st.Mode().IsRegular()
}
