package bridge_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridge_QueueAckTimeoutNotDuringOutage: a link outage alone does not
// dead-letter bridged messages ("a failure of the link alone never counts
// a delivery", docs/design.md). The bridge subscribes to its local queues
// with ack-timeout:0, so a queue with queues.ack_timeout (or a
// [[queues.policy]] one) does not take back the messages the bridge holds
// while the link is down.
//
// Before: the bridge subscribed with prefetch-count only; the queue's
// ack_timeout took the message back from the bridge every 200ms, counted a
// delivery each time and moved it to DLQ.orders after max_deliveries,
// while the bridge's core still held its copy and delivered it to the peer
// once it came up: the message was both dead-lettered and delivered.
func TestBridge_QueueAckTimeoutNotDuringOutage(t *testing.T) {
	a := testbroker.Start(t, func(c *appliance.Config) {
		c.Queues.AckTimeout = appliance.Duration{Duration: 200 * time.Millisecond}
		c.Queues.MaxDeliveries = 3
	})
	deadAddr := "127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	br := startBridge(t, a, stompBridge("to-b", "site-a", "out", deadAddr,
		appliance.BridgeMap{Local: "/queue/orders", Remote: "/queue/orders"}))
	sendAll(t, a.Dial(t), "/queue/orders", 0, 1, nil)
	time.Sleep(3 * time.Second) // the peer is down all along
	q, _ := a.B.Queue("orders")
	dlq, _ := a.B.Queue("DLQ.orders")
	if dlq.Messages != 0 || q.Messages != 1 {
		t.Errorf("after 3s of a peer outage: orders holds %d, DLQ.orders %d; want 1 and 0 (bridge %+v)", q.Messages, dlq.Messages, br.View().Directions[0])
	}
	// The peer comes up: the core still holds the message it was given
	// before the queue took it back.
	b := testbroker.Start(t, func(c *appliance.Config) { c.Stomp.Listen = deadAddr })
	deadline := time.Now().Add(10 * time.Second)
	for br.View().Directions[0].Confirmed < 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	pq, _ := b.B.Queue("orders")
	dlq, _ = a.B.Queue("DLQ.orders")
	t.Logf("once the peer is up: the peer's queue holds %d, A's DLQ.orders %d", pq.Messages, dlq.Messages)
	if pq.Messages == 1 && dlq.Messages == 1 {
		t.Errorf("the message is both dead-lettered at A and delivered to the peer")
	}
	if pq.Messages != 1 || dlq.Messages != 0 {
		t.Errorf("the peer's queue holds %d, A's DLQ.orders %d; want 1 and 0", pq.Messages, dlq.Messages)
	}
}
