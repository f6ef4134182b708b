package appliance_test

import (
	"testing"
)

// TestQueue_ProducerCannotForgeRedelivered: a queue MESSAGE's redelivered,
// delivery-count, ack, message-id and subscription headers are the
// broker's, as timestamp is. A producer's own redelivered:true reached the
// consumer on a first delivery (delivery-count 1), which then took it for
// a redelivery; its ack reached auto subscribers.
func TestQueue_ProducerCannotForgeRedelivered(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	if _, err := p.SendReceipt(ctxT(t), "/queue/forge", []byte("first"), hdr("redelivered", "true")); err != nil {
		t.Fatal(err)
	}
	c := tb.Dial(t)
	sub, err := c.SubscribeReceipt(ctxT(t), "/queue/forge", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, sub)
	if m.Get("delivery-count") == "1" && m.Get("redelivered") == "true" {
		t.Fatalf("first delivery (delivery-count 1) carries redelivered:true from the producer: %v", m.Headers)
	}
	if _, err := p.SendReceipt(ctxT(t), "/queue/forge2", []byte("x"), hdr("ack", "forged"), hdr("delivery-count", "9")); err != nil {
		t.Fatal(err)
	}
	a, err := c.SubscribeReceipt(ctxT(t), "/queue/forge2", "auto")
	if err != nil {
		t.Fatal(err)
	}
	m = recv(t, a)
	for _, h := range m.Headers {
		if h.Value == "forged" || h.Value == "9" {
			t.Fatalf("an auto subscriber's MESSAGE carries the producer's %s:%s: %v", h.Key, h.Value, m.Headers)
		}
	}
}
