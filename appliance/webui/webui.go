// Package webui is Herald's built-in dashboard: one HTML page (index.html)
// with uPlot (uplot/, MIT, vendored from npm) inlined into it, so that a
// browser loads one document and nothing else. The web listener serves it
// at / (appliance.WebHandler); `herald listen --serve` may serve it too:
// the page talks to /events on the origin it was loaded from.
package webui

import (
	"bytes"
	"embed"
	"net/http"
	"sync"
)

// FS holds the page and the vendored uPlot files with their license.
//
//go:embed index.html uplot/uPlot.iife.min.js uplot/uPlot.min.css uplot/LICENSE uplot/README
var FS embed.FS

// Page is the dashboard page, uPlot's script and style inlined.
var Page = sync.OnceValue(func() []byte {
	page := must("index.html")
	page = bytes.Replace(page, []byte("/*UPLOT_CSS*/"), must("uplot/uPlot.min.css"), 1)
	page = bytes.Replace(page, []byte("/*UPLOT_JS*/"), must("uplot/uPlot.iife.min.js"), 1)
	return page
})

func must(name string) []byte {
	b, err := FS.ReadFile(name)
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return b
}

// Handler serves Page at / (GET and HEAD; 404 for other paths), with
// headers that keep it to its own origin: it loads nothing from elsewhere
// and no other site may frame it.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		w.Write(Page())
	})
}
