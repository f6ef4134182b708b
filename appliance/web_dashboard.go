package appliance

import (
	"net/http"

	"github.com/herald-mq/herald/appliance/webui"
)

// serveDashboard serves the built-in dashboard (package webui) at /: live
// charts of the numeric series of /events, drawn full at once from topic
// history, and a read-only overview of the queues, topics and channels the
// user may read (the "overview" events of /events).
var serveDashboard = webui.Handler().ServeHTTP

// _ keeps the handler's type checked against http.HandlerFunc.
var _ http.HandlerFunc = serveDashboard
