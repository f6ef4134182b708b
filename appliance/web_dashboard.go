package appliance

import (
	_ "embed"
	"net/http"
)

// dashboardPage is the built-in dashboard served at / (no CDN: everything
// it needs is in it). It lists the live topics it may read and the latest
// value of each numeric series, from /events.
//
//go:embed webui/index.html
var dashboardPage []byte

func serveDashboard(w http.ResponseWriter, r *http.Request) {
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
	// The page loads nothing from elsewhere, and no other site may frame it.
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(dashboardPage)
}
