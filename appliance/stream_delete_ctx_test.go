package appliance_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// TestStream_DeleteOutlivesItsContext: an admin stream delete whose
// request ends (the admin API's operation timeout, or the HTTP client
// gone) while its journal step is pending waits for that step. It used to
// reload the stream from the journal at once and let clients use it again
// while the step was still to commit: when it did, the journal had
// forgotten the stream (the next append went to offset 0) while the core
// still said next = 20, and the next SEND's completion panicked the broker
// (streamcore: append at 0 below next 20). The delete now answers at its
// caller's deadline (ErrStillRunning) and goes on: the stream stays being
// deleted, refused to clients, until the step's outcome is known.
func TestStream_DeleteOutlivesItsContext(t *testing.T) {
	tb, g := startGated(t, nil, appendTo("gate"), true)
	c := tb.Dial(t)
	appendN(t, c, "/stream/r", 0, 20)

	p := tb.Dial(t)
	gf := stomp.NewFrame("SEND", "destination", "/stream/gate")
	gf.Body = []byte("slow")
	if err := p.Write(gf); err != nil {
		t.Fatal(err)
	}
	g.await(t, "the gate append's completion")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	n, err := tb.B.DeleteStream(ctx, "r")
	if !errors.Is(err, appliance.ErrStillRunning) || n != 0 {
		t.Fatalf("delete past its deadline, its step pending: %d removed, %v; want 0 so far and ErrStillRunning", n, err)
	}
	// The step is still pending: the stream is not reloaded.
	if v, err := tb.B.Stream(context.Background(), "r"); err != nil || !v.Deleting {
		t.Fatalf("stream r with its delete's step pending: %+v, %v; want it still being deleted", v, err)
	}
	if _, err := tb.Dial(t).SendReceipt(ctxT(t), "/stream/r", []byte("early")); err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("append with the delete's step pending: %v; want it refused", err)
	}
	g.open()
	var d appliance.StreamDeleteView
	waitFor(t, 10*time.Second, "the delete's end", func() bool {
		d, _ = tb.B.StreamDelete("r")
		return !d.Running
	})
	if d.Error != "" || d.Deleted != 20 {
		t.Fatalf("delete: %+v; want the 20 of its one step, done", d)
	}
	if _, err := tb.B.Stream(context.Background(), "r"); err == nil {
		t.Fatal("stream r still shown after its delete")
	}
	// A client appends to the name again: a new stream, at offset 0.
	rc, err := c.SendReceipt(ctxT(t), "/stream/r", []byte("after"))
	if err != nil {
		t.Fatalf("append after the delete: %v", err)
	}
	if rc.Get("x-stream-offset") != "0" {
		t.Fatalf("append after the delete at offset %s, want 0 (a new stream)", rc.Get("x-stream-offset"))
	}
	v, err := tb.B.Stream(context.Background(), "r")
	if err != nil || v.NextOffset != 1 {
		t.Fatalf("the new stream r: %+v, %v; want next offset 1", v, err)
	}
}

// TestStream_DeleteWaitsForRetention: a retention trim that read the
// stream's head before an admin delete began is waited for by the delete.
// It used to commit after the delete and make the stream's row again: an
// empty stream of the name came back after a restart, holding a slot of
// streams.max_streams.
func TestStream_DeleteWaitsForRetention(t *testing.T) {
	tb, g := startGated(t, func(c *appliance.Config) {
		c.Streams.MaxCount = 5
		c.Streams.RetentionInterval = appliance.Duration{Duration: 10 * time.Millisecond}
	}, func(op appliance.Op) bool {
		return op.Kind == appliance.OpTrim && op.Stream != nil && op.Stream.Name == "r"
	}, false)
	c := tb.Dial(t)
	appendN(t, c, "/stream/r", 0, 20)
	g.await(t, "a retention trim of stream r")
	deleteWhileGated(t, tb, g, "a retention trim of the stream")
	tb.Restart()
	if v, err := tb.B.Stream(context.Background(), "r"); err == nil {
		t.Fatalf("stream r is back after its delete and a restart: %+v", v)
	}
}
