package bridge_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridge_TopicNATSRefusesDoesNotStopQueues: a topic message is best
// effort: one NATS refuses before it is sent (a subject with a space,
// legal in a Herald topic name; a body over the server's max_payload) is
// dropped and counted, and the queue messages behind it go out; the link
// does not fail.
//
// Before: such a publish failed the link on every attempt, and the topic
// message stayed first in the window: the queue behind it never went out.
func TestBridge_TopicNATSRefusesDoesNotStopQueues(t *testing.T) {
	cl := natstest.Start(t, 1)
	a := testbroker.Start(t, nil)
	cfg := oneNode(jsBridge("backbone", "site-a", "out", cl.URLs(),
		appliance.BridgeMap{Local: "/topic/news.>", Remote: "sites.a.news.>"},
		appliance.BridgeMap{Local: "/queue/orders", Remote: "sites.a.orders"}), "sites.a.news.>", "sites.a.orders")
	br := startBridge(t, a, cfg)
	waitUp(t, br)
	_, js := natstest.Connect(t, cl.URLs())
	pa := a.Dial(t)
	sendAll(t, pa, "/topic/news.good day", 0, 1, nil) // a valid Herald topic
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pa.SendReceipt(ctx, "/topic/news.big", bytes.Repeat([]byte("x"), 2<<20)); err != nil { // over NATS's 1 MiB
		t.Fatal(err)
	}
	sendAll(t, pa, "/topic/news.fine", 0, 1, nil)
	sendAll(t, pa, "/queue/orders", 0, 5, nil)
	if got := waitStreamCount(t, js, "sites.a.orders", 5, 10*time.Second); got != 5 {
		t.Errorf("stream holds %d of the 5 queue messages: the out direction is stuck behind a best-effort topic message; view %+v", got, br.View().Directions[0])
	}
	if got := waitStreamCount(t, js, "sites.a.news.fine", 1, 5*time.Second); got != 1 {
		t.Errorf("stream holds %d messages on sites.a.news.fine, want 1", got)
	}
	d := br.View().Directions[0]
	if d.Dropped != 2 || d.Failures != 0 {
		t.Errorf("dropped %d, want 2; failures %d, want 0 (last error %q)", d.Dropped, d.Failures, d.LastError)
	}
}
