package appliance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// TestTempQueue_ReplyCommittingAtOwnerEnd: a reply to a temporary queue
// whose SEND is still completing when the queue's connection ends does not
// make the queue again, and after a restart (session numbers start again
// at 1) no connection reads it. It made the queue again, for good (idle
// temporary queues are never forgotten), and the first connection of the
// next run with the same session number read it through its own
// /temp-queue/ name.
func TestTempQueue_ReplyCommittingAtOwnerEnd(t *testing.T) {
	tb, g := startGated(t, nil, func(op appliance.Op) bool {
		return op.Kind == appliance.OpEnqueue && op.Msg != nil && strings.HasPrefix(op.Msg.Queue, "#tmp.")
	}, true)
	// The owner is the broker's first connection (session 1).
	owner := dialRaw(t, tb)
	cf := owner.connect("1.2")
	if cf.Get("session") != "herald-1" {
		t.Fatalf("owner's session %q, want herald-1", cf.Get("session"))
	}
	owner.write("SUBSCRIBE\nid:0\ndestination:/temp-queue/replies\nreceipt:r0\n\n\x00")
	if f := owner.frame(); f.Command != "RECEIPT" {
		t.Fatalf("got %s %v", f.Command, f.Headers)
	}
	name := "#tmp.1.replies"
	// A responder replies; its SEND commits, but its completion is late.
	resp := tb.Dial(t)
	if err := resp.Send("/queue/"+name, []byte("secret reply for connection 1")); err != nil {
		t.Fatal(err)
	}
	g.await(t, "the reply's completion")
	// Meanwhile the owner goes: its temporary queue is deleted.
	owner.c.Close()
	waitFor(t, 5*time.Second, "the temporary queue deleted with its connection", func() bool {
		_, ok := tb.B.Queue(name)
		return !ok
	})
	g.open()
	time.Sleep(300 * time.Millisecond)
	if v, ok := tb.B.Queue(name); ok {
		t.Errorf("temporary queue %s exists again after its connection ended: %+v", name, v)
	}
	// After a restart, session numbers start again at 1.
	tb.Restart()
	if v, ok := tb.B.Queue(name); ok {
		t.Errorf("after restart: temporary queue %s of a connection of the previous run recovered with %d messages", name, v.Messages)
	}
	other := tb.Dial(t)
	if other.Session() != "herald-1" {
		t.Fatalf("new connection's session %q, want herald-1", other.Session())
	}
	sub, err := other.SubscribeReceipt(ctxT(t), "/temp-queue/replies", "auto")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub.C():
		t.Fatalf("a new connection's fresh temporary queue delivered %q, a reply meant for a connection of the previous run", m.Body)
	case <-time.After(500 * time.Millisecond):
	}
}

// TestTempQueue_DeadLettersGoWithOwner: the dead letters of a temporary
// queue go with it when the owner's connection ends. They stayed, for
// good (only the owner could read them, and it was gone), and after a
// restart the first connection with the same session number that named
// the same /temp-queue/ read them.
func TestTempQueue_DeadLettersGoWithOwner(t *testing.T) {
	tb := mustStartBroker(t, nil)
	owner := tb.Dial(t)
	if owner.Session() != "herald-1" {
		t.Fatalf("owner's session %q, want herald-1", owner.Session())
	}
	sub, err := owner.SubscribeReceipt(ctxT(t), "/temp-queue/replies", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.SendReceipt(ctxT(t), "/temp-queue/replies", []byte("private to connection 1")); err != nil {
		t.Fatal(err)
	}
	m := recv(t, sub)
	if _, err := owner.Request(ctxT(t), stomp.NewFrame("NACK", "id", m.Get("ack"), "requeue", "false")); err != nil {
		t.Fatal(err)
	}
	dlq := "DLQ.#tmp.1.replies"
	waitQueue(t, tb, dlq, "one dead letter", func(v appliance.QueueView) bool { return v.Messages == 1 })
	owner.Disconnect(ctxT(t))
	waitFor(t, 5*time.Second, "the temporary queue deleted with its connection", func() bool {
		_, ok := tb.B.Queue("#tmp.1.replies")
		return !ok
	})
	time.Sleep(100 * time.Millisecond)
	if v, ok := tb.B.Queue(dlq); ok {
		t.Errorf("the dead-letter queue of a temporary queue outlives its connection: %s with %d messages", dlq, v.Messages)
	}
	tb.Restart()
	other := tb.Dial(t)
	if other.Session() != "herald-1" {
		t.Fatalf("new connection's session %q, want herald-1", other.Session())
	}
	if _, err := other.SubscribeReceipt(ctxT(t), "/temp-queue/replies", "auto"); err != nil {
		t.Fatal(err)
	}
	dsub, err := other.SubscribeReceipt(ctxT(t), "/queue/"+dlq, "auto")
	if err != nil {
		t.Logf("subscribe to %s refused: %v", dlq, err)
		return
	}
	select {
	case m := <-dsub.C():
		t.Fatalf("a connection of the next run read %q, a dead letter of another connection's temporary queue", m.Body)
	case <-time.After(500 * time.Millisecond):
	}
}
