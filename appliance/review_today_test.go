package appliance_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// Claim (DeleteQueue, e03ee8c/888e134): while a queue is being deleted,
// what reaches it through the broker's own paths (a dead letter, a
// requeue, a SEND that resolved the queue before the delete) "is purged
// with it, or stays with it if the purge fails".
//
// A dead letter whose move commits after the purge loop found the queue
// empty (here: in the journal group after the last purge, ahead of the
// OpForgetDedup batch) lands in the queue DeleteQueue then drops: the
// message's row is in the journal under the DLQ's name, but the broker
// no longer knows it. The DLQ is gone (or empty) in memory, and the
// message is back only after a restart.
func TestReviewToday_DeleteDropsDeadLetterCommittedAfterPurge(t *testing.T) {
	const name = "review.today.dl"
	const dlq = "DLQ." + name
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Queues.MaxDeliveries = 1 })
	c := tb.Dial(t)
	for _, body := range []string{"first", "second"} {
		if _, err := c.SendReceipt(ctxT(t), "/queue/"+name, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := c.SubscribeReceipt(ctxT(t), "/queue/"+name, "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	m1 := recv(t, sub)
	if _, err := c.Request(ctxT(t), stomp.NewFrame(stomp.CmdNack, "id", m1.Get("ack"))); err != nil {
		t.Fatal(err)
	}
	if v, ok := tb.Queue(dlq); !ok || v.Messages != 1 {
		t.Fatalf("the first NACK did not dead-letter: %+v %v", v, ok)
	}
	m2 := recv(t, sub)

	// Hold the journal's write lock: the delete's purge waits for it, and
	// the second dead letter queues behind the purge.
	db, err := sql.Open("sqlite3", "file:"+tb.Store.Path()+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lock, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		n, err := tb.B.DeleteQueue(context.Background(), dlq)
		done <- res{n, err}
	}()
	time.Sleep(200 * time.Millisecond)
	if err := c.Write(stomp.NewFrame(stomp.CmdNack, "id", m2.Get("ack"))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := lock.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	var r res
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("DeleteQueue did not return")
	}
	time.Sleep(300 * time.Millisecond)
	before, _ := tb.Queue(dlq)
	c.Close()
	tb.Restart()
	after, _ := tb.Queue(dlq)
	if before.Messages != after.Messages {
		t.Fatalf("delete of %s (purged %d, err %v): the broker holds %d messages in it, the journal %d (seen after a restart): a dead letter committed during the delete was dropped from memory but not from the journal",
			dlq, r.n, r.err, before.Messages, after.Messages)
	}
}

// Claim (888e134): a queue delete forgets the queue's dedup ids. The
// OpForgetDedup it journals resolves the queue's id the way an enqueue
// does, creating a queues row for a name the journal never held: every
// temporary reply queue a client subscribed to and that got no message
// leaves a row in the journal's queues table when its connection ends,
// forever (names carry the session id: the table grows with every
// request-reply connection).
func TestReviewToday_DeleteLeavesNoQueueRow(t *testing.T) {
	tb := mustStartBroker(t, nil)
	for range 3 {
		c := tb.Dial(t)
		if _, err := c.SubscribeReceipt(ctxT(t), "/temp-queue/answers", "auto"); err != nil {
			t.Fatal(err)
		}
		if err := c.Disconnect(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("sqlite3", "file:"+tb.Store.Path()+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	deadline := time.Now().Add(2 * time.Second)
	for {
		if err := db.QueryRow(`SELECT count(*) FROM queues WHERE name LIKE '#tmp%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		break
	}
	if n != 0 {
		t.Fatalf("3 temporary queues that never held a message, deleted with their connections: %d rows of them in the journal's queues table", n)
	}
}
