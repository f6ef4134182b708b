package bridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/herald-mq/herald/appliance"
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
