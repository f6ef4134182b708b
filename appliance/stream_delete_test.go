package appliance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestStream_DeleteGoesOnPastItsContext: a stream delete whose caller
// stops waiting (the admin API's 30 s operation timeout) went back on what
// it had done: it reloaded the stream and answered "N messages removed;
// retry", so a stream of millions of messages took as many deletes as it
// had 30 s of steps. It now returns the count so far with ErrStillRunning
// and goes on to its end on its own; the stream's view shows its progress,
// and the broker's record of deletes its end after the stream is gone.
func TestStream_DeleteGoesOnPastItsContext(t *testing.T) {
	var delay atomic.Int64
	delay.Store(int64(60 * time.Millisecond))
	tb := startWrapped(t, func(c *appliance.Config) {
		c.Streams.RetentionBatch = 1 // steps of 16 messages
	}, testbroker.SlowOps(appliance.OpStreamDelete, &delay))
	c := tb.Dial(t)
	appendN(t, c, "/stream/r", 0, 100) // 7 steps of at least 60 ms
	if _, ok := tb.B.StreamDelete("r"); ok {
		t.Fatal("a delete of stream r is known before any")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	n, err := tb.B.DeleteStream(ctx, "r")
	if !errors.Is(err, appliance.ErrStillRunning) || !errors.Is(err, context.DeadlineExceeded) || n >= 100 {
		t.Fatalf("delete past its context: %d removed, %v; want fewer than 100 so far and ErrStillRunning", n, err)
	}
	if d, ok := tb.B.StreamDelete("r"); !ok || !d.Running || d.EndedAt != nil || d.Deleted < n || d.Stream != "r" {
		t.Fatalf("the record of the running delete: %+v, %v; want running, at least %d deleted", d, ok, n)
	}
	// It goes on: its progress shows in the stream's view, and the stream
	// is still refused to clients.
	waitFor(t, 10*time.Second, "the delete's progress in the stream's view", func() bool {
		v, err := tb.B.Stream(context.Background(), "r")
		if err != nil || !v.Deleting {
			t.Fatalf("stream r while its delete runs: %+v, %v; want it, deleting", v, err)
		}
		return v.DeleteDeleted > n && v.DeleteDeleted < 100
	})
	if _, err := tb.Dial(t).SendReceipt(ctxT(t), "/stream/r", []byte("during")); err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("an append to stream r while its delete runs: %v; want it refused", err)
	}
	var d appliance.StreamDeleteView
	waitFor(t, 10*time.Second, "the delete's end", func() bool {
		d, _ = tb.B.StreamDelete("r")
		return !d.Running
	})
	if d.Deleted != 100 || d.Error != "" || d.EndedAt == nil || d.EndedAt.Before(d.StartedAt) {
		t.Fatalf("the delete's end: %+v; want 100 deleted, no error, its times", d)
	}
	if _, err := tb.B.Stream(context.Background(), "r"); !errors.Is(err, appliance.ErrNoStream) {
		t.Fatalf("stream r after its delete: %v; want ErrNoStream", err)
	}
	rc, err := c.SendReceipt(ctxT(t), "/stream/r", []byte("after"))
	if err != nil || rc.Get("x-stream-offset") != "0" {
		t.Fatalf("append after the delete: %v, offset %q; want a new stream at 0", err, rc.Get("x-stream-offset"))
	}
	if d2, ok := tb.B.StreamDelete("/stream/r"); !ok || d2.Stream != "r" || d2.Deleted != 100 || d2.EndedAt == nil || !d2.EndedAt.Equal(*d.EndedAt) {
		t.Fatalf("the record by the destination's name: %+v, %v; want %+v", d2, ok, d)
	}
}

// TestStream_DeleteRecordIsBounded: the broker keeps the last delete of
// each name, of at most MaxStreamDeleteRecords names (the delete that
// ended first is forgotten first), and never forgets one still running.
func TestStream_DeleteRecordIsBounded(t *testing.T) {
	tb, g := startGated(t, nil, func(op appliance.Op) bool {
		return op.Kind == appliance.OpStreamDelete && op.Stream != nil && op.Stream.Name == "slow"
	}, false)
	c := tb.Dial(t)
	deleteAll := func(prefix string, n int) []string {
		t.Helper()
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("%s%d", prefix, i)
			appendN(t, c, "/stream/"+names[i], 0, 1)
			if n, err := tb.B.DeleteStream(ctxT(t), names[i]); err != nil || n != 1 {
				t.Fatalf("delete %s: %d, %v", names[i], n, err)
			}
		}
		return names
	}
	// known checks which of names the record knows: those from first on.
	known := func(names []string, first int) {
		t.Helper()
		for i, name := range names {
			d, ok := tb.B.StreamDelete(name)
			if want := i >= first; ok != want || (ok && (d.Running || d.Deleted != 1 || d.Error != "")) {
				t.Errorf("record of %s (deleted %d of %d): %+v, %v; want known %v, 1 deleted", name, i+1, len(names), d, ok, want)
			}
		}
	}

	const extra = 6
	s := deleteAll("s", appliance.MaxStreamDeleteRecords+extra)
	known(s, extra)

	// A delete that runs, its step held, stays known while more end.
	appendN(t, c, "/stream/slow", 0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := tb.B.DeleteStream(ctx, "slow"); !errors.Is(err, appliance.ErrStillRunning) {
		t.Fatalf("delete of stream slow, its step held: %v; want ErrStillRunning", err)
	}
	g.await(t, "the step of the delete of stream slow")
	u := deleteAll("u", appliance.MaxStreamDeleteRecords)
	known(s, len(s)) // none
	known(u, 1)      // the last MaxStreamDeleteRecords-1, with the running one
	if d, ok := tb.B.StreamDelete("slow"); !ok || !d.Running || d.EndedAt != nil {
		t.Fatalf("the running delete of stream slow: %+v, %v; want it kept, running", d, ok)
	}

	g.open()
	waitFor(t, 10*time.Second, "the end of the delete of stream slow", func() bool {
		d, ok := tb.B.StreamDelete("slow")
		if !ok {
			t.Fatal("the delete of stream slow is forgotten")
		}
		return !d.Running
	})
	if d, _ := tb.B.StreamDelete("slow"); d.Deleted != 1 || d.Error != "" || d.EndedAt == nil {
		t.Fatalf("the delete of stream slow: %+v; want 1 deleted", d)
	}
	known(u, 1)
}
