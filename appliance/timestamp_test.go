package appliance_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// Every MESSAGE carries the broker's timestamp (ms since the epoch the SEND
// was accepted), never the publisher's; a queue message keeps it when it
// is redelivered after a restart.
func TestTimestamp_QueueKeptAcrossRestart(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Journal.Sync = "full" })
	p := tb.Dial(t)
	before := time.Now().UnixMilli()
	if _, err := p.SendReceipt(ctxT(t), "/queue/ts", []byte("a"), hdr("timestamp", "1")); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/ts", "client-individual")
	m := recv(t, sub)
	ts, err := strconv.ParseInt(m.Get("timestamp"), 10, 64)
	if err != nil || ts < before || ts > after {
		t.Fatalf("timestamp %q, want the broker's time of the SEND, %d to %d", m.Get("timestamp"), before, after)
	}
	n := 0
	for _, h := range m.Headers {
		if h.Key == "timestamp" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d timestamp headers, want 1 (the publisher's is replaced): %v", n, m.Headers)
	}
	time.Sleep(20 * time.Millisecond) // so that a new timestamp would differ
	tb.Restart()
	c2 := tb.Dial(t)
	sub2, _ := c2.Subscribe("/queue/ts", "client-individual")
	m2 := recv(t, sub2)
	if m2.Get("redelivered") != "true" || m2.Get("timestamp") != m.Get("timestamp") {
		t.Fatalf("after the restart: redelivered %q timestamp %q, want true and the original %q", m2.Get("redelivered"), m2.Get("timestamp"), m.Get("timestamp"))
	}
}

func TestTimestamp_Topic(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	sub, err := c.SubscribeReceipt(ctxT(t), "/topic/ts", "auto")
	if err != nil {
		t.Fatal(err)
	}
	p := tb.Dial(t)
	before := time.Now().UnixMilli()
	p.SendReceipt(ctxT(t), "/topic/ts", []byte("a"), hdr("timestamp", "1"))
	after := time.Now().UnixMilli()
	m := recv(t, sub)
	if ts, err := strconv.ParseInt(m.Get("timestamp"), 10, 64); err != nil || ts < before || ts > after {
		t.Fatalf("timestamp %q, want %d to %d", m.Get("timestamp"), before, after)
	}
}
