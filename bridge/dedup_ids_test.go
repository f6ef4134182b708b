package bridge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/bridge"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridge_TopicIDsUniqueAcrossRestarts: topic messages go out with
// Nats-Msg-Id APPLIANCE_ID:tBOOT.N, BOOT naming the bridge's run, so a
// bridge restarted within the stream's duplicate window does not send its
// new topic messages under the ids of the previous run's.
//
// Before: the id was APPLIANCE_ID:tN, N a per-process counter starting at
// 1. After a restart within the duplicate window (2 minutes for a stream
// the bridge creates), JetStream answered "duplicate" to the new run's
// topic messages and did not store them, and the bridge counted them as
// carried.
func TestBridge_TopicIDsUniqueAcrossRestarts(t *testing.T) {
	cl := natstest.Start(t, 1)
	a := testbroker.Start(t, nil)
	cfg := oneNode(jsBridge("backbone", "site-a", "out", cl.URLs(),
		appliance.BridgeMap{Local: "/topic/news", Remote: "sites.a.news"}), "sites.a.news")
	_, js := natstest.Connect(t, cl.URLs())
	pa := a.Dial(t)

	br1 := startBridge(t, a, cfg)
	waitUp(t, br1)
	sendAll(t, pa, "/topic/news", 0, 3, nil)
	if got := waitStreamCount(t, js, "sites.a.news", 3, 10*time.Second); got != 3 {
		t.Fatalf("first run: stream holds %d topic messages, want 3", got)
	}
	br1.Close() // heraldd restarted (or the bridge's process)

	br2 := startBridge(t, a, cfg)
	waitUp(t, br2)
	sendAll(t, pa, "/topic/news", 3, 3, nil)
	deadline := time.Now().Add(10 * time.Second)
	for br2.View().Directions[0].Confirmed < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	got := waitStreamCount(t, js, "sites.a.news", 6, 3*time.Second)
	d := br2.View().Directions[0]
	if got != 6 {
		t.Errorf("stream holds %d topic messages after the restart, want 6: the second run's were taken as duplicates of the first's (confirmed %d, dropped %d)", got, d.Confirmed, d.Dropped)
	}
	// The ids still start with the appliance id (the out direction tells
	// its own messages from another writer's by it).
	st, err := js.Stream(t.Context(), "HERALD")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(t.Context(), "sites.a.news")
	if err != nil {
		t.Fatal(err)
	}
	if id := m.Header.Get(nats.MsgIdHdr); !strings.HasPrefix(id, "site-a:t") {
		t.Errorf("a topic message's Nats-Msg-Id is %q, want site-a:tBOOT.N", id)
	}
}

// TestBridge_InDedupIDsNameBridgeAndStream: direction in gives each
// message the dedup-id js:BRIDGE:STREAM:CREATED:SEQUENCE, so two bridges
// from two JetStream clusters whose streams have the same name (the
// documented example name HERALD) bring their messages into one local
// queue without one being taken for a copy of the other.
//
// Before: the id was js:STREAM:SEQUENCE. The second cluster's message 1
// was refused by the queue's dedup window as a copy of the first's, and
// acknowledged at its source: lost.
func TestBridge_InDedupIDsNameBridgeAndStream(t *testing.T) {
	cl1 := natstest.Start(t, 1)
	cl2 := natstest.Start(t, 1)
	c := testbroker.Start(t, nil)
	in1 := startBridge(t, c, oneNode(jsBridge("from-eu", "site-c", "in", cl1.URLs(),
		appliance.BridgeMap{Local: "/queue/inbox", Remote: "sites.eu.orders"}), "sites.eu.orders"))
	in2 := startBridge(t, c, oneNode(jsBridge("from-us", "site-c", "in", cl2.URLs(),
		appliance.BridgeMap{Local: "/queue/inbox", Remote: "sites.us.orders"}), "sites.us.orders"))
	waitUp(t, in1, in2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, js1 := natstest.Connect(t, cl1.URLs())
	_, js2 := natstest.Connect(t, cl2.URLs())
	if _, err := js1.Publish(ctx, "sites.eu.orders", []byte("eu")); err != nil {
		t.Fatal(err)
	}
	if _, err := js2.Publish(ctx, "sites.us.orders", []byte("us")); err != nil {
		t.Fatal(err)
	}
	for _, br := range []*bridge.Bridge{in1, in2} {
		deadline := time.Now().Add(10 * time.Second)
		for br.View().Directions[0].Confirmed < 1 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(500 * time.Millisecond)
	q, _ := c.B.Queue("inbox")
	if q.Messages != 2 {
		t.Errorf("inbox holds %d messages, want 2 (one from each cluster); confirmed: %d and %d",
			q.Messages, in1.View().Directions[0].Confirmed, in2.View().Directions[0].Confirmed)
	}
	// The ids, as the local queue got them.
	sub, err := c.Dial(t).SubscribeReceipt(ctx, "/queue/inbox", "auto")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for range 2 {
		select {
		case f := <-sub.C():
			id := f.Get("dedup-id")
			if !strings.HasPrefix(id, "js:from-eu:HERALD:") && !strings.HasPrefix(id, "js:from-us:HERALD:") || !strings.HasSuffix(id, ":1") {
				t.Errorf("dedup-id %q, want js:BRIDGE:HERALD:CREATED:1", id)
			}
			ids[id] = true
		case <-ctx.Done():
			t.Fatal("the messages did not come")
		}
	}
	if len(ids) != 2 {
		t.Errorf("dedup-ids %v: want two", ids)
	}
}
