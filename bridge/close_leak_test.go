package bridge_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/bridge"
	"github.com/herald-mq/herald/internal/testbroker"
)

// bridgeGoroutines returns the stacks of the goroutines running code of
// package bridge (not its tests).
func bridgeGoroutines() []string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "herald/bridge.") {
			out = append(out, g)
		}
	}
	return out
}

// TestBridge_CloseLeavesNoGoroutine: a STOMP peer that takes SENDs but
// answers none (its queue full, full_policy block) keeps every forward
// waiting for its RECEIPT; each ack timeout the link fails and the window
// goes again on the same connection, so more forwards wait than the
// worker's results channel holds. Close closes the connection, which ends
// them all: none may stay blocked reporting a result nobody reads.
//
// Before: each waiting forward's goroutine sent its result to the results
// channel without regard to Close; those past its capacity blocked
// forever.
func TestBridge_CloseLeavesNoGoroutine(t *testing.T) {
	a := testbroker.Start(t, nil)
	b := testbroker.Start(t, func(c *appliance.Config) {
		c.Queues.MaxMessages = 1
		c.Queues.FullPolicy = "block"
		c.Queues.BlockTimeout = appliance.Duration{Duration: 60 * time.Second}
	})
	cfg := stompBridge("push-b", "site-a", "out", b.Addr, appliance.BridgeMap{Local: "/queue/orders", Remote: "/queue/from-a"})
	cfg.MaxInFlight = 8 // a results channel of 2*8+16
	cfg.AckTimeout = appliance.Duration{Duration: 200 * time.Millisecond}
	cfg.ReconnectMax = appliance.Duration{Duration: 50 * time.Millisecond}
	br, err := bridge.New(bridge.Options{Config: appliance.BridgeDefaults(cfg), LocalAddr: a.Addr, Logger: testLogger(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	br.Start()
	t.Cleanup(br.Close)
	waitUp(t, br)
	sendAll(t, a.Dial(t), "/queue/orders", 0, 20, nil)
	// Eight windows of 8 left waiting: 64 forwards, past the channel's 32.
	deadline := time.Now().Add(20 * time.Second)
	for br.View().Directions[0].Resent < 8*8 {
		if time.Now().After(deadline) {
			t.Fatalf("the window did not go again 8 times within 20s: %+v", br.View().Directions[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	br.Close()
	deadline = time.Now().Add(3 * time.Second)
	for {
		left := bridgeGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of package bridge still running 3s after Close; the first:\n%s", len(left), left[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
}
