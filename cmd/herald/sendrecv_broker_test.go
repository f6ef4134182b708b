package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/internal/testbroker"
)

// startBroker runs a real broker with a real SQLite journal on 127.0.0.1:0.
func startBroker(t *testing.T) string {
	t.Helper()
	return testbroker.Start(t, nil).Addr
}

func TestSendReceive_RealBroker(t *testing.T) {
	addr := startBroker(t)
	code, _, stderr := runCLI(t, "one\ntwo\nthree\n", "--server", addr, "send", "--receipt", "/queue/cli")
	if code != 0 {
		t.Fatalf("send: exit %d: %s", code, stderr)
	}
	code, _, stderr = runCLI(t, "", "--server", addr, "send", "--header", "x-k=v", "/queue/cli", "four")
	if code != 0 {
		t.Fatalf("send body: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "", "--server", addr, "receive", "--count", "3", "--ack", "client-individual", "/queue/cli")
	if code != 0 || stdout != "one\ntwo\nthree\n" {
		t.Fatalf("receive: exit %d stdout %q stderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "", "--server", addr, "receive", "--count", "1", "--json", "/queue/cli")
	if code != 0 {
		t.Fatalf("receive --json: exit %d: %s", code, stderr)
	}
	var m struct {
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &m); err != nil {
		t.Fatalf("json %q: %v", stdout, err)
	}
	if m.Body != "four" || m.Headers["x-k"] != "v" || m.Headers["destination"] != "/queue/cli" {
		t.Fatalf("got %+v", m)
	}
	// Acked messages are gone: nothing more arrives.
	start := time.Now()
	code, _, _ = runCLI(t, "", "--server", addr, "receive", "--count", "1", "--timeout", "300ms", "/queue/cli")
	if code != exitTimeout || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("receive on empty queue: exit %d after %s, want %d after 300ms", code, time.Since(start), exitTimeout)
	}
}

func TestCLI_FlagsAfterArguments(t *testing.T) {
	addr := startBroker(t)
	if code, _, stderr := runCLI(t, "", "--server", addr, "send", "/queue/order", "hello", "--receipt", "--header", "k=v"); code != 0 {
		t.Fatalf("send with flags after DEST: exit %d: %s", code, stderr)
	}
	// After "--", a flag-like word is a body.
	if code, _, stderr := runCLI(t, "", "--server", addr, "send", "/queue/order", "--receipt", "--", "--json"); code != 0 {
		t.Fatalf("send -- --json: exit %d: %s", code, stderr)
	}
	code, out, stderr := runCLI(t, "", "--server", addr, "receive", "/queue/order", "--count", "2")
	if code != 0 || out != "hello\n--json\n" {
		t.Fatalf("receive with flags after DEST: exit %d, %q, %s", code, out, stderr)
	}
}
