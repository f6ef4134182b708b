package bridge_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridge_BackoffAfterConnect: a failure that follows every successful
// connection (here a message the stream refuses each time: larger than its
// max_msg_size) is retried with back-off doubling up to reconnect_max,
// not every reconnect_min. With reconnect_min 50ms and reconnect_max 1s,
// doubling allows about 8 attempts in 4s.
//
// Before: the core reset its failure count when the link came up, so
// every retry waited reconnect_min (some 75 attempts in 4s, each
// reconnecting and asking the cluster for stream info).
// TestCoreBackoffAfterConnect checks the rule in the core.
func TestBridge_BackoffAfterConnect(t *testing.T) {
	cl := natstest.Start(t, 1)
	_, js := natstest.Connect(t, cl.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "HERALD", Subjects: []string{"sites.a.orders"}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute, MaxMsgSize: 256,
	}); err != nil {
		t.Fatal(err)
	}
	a := testbroker.Start(t, nil)
	br := startBridge(t, a, oneNode(jsBridge("backbone", "site-a", "out", cl.URLs(),
		appliance.BridgeMap{Local: "/queue/orders", Remote: "sites.a.orders"}), "sites.a.orders"))
	waitUp(t, br)
	pa := a.Dial(t)
	if _, err := pa.SendReceipt(ctx, "/queue/orders", bytes.Repeat([]byte("x"), 1024)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	f0 := br.View().Directions[0].Failures
	if f0 == 0 {
		t.Fatalf("the stream took a message over its max_msg_size: the test does not exercise a refusal (%+v)", br.View().Directions[0])
	}
	time.Sleep(4 * time.Second)
	d := br.View().Directions[0]
	if n := d.Failures - f0; n > 12 {
		t.Errorf("%d failed attempts in 4s with reconnect_min 50ms, reconnect_max 1s: no back-off (reconnects %d, last error %q)", n, d.Reconnects, d.LastError)
	}
	t.Logf("%d failures in the first second, %d in the next 4s; last error %q", f0, d.Failures-f0, d.LastError)
}
