package appliance_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// TestTempQueue_NameBytesBounded: the temporary-queue names the broker
// remembers are bounded in bytes, per connection and for the broker. A
// reply-to /temp-queue/NAME is a queue name like a destination's, at most
// 255 bytes (the header line allowed 16 KiB: queues.max_queues names of
// 16 KiB, 160 MiB per connection outside the memory budget), and the names
// of all connections together are at most queues.max_queues (each
// connection could name that many: times stomp.max_connections).
func TestTempQueue_NameBytesBounded(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Queues.MaxQueues = 8 })
	name := func(conn, i int) stomp.Header {
		return stomp.Header{Key: "reply-to", Value: fmt.Sprintf("/temp-queue/c%d.%d", conn, i)}
	}

	long := tb.Dial(t)
	_, err := long.SendReceipt(ctxT(t), "/topic/nobody", nil, stomp.Header{Key: "reply-to", Value: "/temp-queue/" + strings.Repeat("x", 10000)})
	if err == nil || !strings.Contains(err.Error(), "255 bytes") {
		t.Fatalf("a reply-to naming a temporary queue of 10,000 bytes: %v, want an ERROR saying names are at most 255 bytes", err)
	}
	if n := tb.B.TempClaims(); n != 0 {
		t.Fatalf("the broker remembers %d temporary-queue names after the refused one, want 0", n)
	}
	most := tb.Dial(t)
	if _, err := most.SendReceipt(ctxT(t), "/topic/nobody", nil, stomp.Header{Key: "reply-to", Value: "/temp-queue/" + strings.Repeat("x", 255)}); err != nil {
		t.Fatalf("a reply-to naming a temporary queue of 255 bytes: %v", err)
	}
	most.Close()
	waitFor(t, 5*time.Second, "the 255-byte name is forgotten with its connection", func() bool { return tb.B.TempClaims() == 0 })

	// 3 + 3 + 2 names on three connections: 8 in all, the most.
	var first interface{ Close() error }
	for ci, n := range []int{3, 3, 2} {
		cl := tb.Dial(t)
		if ci == 0 {
			first = cl
		}
		for i := range n {
			if _, err := cl.SendReceipt(ctxT(t), "/topic/nobody", nil, name(ci, i)); err != nil {
				t.Fatalf("connection %d, temporary-queue name %d: %v", ci, i, err)
			}
		}
	}
	last := tb.Dial(t)
	_, err = last.SendReceipt(ctxT(t), "/topic/nobody", nil, name(9, 0))
	if err == nil || !strings.Contains(err.Error(), "queues.max_queues") {
		t.Fatalf("a 9th temporary-queue name in the broker with queues.max_queues 8: %v, want an ERROR naming queues.max_queues", err)
	}
	if n := tb.B.TempClaims(); n != 8 {
		t.Fatalf("the broker remembers %d temporary-queue names, want 8", n)
	}
	// A connection's names go with it: room again.
	first.Close()
	waitFor(t, 5*time.Second, "the names of a closed connection are forgotten", func() bool { return tb.B.TempClaims() == 5 })
	if _, err := tb.Dial(t).SendReceipt(ctxT(t), "/topic/nobody", nil, name(10, 0)); err != nil {
		t.Fatalf("a name after a connection's names were freed: %v", err)
	}
}
