package appliance_test

// Review tests of the queues' durability claims against a real broker on
// 127.0.0.1:0 with its real SQLite journal. Journal failures are real SQL
// failures: a trigger installed through a side connection (as the
// commitnow_faults tests do) refuses a statement, and the transaction
// holding it is rolled back.

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// reviewNoDelete makes SQLite refuse to delete any message whose body
// contains "poison" (an ACK's delete then fails, as on a full disk or an
// I/O error).
const reviewNoDelete = `CREATE TRIGGER review_no_delete BEFORE DELETE ON messages
	WHEN instr(OLD.body, CAST('poison' AS BLOB)) > 0
	BEGIN SELECT RAISE(ABORT, 'injected fault: delete refused'); END`

// Claim (README, STOMP table): "DISCONNECT: its RECEIPT comes after
// everything sent before it is durable" (and guarantee 2: an ACK that
// was confirmed is never delivered again).
//
// An ACK without a receipt whose journal write fails is only retried by
// the queue (the message is redelivered after a back-off); the client is
// not told. A DISCONNECT with a receipt sent after it waits for the ACK's
// batch to complete, and then sends its RECEIPT whatever the outcome: the
// client is told its ACK is durable, and the message is delivered again.
func TestReview_DisconnectReceiptAfterFailedAck(t *testing.T) {
	tb := mustStartBroker(t, nil)
	const dest = "/queue/review.ack"
	c := tb.Dial(t)
	if _, err := c.SendReceipt(ctxT(t), dest, []byte("poison: acked once")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	cnfExec(t, tb.Store.Path(), reviewNoDelete)

	r := dialRaw(t, tb)
	r.connect("1.2")
	r.write("SUBSCRIBE\nid:s1\ndestination:" + dest + "\nack:client-individual\n\n\x00")
	m := r.frame()
	if m.Command != stomp.CmdMessage || m.Get("ack") == "" {
		t.Fatalf("got %s %v, want the MESSAGE", m.Command, m.Headers)
	}
	// The ACK without a receipt, then DISCONNECT with one.
	r.write("ACK\nid:" + m.Get("ack") + "\n\n\x00DISCONNECT\nreceipt:bye\n\n\x00")
	f := r.frame()
	receipted := f.Command == stomp.CmdReceipt && f.Get("receipt-id") == "bye"

	// What the ACK did: the message is still there and is delivered again.
	cnfExec(t, tb.Store.Path(), `DROP TRIGGER review_no_delete`)
	c2 := tb.Dial(t)
	sub, err := c2.SubscribeReceipt(ctxT(t), dest, "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	var again *stomp.Frame
	select {
	case again = <-sub.C():
	case <-time.After(5 * time.Second):
	}
	if receipted && again != nil {
		t.Fatalf("DISCONNECT was receipted (everything before it durable), yet the ACK before it was not stored: "+
			"the message %q is delivered again (delivery-count %s)", again.Body, again.Get("delivery-count"))
	}
	if !receipted && f.Command != stomp.CmdError {
		t.Fatalf("DISCONNECT answered %s %v, want a RECEIPT or an ERROR", f.Command, f.Headers)
	}
}

// Claim (README, guarantee 1): "A purge, requeue or ack whose journal
// write fails changes nothing." DeleteQueue is a purge that also forgets
// the queue: the broker drops the queue before the purge commits, and
// when the purge fails it does not take it back. The messages stay in the
// journal, but the name's next queue is made from nothing (not recovered
// from the journal): they are not delivered, nor counted, until a
// restart, when they are all back.
func TestReview_FailedQueueDeleteHidesMessages(t *testing.T) {
	tb := mustStartBroker(t, nil)
	const name = "review.del"
	c := tb.Dial(t)
	for _, body := range []string{"poison: one", "two"} {
		if _, err := c.SendReceipt(ctxT(t), "/queue/"+name, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	cnfExec(t, tb.Store.Path(), reviewNoDelete)
	if n, err := tb.B.DeleteQueue(ctxT(t), name); err == nil {
		t.Fatalf("delete succeeded (%d messages) although the journal refused it", n)
	}
	cnfExec(t, tb.Store.Path(), `DROP TRIGGER review_no_delete`)

	c2 := tb.Dial(t)
	sub, err := c2.SubscribeReceipt(ctxT(t), "/queue/"+name, "auto")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	deadline := time.After(2 * time.Second)
	for len(got) < 2 {
		select {
		case m := <-sub.C():
			got = append(got, string(m.Body))
			continue
		case <-deadline:
		}
		break
	}
	v, _ := tb.Queue(name)
	if len(got) != 2 {
		c2.Close()
		tb.Restart()
		c3 := tb.Dial(t)
		sub3, err := c3.SubscribeReceipt(ctxT(t), "/queue/"+name, "auto")
		if err != nil {
			t.Fatal(err)
		}
		var after []string
		for len(after) < 2 {
			select {
			case m := <-sub3.C():
				after = append(after, string(m.Body))
				continue
			case <-time.After(2 * time.Second):
			}
			break
		}
		t.Fatalf("after a failed delete the queue delivers %q (view: %d messages), want both messages: the journal still holds them (after a restart: %q)", got, v.Messages, after)
	}
}

// reviewCrashCopy is what a crash of tb's daemon would leave: its
// journal's committed state (an online backup), in a new data directory.
func reviewCrashCopy(t *testing.T, tb *testBroker) string {
	t.Helper()
	dir := t.TempDir()
	if err := tb.Store.Backup(ctxT(t), filepath.Join(dir, "herald.db"), nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Claim (packaging/herald.toml): max_deliveries is the number of
// "Deliveries before a message is moved to the dead-letter queue", and
// (docs/design.md, bridges) a message "in flight across
// queues.max_deliveries restarts goes to the dead-letter queue".
//
// The count is durable before each MESSAGE, but it is compared with
// max_deliveries only when a delivery ends (NACK, disconnect, ack
// timeout). A crash ends none: after it the message is paged in with its
// count and delivered again, with a delivery-count past max_deliveries,
// however many crashes it has been in flight across.
func TestReview_MaxDeliveriesAcrossCrash(t *testing.T) {
	const dest = "/queue/review.maxdel"
	mutate := func(dir string) func(*appliance.Config) {
		return func(c *appliance.Config) {
			c.Queues.MaxDeliveries = 2
			if dir != "" {
				c.DataDir = dir
			}
		}
	}
	tb := mustStartBroker(t, mutate(""))
	c := tb.Dial(t)
	if _, err := c.SendReceipt(ctxT(t), dest, []byte("crashes its consumers")); err != nil {
		t.Fatal(err)
	}
	var counts []string
	for range 3 {
		c := tb.Dial(t)
		sub, err := c.SubscribeReceipt(ctxT(t), dest, "client-individual")
		if err != nil {
			t.Fatal(err)
		}
		var m *stomp.Frame
		select {
		case m = <-sub.C():
		case <-time.After(3 * time.Second):
		}
		if m == nil {
			break // dead-lettered
		}
		counts = append(counts, m.Get("delivery-count"))
		// The daemon crashes while the MESSAGE is in flight.
		dir := reviewCrashCopy(t, tb)
		tb = mustStartBroker(t, mutate(dir))
	}
	dlq, _ := tb.Queue("DLQ.review.maxdel")
	if len(counts) > 2 {
		t.Fatalf("max_deliveries 2: delivered with delivery-count %v across crashes (the DLQ holds %d)", counts, dlq.Messages)
	}
}
