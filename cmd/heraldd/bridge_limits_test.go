package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridge_LocalLimitsFromListener: heraldd gives its bridges the
// listener's frame limits (stomp.max_body_bytes, max_headers, ...), so a
// message the daemon accepted is one its bridge can read: a 17 MiB body
// with max_body_bytes 64 MiB, and 200 headers with max_headers 256, both
// reach the peer.
//
// Before: bridge.Options.LocalLimits was left zero, and the bridge's
// connection to the daemon read MESSAGEs with the client's defaults
// (16 MiB bodies, 128 headers). Such a message broke the bridge's local
// connection at every delivery: it never went out, and after
// max_deliveries broken sessions it went to the dead-letter queue.
func TestBridge_LocalLimitsFromListener(t *testing.T) {
	peer := testbroker.Start(t, func(c *appliance.Config) {
		c.Stomp.MaxBodyBytes = 64 << 20
		c.Stomp.MaxHeaders = 512
	})
	dir := t.TempDir()
	addr := freeAddr(t)
	cfg := filepath.Join(dir, "herald.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`data_dir = %q
[stomp]
listen = %q
max_body_bytes = 67108864
max_headers = 256
[admin]
socket = %q
[[bridge]]
name = "to-b"
kind = "stomp"
host = %q
appliance_id = "site-a"
reconnect_min = "20ms"
reconnect_max = "200ms"
[[bridge.map]]
local = "/queue/orders"
remote = "/queue/from-a"
direction = "out"
`, filepath.Join(dir, "data"), addr, filepath.Join(dir, "admin.sock"), peer.Addr)), 0o640); err != nil {
		t.Fatal(err)
	}
	_, log := startWithConfig(t, cfg, addr)
	c := dial2(t, addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := bytes.Repeat([]byte("x"), 17<<20) // accepted by this daemon (64 MiB)
	if _, err := c.SendReceipt(ctx, "/queue/orders", body); err != nil {
		t.Fatalf("send: %v", err)
	}
	var hdrs []stomp.Header
	for i := range 200 { // accepted by this daemon (256)
		hdrs = append(hdrs, stomp.Header{Key: "h" + strconv.Itoa(i), Value: "v"})
	}
	if _, err := c.SendReceipt(ctx, "/queue/orders", []byte("many headers"), hdrs...); err != nil {
		t.Fatalf("send: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if q, _ := peer.B.Queue("from-a"); q.Messages == 2 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	q, _ := peer.B.Queue("from-a")
	t.Errorf("the peer's queue holds %d messages 20s after a 17 MiB message and one of 200 headers were accepted (stomp.max_body_bytes 64 MiB, max_headers 256), want 2; heraldd log (tail):\n%s", q.Messages, logTail(log.String(), 1500))
}

func logTail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
