package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A bridge whose peer is not there: heraldd starts and serves anyway, the
// bridge is failing in /metrics, and its reason is logged once per
// log_interval, not once per attempt.
func TestBridgeMetricsFailing(t *testing.T) {
	dir := t.TempDir()
	addr, metrics, nowhere := freeAddr(t), freeAddr(t), freeAddr(t)
	cfg := filepath.Join(dir, "herald.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`data_dir = %q
[stomp]
listen = %q
[admin]
socket = %q
metrics_listen = %q
[[bridge]]
name = "to-b"
kind = "stomp"
host = %q
appliance_id = "site-a"
reconnect_min = "10ms"
reconnect_max = "50ms"
log_interval = "1m"
[[bridge.map]]
local = "/queue/orders"
remote = "/queue/orders"
direction = "out"
`, filepath.Join(dir, "data"), addr, filepath.Join(dir, "admin.sock"), metrics, nowhere)), 0o640)
	_, log := startWithConfig(t, cfg, addr)
	deadline := time.Now().Add(20 * time.Second)
	var body string
	for {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if strings.Contains(body, `herald_bridge_failing{bridge="to-b",direction="out"} 1`) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failing bridge in /metrics:\n%s", grepLines(body, "herald_bridge"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{
		`herald_bridge_up{bridge="to-b",direction="out"} 0`,
		`herald_bridge_in_flight{bridge="to-b",direction="out"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics: want %s in:\n%s", want, grepLines(body, "herald_bridge"))
		}
	}
	time.Sleep(300 * time.Millisecond) // many more attempts (every 10 to 50 ms)
	if n := strings.Count(log.String(), "bridge failing"); n != 1 {
		t.Errorf("%d 'bridge failing' lines within log_interval, want 1:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), nowhere) {
		t.Errorf("the log does not name the peer %s:\n%s", nowhere, log.String())
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
