package appliance_test

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/testbroker"
	"github.com/herald-mq/herald/journal"
)

// A purge is a run of journal batches of at most PurgeRows messages each,
// not one transaction that holds up every other writer: a batch that
// fails ends it with what the batches before it deleted (the error says
// how many), the queue holds exactly the rest, a purge again deletes it,
// the messages in flight stay throughout, and a restart brings back
// nothing purged. The queue's memory window is smaller than the queue, so
// the purge runs over messages never paged in.
func TestQueue_PurgeInParts(t *testing.T) {
	fj := &faultJournal{}
	var purgeBatches, failAt atomic.Int64
	var during atomic.Pointer[appliance.QueueView] // the queue as the third batch of a purge is submitted
	var tb *testBroker
	tb = testbroker.StartTuned(t, func(c *appliance.Config) { c.Queues.MemoryWindow = 20 },
		func(jc *journal.Config) { jc.PurgeRows = 10 },
		func(j appliance.Journal) appliance.Journal { fj.Journal = j; return fj })
	fj.setFail(func(b *appliance.Batch) bool {
		if !hasOp(b, appliance.OpPurge) {
			return false
		}
		n := purgeBatches.Add(1)
		if n == 3 {
			v, _ := tb.B.Queue("pp")
			during.Store(&v)
		}
		return n == failAt.Load()
	})
	c := tb.Dial(t)
	sendAll(t, c, "/queue/pp", 100, func(i int) string { return "m" + strconv.Itoa(i) })
	held := tb.Dial(t)
	sub, _ := held.Subscribe("/queue/pp", "client-individual", hdr("prefetch-count", "3"))
	for i := range 3 {
		if f := recv(t, sub); string(f.Body) != "m"+strconv.Itoa(i) {
			t.Fatalf("got %q, want m%d", f.Body, i)
		}
	}

	// The fourth batch fails: the first three deleted 7 (3 of its 10 in
	// flight), 10 and 10.
	failAt.Store(4)
	n, err := tb.B.Purge(ctxT(t), "pp")
	if err == nil || n != 27 || !strings.Contains(err.Error(), "27 messages were deleted") {
		t.Fatalf("purge with its 4th batch failing: %d, %v; want 27 and an error saying so", n, err)
	}
	if got := purgeBatches.Load(); got != 4 {
		t.Fatalf("%d purge batches before the failure, want 4", got)
	}
	if v, _ := tb.B.Queue("pp"); v.Messages != 73 || v.InFlight != 3 {
		t.Fatalf("after the failed purge: messages %d in flight %d, want 73 and 3", v.Messages, v.InFlight)
	}
	assertRecount(t, tb)

	// Again: 70 more, in ceil(73/10) batches (the kept rows count in a
	// batch's 10).
	purgeBatches.Store(0)
	failAt.Store(0)
	during.Store(nil)
	if n, err := tb.B.Purge(ctxT(t), "pp"); err != nil || n != 70 {
		t.Fatalf("purge: %d, %v; want 70", n, err)
	}
	if got := purgeBatches.Load(); got != 8 {
		t.Fatalf("%d purge batches for 73 rows, want 8", got)
	}
	// Its view as the third batch went: two had deleted 7 and 10.
	if v := during.Load(); v == nil || !v.Purging || v.PurgeDeleted != 17 || v.Messages != 56 {
		t.Fatalf("queue during the purge: %+v; want purging, 17 deleted, 56 left", v)
	}
	if v, _ := tb.B.Queue("pp"); v.Purging || v.PurgeDeleted != 0 {
		t.Fatalf("after the purge: purging %v, %d deleted; want false, 0", v.Purging, v.PurgeDeleted)
	}
	sendAll(t, c, "/queue/pp", 2, func(i int) string { return "n" + strconv.Itoa(i) })
	assertRecount(t, tb)
	held.Close()
	tb.Restart()
	c2 := tb.Dial(t)
	sub2, err := c2.SubscribeReceipt(ctxT(t), "/queue/pp", "auto")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, bodies(t, sub2, 5), []string{"m0", "m1", "m2", "n0", "n1"})
	expectNone(t, sub2, 100*time.Millisecond)
}
