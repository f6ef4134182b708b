// Package webui holds the built-in dashboard page (index.html), embedded, for programs other
// than the appliance that serve it: `herald listen --serve` re-serves a multicast channel with
// the same page. The appliance embeds the same file itself (appliance/web_dashboard.go).
package webui

import _ "embed"

// Page is index.html: it reads /events?format=json&topics=2s&topic=PATTERN (server-sent events)
// and loads nothing from elsewhere.
//
//go:embed index.html
var Page []byte
