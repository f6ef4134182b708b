package appliance_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// opGate holds the first batch with an op that match accepts until
// release: at its Submit (a journal slow to take it, its intake full, as
// under a producer flooding large messages) or, with atDone, at its
// completion (a slow journal: whatever is submitted after waits behind
// it). entered is closed when it is held. Every other batch goes through
// at once, in the order submitted. The gate opens at the test's end.
type opGate struct {
	appliance.Journal
	appliance.StreamJournal
	match   func(appliance.Op) bool
	atDone  bool
	hold    sync.Once
	opened  sync.Once
	entered chan struct{}
	release chan struct{}
}

// startGated starts a broker (mutate as startWrapped's) whose journal is
// gated by g.
func startGated(t *testing.T, mutate func(*appliance.Config), match func(appliance.Op) bool, atDone bool) (*testBroker, *opGate) {
	g := &opGate{match: match, atDone: atDone, entered: make(chan struct{}), release: make(chan struct{})}
	tb := startWrapped(t, mutate, func(j appliance.Journal) appliance.Journal {
		g.Journal = j
		g.StreamJournal = j.(appliance.StreamJournal)
		return g
	})
	t.Cleanup(g.open) // before the broker stops (cleanups run last first)
	return tb, g
}

// open releases the held batch; idempotent.
func (g *opGate) open() { g.opened.Do(func() { close(g.release) }) }

// await waits until the gate holds its batch.
func (g *opGate) await(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never reached the journal", what)
	}
}

func (g *opGate) Submit(b *appliance.Batch) {
	for _, op := range b.Ops {
		if !g.match(op) {
			continue
		}
		held := false
		g.hold.Do(func() { held = true })
		if !held {
			break
		}
		if g.atDone {
			done := b.Done
			b.Done = func(b *appliance.Batch, err error) {
				close(g.entered)
				<-g.release
				done(b, err)
			}
			break
		}
		close(g.entered)
		<-g.release
		break
	}
	g.Journal.Submit(b)
}

// appendTo matches an append to stream name.
func appendTo(name string) func(appliance.Op) bool {
	return func(op appliance.Op) bool {
		return op.Kind == appliance.OpAppend && op.Stream != nil && op.Stream.Name == name
	}
}

// TestStream_ResetCursorAfterPendingAck: a consumer's last ACK (sent
// before it disconnected, still in the connection's journal intake when
// the consumer was gone) is stored before an admin reset of its cursor,
// which waits for it. It used to commit after the reset: OpCursor keeps
// the furthest position, so the reset was silently undone in the journal
// and in the core, and the next consumer resumed where the old one left
// off, not where the operator put it.
func TestStream_ResetCursorAfterPendingAck(t *testing.T) {
	tb, g := startGated(t, nil, appendTo("gate"), false)
	c := leaveAckPending(t, tb, g)

	// The operator rewinds the cursor to the first offset: the reset
	// waits for the consumer's last ACK to be stored first.
	type result struct {
		old, pos uint64
		err      error
	}
	done := make(chan result, 1)
	go func() {
		old, pos, err := tb.B.ResetCursor(ctxT(t), "r", "w", "first")
		done <- result{old, pos, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("reset returned %+v while the consumer's last ACK was not stored yet", r)
	case <-time.After(300 * time.Millisecond):
	}
	// The journal catches up.
	g.open()
	r := <-done
	if r.err != nil {
		t.Fatalf("reset: %v", r.err)
	}
	if r.old != 50 || r.pos != 0 {
		t.Fatalf("reset: from %d to %d, want from 50 (the last ACK) to 0", r.old, r.pos)
	}
	if _, err := c.SendReceipt(ctxT(t), "/stream/other", []byte("barrier")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)

	v, _ := tb.B.Stream(context.Background(), "r")
	if got := v.Cursors[0].Next; got != 0 {
		t.Errorf("after a successful reset to 0, the cursor is at %d in memory", got)
	}
	tb.Restart()
	c2 := tb.Dial(t)
	sub2, err := c2.SubscribeReceipt(ctxT(t), "/stream/r", "client", hdr("x-stream-consumer", "w"), hdr("prefetch-count", "100"))
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, sub2)
	if m.Get("x-stream-offset") != "0" {
		t.Errorf("after a successful reset to 0 and a restart, the consumer resumes at offset %s", m.Get("x-stream-offset"))
	}
}

