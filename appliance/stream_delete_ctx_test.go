package appliance_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// slowDeleteJournal holds the completion of the first append to stream
// "gate" until release is closed (a journal that is slow: whatever is
// submitted after waits behind it, in order).
type slowDeleteJournal struct {
	appliance.Journal
	appliance.StreamJournal
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *slowDeleteJournal) Submit(b *appliance.Batch) {
	for _, op := range b.Ops {
		if op.Kind == appliance.OpAppend && op.Stream != nil && op.Stream.Name == "gate" {
			hold := false
			g.once.Do(func() { hold = true })
			if hold {
				done := b.Done
				b.Done = func(b *appliance.Batch, err error) {
					close(g.entered)
					<-g.release
					done(b, err)
				}
			}
			break
		}
	}
	g.Journal.Submit(b)
}

// TestStream_DeleteOutlivesItsContext: an admin stream delete whose
// request ends (the admin API's operation timeout, or the HTTP client
// gone) while its journal step is pending waits for that step. It used to
// reload the stream from the journal at once and let clients use it again
// while the step was still to commit: when it did, the journal had
// forgotten the stream (the next append went to offset 0) while the core
// still said next = 20, and the next SEND's completion panicked the broker
// (streamcore: append at 0 below next 20).
func TestStream_DeleteOutlivesItsContext(t *testing.T) {
	g := &slowDeleteJournal{entered: make(chan struct{}), release: make(chan struct{})}
	released := false
	tb := startWrapped(t, nil, func(j appliance.Journal) appliance.Journal {
		g.Journal = j
		g.StreamJournal = j.(appliance.StreamJournal)
		return g
	})
	defer func() {
		if !released {
			close(g.release)
		}
	}()
	c := tb.Dial(t)
	appendN(t, c, "/stream/r", 0, 20)

	p := tb.Dial(t)
	gf := stomp.NewFrame("SEND", "destination", "/stream/gate")
	gf.Body = []byte("slow")
	if err := p.Write(gf); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the gate append never completed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := tb.B.DeleteStream(ctx, "r")
		done <- result{n, err}
	}()
	time.Sleep(500 * time.Millisecond) // past the request's deadline, the step still pending
	select {
	case r := <-done:
		t.Fatalf("delete returned %+v with its journal step still pending", r)
	default:
	}
	close(g.release)
	released = true
	r := <-done
	if r.err != nil || r.n != 20 {
		t.Fatalf("delete: %d removed, %v; want the 20 of its one step, done", r.n, r.err)
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

// trimGateJournal holds the Submit of the first retention trim of stream
// "r" until release is closed.
type trimGateJournal struct {
	appliance.Journal
	appliance.StreamJournal
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *trimGateJournal) Submit(b *appliance.Batch) {
	for _, op := range b.Ops {
		if op.Kind == appliance.OpTrim && op.Stream != nil && op.Stream.Name == "r" {
			hold := false
			g.once.Do(func() { hold = true })
			if hold {
				close(g.entered)
				<-g.release
			}
			break
		}
	}
	g.Journal.Submit(b)
}

// TestStream_DeleteWaitsForRetention: a retention trim that read the
// stream's head before an admin delete began is waited for by the delete.
// It used to commit after the delete and make the stream's row again: an
// empty stream of the name came back after a restart, holding a slot of
// streams.max_streams.
func TestStream_DeleteWaitsForRetention(t *testing.T) {
	g := &trimGateJournal{entered: make(chan struct{}), release: make(chan struct{})}
	released := false
	tb := startWrapped(t, func(c *appliance.Config) {
		c.Streams.MaxCount = 5
		c.Streams.RetentionInterval = appliance.Duration{Duration: 10 * time.Millisecond}
	}, func(j appliance.Journal) appliance.Journal {
		g.Journal = j
		g.StreamJournal = j.(appliance.StreamJournal)
		return g
	})
	defer func() {
		if !released {
			close(g.release)
		}
	}()
	c := tb.Dial(t)
	appendN(t, c, "/stream/r", 0, 20)
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("retention never trimmed stream r")
	}
	done := make(chan error, 1)
	go func() {
		_, err := tb.B.DeleteStream(ctxT(t), "r")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("delete returned (%v) with a retention trim of the stream not stored yet", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(g.release)
	released = true
	if err := <-done; err != nil {
		t.Fatalf("delete: %v", err)
	}
	tb.Restart()
	if v, err := tb.B.Stream(context.Background(), "r"); err == nil {
		t.Fatalf("stream r is back after its delete and a restart: %+v", v)
	}
}
