package appliance_test

import (
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// TestKV_SlowWatcherCountedOnce: herald_kv_watchers_dropped_total ("Watchers disconnected for more than
// kv.watch_buffer_bytes waiting") counts watchers. It counted changes: once a
// slow watcher is dropped its watch stays registered until the session's
// cleanup (which waits for its writer, up to lastWriteTimeout), and every
// change in between finds it still over the limit and counts (and logs)
// another drop.
func TestKV_SlowWatcherCountedOnce(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.KV.WatchBufferBytes = 64 << 10
		c.KV.MaxValueBytes = 64 << 10
	})
	w := dialRaw(t, tb)
	w.connect("1.2")
	w.write("SUBSCRIBE\nid:w\ndestination:/kv/big.>\nreceipt:s\n\n\x00")
	if f := w.frame(); f.Get("kv-snapshot-complete") != "0" {
		t.Fatalf("marker of an empty bucket: %v", f.Headers)
	}
	if f := w.frame(); f.Command != stomp.CmdReceipt {
		t.Fatalf("want the RECEIPT, got %v", f.Headers)
	}
	c := tb.Dial(t)
	val := strings.Repeat("v", 60<<10)
	for i := 0; i < 400 && tb.B.KVStats().WatchersDropped == 0; i++ {
		kvPut(t, c, "/kv/big.k", val)
	}
	// A few more changes right after the one watcher was dropped.
	for i := 0; i < 5; i++ {
		kvPut(t, c, "/kv/big.k", "small")
	}
	if n := tb.B.KVStats().WatchersDropped; n != 1 {
		t.Fatalf("one slow watcher dropped, but WatchersDropped (herald_kv_watchers_dropped_total) is %d", n)
	}
}