// TestStream_DeleteAfterPendingAck: the same pending ACK against an
// admin stream delete, which waits for it. It used to commit after the
// delete and make the stream's row again with the old cursor: a new stream
// of the name started at offset 0, and after a restart the deleted
// stream's cursor was back, so a consumer of the name skipped the new
// stream's first 50 messages.
func TestStream_DeleteAfterPendingAck(t *testing.T) {
	tb, g := startGated(t, nil, appendTo("gate"), false)
	c := leaveAckPending(t, tb, g)
	deleteWhileGated(t, tb, g, "the consumer's last ACK")
	appendN(t, c, "/stream/r", 0, 60) // a new stream of the name
	tb.Restart()
	v, err := tb.B.Stream(context.Background(), "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Cursors) != 0 {
		t.Errorf("the new stream r has the deleted stream's cursors: %+v", v.Cursors)
	}
	c2 := tb.Dial(t)
	sub2, err := c2.SubscribeReceipt(ctxT(t), "/stream/r", "client", hdr("x-stream-consumer", "w"), hdr("x-stream-offset", "first"), hdr("prefetch-count", "100"))
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, sub2); m.Get("x-stream-offset") != "0" {
		t.Errorf("a new consumer w of the new stream (x-stream-offset:first) starts at %s", m.Get("x-stream-offset"))
	}
}

// leaveAckPending appends 60 messages to stream r; a consumer w reads
// them, ACKs offset 9 (the cursor at 10, committed), then, while another
// connection's big append to stream gate holds the journal's intake
// (intakeInflight is 256 KiB; g holds it at its Submit), ACKs 49 without a
// receipt and goes away: its last cursor move is on its way to the
// journal. It returns the producer's connection.
func leaveAckPending(t *testing.T, tb *testBroker, g *opGate) *client.Conn {
	t.Helper()
	c := tb.Dial(t)
	appendN(t, c, "/stream/r", 0, 60)
	cons := tb.Dial(t)
	sub, err := cons.SubscribeReceipt(ctxT(t), "/stream/r", "client", hdr("x-stream-consumer", "w"),
		hdr("x-stream-offset", "first"), hdr("prefetch-count", "100"))
	if err != nil {
		t.Fatal(err)
	}
	ms := wantOffsets(t, sub, offs(0, 60)...)
	ackNow(t, cons, "ACK", ms[9])
	p := tb.Dial(t)
	big := stomp.NewFrame("SEND", "destination", "/stream/gate")
	big.Body = []byte(strings.Repeat("x", 400<<10))
	if err := p.Write(big); err != nil {
		t.Fatal(err)
	}
	g.await(t, "the big append")
	if err := cons.Write(stomp.NewFrame("ACK", "id", ms[49].Get("ack"))); err != nil {
		t.Fatal(err)
	}
	cons.Close()
	waitFor(t, 5*time.Second, "the consumer gone", func() bool {
		v, err := tb.B.Stream(context.Background(), "r")
		if err != nil {
			t.Fatal(err)
		}
		return v.Subscribers == 0 && len(v.Cursors) == 1 && !v.Cursors[0].Active
	})
	return c
}

// deleteWhileGated deletes stream r while g holds what (a batch the delete
// must wait for): the delete must not return until g opens, then succeed.
func deleteWhileGated(t *testing.T, tb *testBroker, g *opGate, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := tb.B.DeleteStream(ctxT(t), "r")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("delete returned (%v) with %s not stored yet", err, what)
	case <-time.After(300 * time.Millisecond):
	}
	g.open()
	if err := <-done; err != nil {
		t.Fatalf("delete: %v", err)
	}
}
