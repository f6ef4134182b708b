package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridge_LastValueNotReplayedAsNew: with topics.last_value, the
// bridge does not forward the last value the appliance gives each new
// subscription first (marked last-value:true): after a restart of the
// bridge, the far side gets only what is published since.
//
// Before: the bridge stripped the mark (carried) and sent the old value
// out as a new message at each start and each local reconnection: the far
// side's subscribers got an old message again.
func TestBridge_LastValueNotReplayedAsNew(t *testing.T) {
	a := testbroker.Start(t, func(c *appliance.Config) { c.Topics.LastValue = true })
	b := testbroker.Start(t, nil)
	cfg := stompBridge("push-b", "site-a", "out", b.Addr, appliance.BridgeMap{Local: "/topic/prices", Remote: "/topic/prices"})
	cb := b.Dial(t)
	sub, err := cb.SubscribeReceipt(context.Background(), "/topic/prices", "auto")
	if err != nil {
		t.Fatal(err)
	}
	br1 := startBridge(t, a, cfg)
	waitUp(t, br1)
	pa := a.Dial(t)
	sendAll(t, pa, "/topic/prices", 0, 1, nil)
	select {
	case f := <-sub.C():
		if string(f.Body) != "0" {
			t.Fatalf("B got %q, want \"0\"", f.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the topic message did not reach B")
	}
	br1.Close()
	br2 := startBridge(t, a, cfg)
	waitUp(t, br2)
	select {
	case f := <-sub.C():
		t.Errorf("B got %q again after the bridge restarted, nothing was published (headers %v)", f.Body, f.Headers)
	case <-time.After(2 * time.Second):
	}
	// What is published since still goes.
	sendAll(t, pa, "/topic/prices", 1, 1, nil)
	select {
	case f := <-sub.C():
		if string(f.Body) != "1" {
			t.Errorf("B got %q, want \"1\"", f.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a topic message published after the restart did not reach B")
	}
}
