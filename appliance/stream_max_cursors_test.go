package appliance_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// TestStream_MaxCursors: durable cursors are client-grown state (one per
// x-stream-consumer name ACKed under, kept until the stream is deleted);
// past streams.max_cursors a SUBSCRIBE naming a new one gets an ERROR
// naming the setting, while the names that exist keep working. Before the
// bound one client made as many as it liked.
func TestStream_MaxCursors(t *testing.T) {
	const max = 5
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Streams.MaxCursors = max })
	c := tb.Dial(t)
	appendN(t, c, "/stream/cur", 0, 3)
	name := func(i int) string { return fmt.Sprintf("%s%03d", strings.Repeat("c", 200), i) }
	for i := range max {
		sub, err := c.SubscribeReceipt(ctxT(t), "/stream/cur", "client", hdr("x-stream-consumer", name(i)), hdr("x-stream-offset", "first"))
		if err != nil {
			t.Fatalf("cursor %d of %d: %v", i+1, max, err)
		}
		ackNow(t, c, "ACK", recv(t, sub))
		if err := sub.Unsubscribe(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if v := streamView(t, tb, "cur"); len(v.Cursors) != max {
		t.Fatalf("%d cursors, want %d", len(v.Cursors), max)
	}
	// An existing name resumes where it was.
	sub, err := c.SubscribeReceipt(ctxT(t), "/stream/cur", "client", hdr("x-stream-consumer", name(0)))
	if err != nil {
		t.Fatalf("existing cursor at the bound: %v", err)
	}
	if m := recv(t, sub); m.Get("x-stream-offset") != "1" {
		t.Fatalf("existing cursor resumed at %s, want 1", m.Get("x-stream-offset"))
	}
	if err := sub.Unsubscribe(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// A new one is refused, naming the setting.
	_, err = c.SubscribeReceipt(ctxT(t), "/stream/cur", "client", hdr("x-stream-consumer", name(max)))
	if err == nil || !strings.Contains(err.Error(), "streams.max_cursors") {
		t.Fatalf("cursor %d past streams.max_cursors=%d: %v, want an ERROR naming streams.max_cursors", max+1, max, err)
	}
	if v := streamView(t, tb, "cur"); len(v.Cursors) != max {
		t.Fatalf("%d cursors after the refusal, want %d", len(v.Cursors), max)
	}
}
