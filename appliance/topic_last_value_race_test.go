package appliance_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// With topics.last_value and concurrent publishers, the kept last value is
// the last message every subscriber got (it could differ: the fan-out ran
// after the value was set, outside any per-topic order; seen within about
// 5,000 rounds). Rounds for 4 s.
func TestTopic_LastValueMatchesLastDelivered(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Topics.LastValue = true })
	c := tb.Dial(t)
	sub, err := c.SubscribeReceipt(ctxT(t), "/topic/lv", "auto")
	if err != nil {
		t.Fatal(err)
	}
	c2 := tb.Dial(t)
	const pubs = 6
	deadline := time.Now().Add(4 * time.Second)
	for round := 0; time.Now().Before(deadline); round++ {
		var start, wg sync.WaitGroup
		start.Add(1)
		for g := 0; g < pubs; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.Wait()
				tb.B.PublishForTest("lv", []byte(fmt.Sprintf("r%d-g%d", round, g)))
			}()
		}
		start.Done()
		wg.Wait()
		var last *stomp.Frame
		for i := 0; i < pubs; i++ {
			last = recv(t, sub)
		}
		s2, err := c2.SubscribeReceipt(ctxT(t), "/topic/lv", "auto")
		if err != nil {
			t.Fatal(err)
		}
		lv := recv(t, s2)
		s2.Unsubscribe(ctxT(t))
		if lv.Get("last-value") != "true" {
			t.Fatalf("no last value: %v", lv.Headers)
		}
		if string(lv.Body) != string(last.Body) {
			t.Fatalf("round %d: last value %q (%s), but the subscriber's last message was %q (%s)",
				round, lv.Body, lv.Get("message-id"), last.Body, last.Get("message-id"))
		}
	}
}
