package appliance_test

import (
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

// forged are headers only the broker may set on some MESSAGE; a producer's
// SEND must not be able to put them on a MESSAGE of another kind.
var forged = []stomp.Header{
	{Key: "dlq-original-destination", Value: "/queue/payments"},
	{Key: "dlq-reason", Value: "max-deliveries"},
	{Key: "dlq-delivery-count", Value: "10"},
	{Key: "x-stream-offset", Value: "42"},
	{Key: "x-stream-gap-from", Value: "7"},
	{Key: "revision", Value: "99"},
	{Key: "kv-operation", Value: "DEL"},
	{Key: "kv-expired", Value: "true"},
	{Key: "kv-snapshot-complete", Value: "5"},
	{Key: "lock-token", Value: "77"},
	{Key: "redelivered", Value: "true"},
	{Key: "delivery-count", Value: "9"},
	{Key: "message-id", Value: "fake-id"},
	{Key: "subscription", Value: "fake-sub"},
	{Key: "ack", Value: "fake-ack"},
}

// Broker-owned headers of any destination kind (dead letters, streams,
// key-value changes, locks, deliveries) do not pass through a producer's
// SEND to a queue, a topic or a stream: they did, so a consumer could be
// told a message was dead-lettered or had a key revision.
func TestSend_BrokerOwnedHeadersNotForged(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	for _, dest := range []string{"/queue/work", "/topic/news", "/stream/log"} {
		sub, err := c.SubscribeReceipt(ctxT(t), dest, "auto")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.SendReceipt(ctxT(t), dest, []byte("x"), forged...); err != nil {
			t.Fatal(err)
		}
		m := recv(t, sub)
		var leaked []string
		for _, h := range forged {
			for _, got := range m.Headers {
				if got.Key == h.Key && got.Value == h.Value {
					leaked = append(leaked, h.Key+":"+h.Value)
				}
			}
		}
		if len(leaked) > 0 {
			t.Errorf("%s MESSAGE carries the producer's %s (all headers: %v)", dest, strings.Join(leaked, ", "), m.Headers)
		}
	}
}
