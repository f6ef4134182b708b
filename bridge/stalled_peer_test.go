package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/bridge"
	"github.com/herald-mq/herald/internal/testbroker"
)

// stalling: a broker whose queues hold one message and, full, block the
// sender's session (which then does not read its socket) for 20s.
func stalling(c *appliance.Config) {
	c.Queues.MaxMessages = 1
	c.Queues.FullPolicy = "block"
	c.Queues.BlockTimeout = appliance.Duration{Duration: 20 * time.Second}
	c.Stomp.MaxBodyBytes = 4 << 20
}

// checkNotBlocked sends 32 messages of 2 MiB to src's queue, waits three
// ack timeouts and checks that the bridge counted a failure and closes
// at once.
func checkNotBlocked(t *testing.T, src *testbroker.Broker, queue string, br *bridge.Bridge) {
	t.Helper()
	pa := src.Dial(t)
	body := make([]byte, 2<<20)
	for range 32 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := pa.SendReceipt(ctx, queue, body); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	time.Sleep(3 * time.Second) // three ack timeouts
	d := br.View().Directions[0]
	t.Logf("after 3s: state %s, failures %d, in flight %d, confirmed %d, last error %q", d.State, d.Failures, d.InFlight, d.Confirmed, d.LastError)
	if d.Failures == 0 {
		t.Errorf("nothing confirmed for 3s with ack_timeout 1s, but no failure counted (state %s): the worker is blocked", d.State)
	}
	start := time.Now()
	br.Close()
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Close took %s", el.Round(100*time.Millisecond))
	}
}

func startStalled(t *testing.T, local *testbroker.Broker, cfg appliance.BridgeConfig) *bridge.Bridge {
	t.Helper()
	cfg.MaxInFlight = 32
	cfg.AckTimeout = appliance.Duration{Duration: time.Second}
	br, err := bridge.New(bridge.Options{Config: appliance.BridgeDefaults(cfg), LocalAddr: local.Addr, Logger: testLogger(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	br.Start()
	t.Cleanup(br.Close)
	waitUp(t, br)
	return br
}

// TestBridge_StalledPeerDoesNotBlockWorker: a write to a STOMP peer that
// has stopped reading its socket (its queue full, full_policy block) is
// given up after ack_timeout (the connection is closed): the link fails,
// and Close returns at once.
//
// Before: SendAsync, on the worker's goroutine, blocked once the socket's
// buffer was full, until the peer read again: the ack timeout (run by
// that goroutine) never fired, the view stayed "up" with no failure, and
// Close (heraldd's shutdown stops bridges first) waited for the peer's
// block_timeout (16.6s here).
func TestBridge_StalledPeerDoesNotBlockWorker(t *testing.T) {
	a := testbroker.Start(t, func(c *appliance.Config) { c.Stomp.MaxBodyBytes = 4 << 20 })
	b := testbroker.Start(t, stalling)
	br := startStalled(t, a, stompBridge("push-b", "site-a", "out", b.Addr, appliance.BridgeMap{Local: "/queue/orders", Remote: "/queue/from-a"}))
	checkNotBlocked(t, a, "/queue/orders", br)
}

// TestBridge_StalledLocalDoesNotBlockWorker: the same with direction in,
// where this appliance is the one that stops reading (the local queue the
// bridge fills is full, full_policy block).
func TestBridge_StalledLocalDoesNotBlockWorker(t *testing.T) {
	a := testbroker.Start(t, func(c *appliance.Config) { c.Stomp.MaxBodyBytes = 4 << 20 })
	b := testbroker.Start(t, stalling)
	br := startStalled(t, b, stompBridge("pull-a", "site-b", "in", a.Addr, appliance.BridgeMap{Local: "/queue/inbox", Remote: "/queue/outbox"}))
	checkNotBlocked(t, a, "/queue/outbox", br)
}
