package appliance_test

import (
	"context"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// TestDeleteQueue_AbandonedClaim: herald queue delete of a queue whose
// last consumer left while a delivery's claim was being committed purges
// that message too, once the claim completes. The purge kept it (in
// flight), the delete reported success all the same, and the message's
// row stayed in the journal: after a restart the deleted queue was back
// with it.
func TestDeleteQueue_AbandonedClaim(t *testing.T) {
	tb, g := startGated(t, nil, func(op appliance.Op) bool { return op.Kind == appliance.OpClaim }, true)
	c := tb.Dial(t)
	if _, err := c.SubscribeReceipt(ctxT(t), "/queue/del", "client-individual"); err != nil {
		t.Fatal(err)
	}
	p := tb.Dial(t)
	if _, err := p.SendReceipt(ctxT(t), "/queue/del", []byte("m")); err != nil {
		t.Fatal(err)
	}
	g.await(t, "the delivery's claim")
	c.Close() // the consumer leaves while its delivery's claim commits
	waitQueue(t, tb, "del", "no consumer", func(v appliance.QueueView) bool { return v.Consumers == 0 })
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		n, err := tb.B.DeleteQueue(context.Background(), "del")
		done <- res{n, err}
	}()
	waitFor(t, 5*time.Second, "the queue forgotten by the delete", func() bool {
		_, ok := tb.B.Queue("del")
		return !ok
	})
	g.open()
	r := <-done
	if r.err != nil {
		t.Fatalf("delete: %v", r.err)
	}
	if r.n != 1 {
		t.Errorf("delete reported %d messages purged, want the 1 in flight", r.n)
	}
	tb.Restart()
	if v, ok := tb.B.Queue("del"); ok {
		t.Fatalf("queue deleted (delete reported success, %d purged) is back after a restart with %d messages", r.n, v.Messages)
	}
}
