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
