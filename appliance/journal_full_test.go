package appliance_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testbroker"
)

// With the journal's writer held and its intake full (more pipelined SENDs
// than it queues), and a client-ack consumer whose deliveries need claims
// from the completions, nothing deadlocks: once the writer goes on, every
// RECEIPT and every MESSAGE arrives. (Completions used to submit claims
// themselves and could block on the full intake while the writer waited
// for them.)
func TestJournal_FullIntakeNoDeadlock(t *testing.T) {
	var mu sync.Mutex
	gate := make(chan struct{})
	held := false
	tb := testbroker.StartWith(t, nil, func(int, time.Duration) {
		mu.Lock()
		g, h := gate, held
		mu.Unlock()
		if h {
			<-g
		}
	})
	cons := tb.Dial(t, func(o *client.Options) { o.SubscriptionBuffer = 20000 })
	sub, err := cons.SubscribeReceipt(ctxT(t), "/queue/full", "client-individual", hdr("prefetch-count", "65535"))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	held = true
	mu.Unlock()
	const producers, each = 4, 3000 // 12,000 batches: more than the journal's intake of 8,192
	var results []<-chan client.Result
	for p := range producers {
		c := tb.Dial(t)
		for i := range each {
			ch, err := c.SendAsync("/queue/full", []byte(strconv.Itoa(p*each+i)))
			if err != nil {
				t.Fatal(err)
			}
			results = append(results, ch)
		}
	}
	// Let the sessions fill the intake while the writer is held.
	time.Sleep(500 * time.Millisecond) // pacing only: nothing can complete meanwhile
	mu.Lock()
	held = false
	close(gate)
	mu.Unlock()
	deadline := time.After(60 * time.Second)
	for i, ch := range results {
		select {
		case r := <-ch:
			if r.Err != nil {
				t.Fatalf("send %d: %v", i, r.Err)
			}
		case <-deadline:
			t.Fatalf("only %d of %d RECEIPTs within 60 s after the writer went on: stalled", i, len(results))
		}
	}
	for i := range producers * each {
		select {
		case <-sub.C():
		case <-deadline:
			t.Fatalf("only %d of %d MESSAGEs within 60 s", i, producers*each)
		}
	}
}
