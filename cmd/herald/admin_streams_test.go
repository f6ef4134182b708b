package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// herald streams and herald stream show|cursors|reset-cursor|delete
// against a real daemon: tables, --json, and exit codes.
func TestAdminCLI_Streams(t *testing.T) {
	d := admintest.Start(t, nil)
	s := d.Socket
	conn := d.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ {
		if _, err := conn.SendReceipt(ctx, "/stream/ticks", []byte("t")); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := conn.SubscribeReceipt(ctx, "/stream/ticks", "client", stomp.Header{Key: "x-stream-consumer", Value: "w1"}, stomp.Header{Key: "x-stream-offset", Value: "first"})
	if err != nil {
		t.Fatal(err)
	}
	var ack string
	for i := 0; i < 2; i++ {
		ack = (<-sub.C()).Get("ack")
	}
	if _, err := conn.Request(ctx, stomp.NewFrame("ACK", "id", ack)); err != nil {
		t.Fatal(err)
	}

	out, _ := runAdmin(t, s, exitOK, "streams")
	mustContain(t, "streams", out, "STREAM", "MAX-LAG", "ticks")
	if f := strings.Fields(lineWith(out, "ticks")); len(f) < 5 || f[1] != "5" || f[f2(f)] != "3" {
		t.Errorf("streams row: %q, want ticks 5 ... lag 3", lineWith(out, "ticks"))
	}
	sl := decode[admin.StreamList](t, first(runAdmin(t, s, exitOK, "streams", "--json")))
	if len(sl.Streams) != 1 || sl.Streams[0].Messages != 5 || len(sl.Streams[0].Cursors) != 1 || sl.Streams[0].Cursors[0].Lag != 3 {
		t.Errorf("streams --json: %+v", sl)
	}
	out, _ = runStream(t, s, exitOK, "show", "/stream/ticks")
	mustContain(t, "stream show", out, "stream:", "ticks", "first 0, last 4, next 5", "CURSOR", "w1")
	sv := decode[appliance.StreamView](t, first(runStream(t, s, exitOK, "show", "--json", "ticks")))
	if sv.NextOffset != 5 || sv.Appends != 5 {
		t.Errorf("stream show --json: %+v", sv)
	}
	out, _ = runStream(t, s, exitOK, "cursors", "ticks")
	if f := strings.Fields(lineWith(out, "w1")); len(f) != 4 || f[1] != "2" || f[2] != "3" || f[3] != "true" {
		t.Errorf("cursors row: %q, want w1 2 3 true", lineWith(out, "w1"))
	}
	// Refusals: the cursor's consumer is connected; no --yes; unknown names.
	_, errOut := runStream(t, s, 1, "reset-cursor", "ticks", "w1")
	mustContain(t, "reset-cursor while active", errOut, "active consumer")
	runStream(t, s, exitUsage, "delete", "ticks")
	runStream(t, s, exitUsage, "reset-cursor", "--to", "sideways", "ticks", "w1")
	runStream(t, s, exitNotFound, "show", "nope")
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	r := decode[admin.CursorReset](t, first(runStream(t, s, exitOK, "reset-cursor", "--json", "--to", "next", "ticks", "w1")))
	if r.Previous != 2 || r.Offset != 5 {
		t.Errorf("reset-cursor --to next: %+v, want 2 -> 5", r)
	}
	out, _ = runStream(t, s, exitOK, "delete", "--yes", "ticks")
	mustContain(t, "stream delete", out, "deleted stream ticks and its 5 messages")
	out, _ = runAdmin(t, s, exitOK, "streams")
	mustContain(t, "streams after delete", out, "(no streams)")
}

// runStream runs herald stream SUB --socket S ARGS... (runAdmin puts the
// flag before the subcommand for other commands than queue and connections).
func runStream(t *testing.T, socket string, want int, args ...string) (string, string) {
	t.Helper()
	full := append([]string{"stream", args[0], "--socket", socket}, args[1:]...)
	code, stdout, stderr := runCLI(t, "", full...)
	if code != want {
		t.Fatalf("herald %s: exit code %d, want %d\nstdout: %s\nstderr: %s", strings.Join(full, " "), code, want, stdout, stderr)
	}
	return stdout, stderr
}

// f2 is the index of the last field (MAX-LAG).
func f2(f []string) int { return len(f) - 1 }
