package appliance_test

import (
	"context"
	"errors"
	"fmt"
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

// A purge the broker's shutdown interrupts returns at once, saying so,
// instead of waiting out its caller's deadline for a next part nothing will
// submit; what it deleted stays deleted and the rest is there after the
// restart, counted right.
func TestQueue_PurgeStopsAtShutdown(t *testing.T) {
	fj := &faultJournal{}
	tb := testbroker.StartTuned(t, nil, func(jc *journal.Config) { jc.PurgeRows = 5 },
		func(j appliance.Journal) appliance.Journal { fj.Journal = j; return fj })
	fj.setFail(func(b *appliance.Batch) bool {
		if hasOp(b, appliance.OpPurge) {
			time.Sleep(5 * time.Millisecond) // 200 parts: a second at least
		}
		return false
	})
	sendAll(t, tb.Dial(t), "/queue/ps", 1000, func(i int) string { return "m" + strconv.Itoa(i) })
	type result struct {
		n   int
		err error
		at  time.Time
	}
	res := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		n, err := tb.B.Purge(ctx, "ps")
		res <- result{n, err, time.Now()}
	}()
	waitFor(t, 5*time.Second, "the purge under way", func() bool {
		v, _ := tb.B.Queue("ps")
		return v.Purging && v.PurgeDeleted > 0
	})
	stopped := time.Now()
	tb.Restart()
	r := <-res
	if r.err == nil || !strings.Contains(r.err.Error(), "broker closed") || !strings.Contains(r.err.Error(), "purge again") {
		t.Fatalf("purge interrupted by the shutdown: %d, %v; want an error saying the broker closed", r.n, r.err)
	}
	if d := r.at.Sub(stopped); d > 5*time.Second {
		t.Fatalf("the interrupted purge returned %v after the shutdown began", d)
	}
	v, _ := tb.B.Queue("ps")
	if v.Messages > 1000-r.n || v.Messages == 0 {
		t.Fatalf("after the restart %d messages; the purge said at least %d of 1000 deleted, and not all", v.Messages, r.n)
	}
	assertRecount(t, tb)
}

// A requeue out of a dead-letter queue whose purge is running is refused
// (ErrPurging): its journal reads would race the purge's parts, and moves
// of rows a part deleted failed with "message not found". Reads that a
// purge part or another requeue made stale meanwhile are read again
// (queuecore.MoveOut's readEpoch; the simulation splits reads from moves).
func TestQueue_RequeueRefusedDuringPurge(t *testing.T) {
	fj := &faultJournal{}
	tb := testbroker.StartTuned(t, nil, func(jc *journal.Config) { jc.PurgeRows = 5 },
		func(j appliance.Journal) appliance.Journal { fj.Journal = j; return fj })
	gate := make(chan struct{})
	var first atomic.Bool
	fj.setFail(func(b *appliance.Batch) bool {
		if hasOp(b, appliance.OpPurge) && first.CompareAndSwap(false, true) {
			<-gate // the purge's first part waits for the test
		}
		return false
	})
	c := tb.Dial(t)
	sendAll(t, c, "/queue/DLQ.jobs", 20, func(i int) string { return "d" + strconv.Itoa(i) })
	res := make(chan error, 1)
	go func() {
		n, err := tb.B.Purge(ctxT(t), "DLQ.jobs")
		if err == nil && n != 20 {
			err = fmt.Errorf("purged %d, want 20", n)
		}
		res <- err
	}()
	waitFor(t, 5*time.Second, "the purge under way", func() bool {
		v, _ := tb.B.Queue("DLQ.jobs")
		return v.Purging
	})
	n, err := tb.B.Requeue(ctxT(t), "jobs", 0)
	if !errors.Is(err, appliance.ErrPurging) || n != 0 || !strings.Contains(err.Error(), "wait for it and retry") {
		t.Fatalf("requeue while the DLQ's purge runs: %d, %v; want ErrPurging", n, err)
	}
	close(gate)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	sendAll(t, c, "/queue/DLQ.jobs", 5, func(i int) string { return "e" + strconv.Itoa(i) })
	if n, err := tb.B.Requeue(ctxT(t), "jobs", 0); err != nil || n != 5 {
		t.Fatalf("requeue after the purge: %d, %v; want 5", n, err)
	}
	if v, _ := tb.B.Queue("jobs"); v.Messages != 5 {
		t.Fatalf("jobs holds %d, want 5", v.Messages)
	}
	assertRecount(t, tb)
}

// gatedLoads holds the at-th journal read of queue q until gate closes
// (closing in when it begins).
type gatedLoads struct {
	appliance.Journal
	q        string
	n        atomic.Int32
	at       int32
	in, gate chan struct{}
}

func (j *gatedLoads) Load(ctx context.Context, q string, after uint64, limit int) ([]*appliance.Message, error) {
	if q == j.q && j.n.Add(1) == j.at {
		close(j.in)
		<-j.gate
	}
	return j.Journal.Load(ctx, q, after, limit)
}

// A requeue holds its DLQ's queue across its reads: when the DLQ was
// deleted and a new message came to the name's new queue between two
// reads, the second read found it and the old queue's core moved it. It
// was then in both queues by the broker's count (delivered twice). A
// requeue now stops when its DLQ was deleted meanwhile, saying so.
func TestQueue_RequeueStopsWhenItsDLQIsDeleted(t *testing.T) {
	gj := &gatedLoads{q: "DLQ.jobs", at: 2, in: make(chan struct{}), gate: make(chan struct{})}
	tb := testbroker.StartTuned(t, nil, nil, func(j appliance.Journal) appliance.Journal { gj.Journal = j; return gj })
	c := tb.Dial(t)
	sendAll(t, c, "/queue/DLQ.jobs", 1, func(int) string { return "a0" })
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	go func() {
		n, err := tb.B.Requeue(ctxT(t), "jobs", 0)
		res <- result{n, err}
	}()
	<-gj.in // its second read: a0 moved, the DLQ empty
	if n, err := tb.B.DeleteQueue(ctxT(t), "DLQ.jobs"); err != nil || n != 0 {
		t.Fatalf("delete the empty DLQ: %d, %v", n, err)
	}
	sendAll(t, c, "/queue/DLQ.jobs", 1, func(int) string { return "x0" })
	close(gj.gate)
	r := <-res
	if r.n != 1 || !errors.Is(r.err, appliance.ErrNoQueue) || !strings.Contains(r.err.Error(), "deleted while the requeue ran") {
		t.Fatalf("requeue whose DLQ was deleted meanwhile: %d, %v; want 1 moved and an error saying so", r.n, r.err)
	}
	if v, _ := tb.B.Queue("jobs"); v.Messages != 1 {
		t.Fatalf("jobs holds %d, want a0 alone", v.Messages)
	}
	sub, err := tb.Dial(t).SubscribeReceipt(ctxT(t), "/queue/DLQ.jobs", "auto")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, bodies(t, sub, 1), []string{"x0"})
	assertRecount(t, tb)
}
