package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Durations in the log read as durations ("4ms"), in JSON too, not as
// nanosecond integers.
func TestLog_DurationsAsText(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: durationsAsText}))
	log.Info("heraldd ready", "startup", 4*time.Millisecond)
	if got := buf.String(); !strings.Contains(got, `"startup":"4ms"`) {
		t.Fatalf("got %s, want \"startup\":\"4ms\"", got)
	}
}
