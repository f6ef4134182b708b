package appliance_test

import (
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

// A late ACK from the consumer whose attempt timed out, after the message
// went to another consumer: ignored, and counted on the queue too.
func TestQueue_StaleAckFromFormerHolderCountedOnQueue(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	sendN(t, p, "/queue/st2", 1, "s")
	a := tb.Dial(t)
	subA, _ := a.SubscribeReceipt(ctxT(t), "/queue/st2", "client-individual", hdr("ack-timeout", "100"), hdr("prefetch-count", "1"))
	m1 := recv(t, subA)
	b := tb.Dial(t)
	subB, _ := b.SubscribeReceipt(ctxT(t), "/queue/st2", "client-individual", hdr("prefetch-count", "1"))
	m2 := recv(t, subB) // after A's timeouts, round robin hands it to B
	if string(m2.Body) != "s0" || m2.Get("delivery-count") == "1" {
		t.Fatalf("B got %q delivery-count %s, want s0 redelivered", m2.Body, m2.Get("delivery-count"))
	}
	before, _ := tb.B.Queue("st2")
	statsBefore := tb.B.Stats().StaleAcks
	if _, err := a.Request(ctxT(t), stomp.NewFrame("ACK", "id", m1.Get("ack"))); err != nil {
		t.Fatalf("stale ACK: %v", err)
	}
	after, _ := tb.B.Queue("st2")
	if got := tb.B.Stats().StaleAcks - statsBefore; got != 1 {
		t.Fatalf("broker stale_acks_total rose by %d, want 1", got)
	}
	if got := after.StaleAcks - before.StaleAcks; got != 1 {
		t.Fatalf("queue st2 stale_acks_total rose by %d, want 1 (the former holder's ACK of attempt 1)", got)
	}
	if after.Acked != 0 || after.InFlight != 1 {
		t.Fatalf("got acked %d, in flight %d; want 0, 1", after.Acked, after.InFlight)
	}
}
