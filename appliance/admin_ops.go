package appliance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/herald-mq/herald/appliance/queuecore"
)

// Errors of the admin operations.
var (
	ErrNoQueue   = errors.New("appliance: no such queue")
	ErrQueueBusy = errors.New("appliance: queue has consumers")
	ErrPurging   = errors.New("appliance: a purge of this queue is already running")
	// ErrStillRunning: the caller stopped waiting (its context ended) and
	// the operation goes on to its end.
	ErrStillRunning = errors.New("appliance: the operation goes on")
)

func (b *Broker) mustQueue(name string) (*queue, error) {
	q := b.lookupQueue(name)
	if q == nil {
		return nil, fmt.Errorf("%w %q", ErrNoQueue, name) // the admin API adds the hint
	}
	return q, nil
}

// Peek calls fn with the oldest n messages of queue in order, in flight or
// not, one at a time as the journal reads them: each with at most maxBody
// bytes of its body (maxBody < 0: all of it) and the whole body's length.
// An error of fn ends the peek and is returned.
func (b *Broker) Peek(ctx context.Context, name string, n, maxBody int, fn func(m *Message, bodyBytes int) error) error {
	if _, err := b.mustQueue(name); err != nil {
		return err
	}
	if n <= 0 {
		n = 10
	}
	return b.j.LoadPrefix(ctx, name, 0, n, maxBody, fn)
}

// Purge deletes every message of queue that is not in flight and returns
// how many it deleted.
func (b *Broker) Purge(ctx context.Context, name string) (int, error) {
	q, err := b.mustQueue(name)
	if err != nil {
		return 0, err
	}
	return q.purge(ctx)
}

// waitCore submits core batch cb and waits for its commit. The core learns
// the outcome from the completion whether or not ctx ends first.
func (q *queue) waitCore(ctx context.Context, cb *queuecore.Batch) (*Batch, error) {
	type result struct {
		b   *Batch
		err error
	}
	done := make(chan result, 1)
	q.submitCore(cb, func(b *Batch, err error) { done <- result{b, err} })
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the journal: %w (the operation may still complete)", ctx.Err())
	}
}

// purge deletes what is not in flight, a run of journal batches (see
// queuecore.Core.Purge). Memory changes as each commits: a purge that
// fails leaves the queue as its committed batches left it, and says how
// many messages those deleted. A purge whose caller stops waiting (ctx)
// goes on to its end; one the broker's shutdown interrupts stops, what it
// deleted staying deleted. Its end is logged (queue.logEvent).
func (q *queue) purge(ctx context.Context) (int, error) {
	done := make(chan queuecore.Event, 1)
	var cb *queuecore.Batch
	q.run(func(now int64) {
		if cb = q.core.Purge(now); cb != nil {
			q.purgeWait = done
		}
	})
	if cb == nil {
		return 0, fmt.Errorf("purge %s: %w; wait for it and retry", q.name, ErrPurging)
	}
	q.submitCore(cb, nil)
	sofar := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.core.Snapshot().PurgeDeleted
	}
	select {
	case ev := <-done:
		if ev.Err != nil {
			return ev.Count, fmt.Errorf("purge %s: %w (%d messages were deleted before; the rest stays: retry)", q.name, ev.Err, ev.Count)
		}
		return ev.Count, nil
	case <-ctx.Done():
		n := sofar()
		return n, fmt.Errorf("purge %s: %w: %w (%d messages deleted so far; the purge goes on: see herald queue show %s)", q.name, ErrStillRunning, ctx.Err(), n, q.name)
	case <-q.b.stop:
		n := sofar()
		return n, fmt.Errorf("purge %s: %w: the purge stops (at least %d messages deleted; the rest stays: purge again after the restart)", q.name, errBrokerClosed, n)
	}
}

// queueDeletion is a queue DeleteQueue is purging; done closes with the
// outcome.
type queueDeletion struct {
	q    *queue
	done chan struct{}
}

// DeleteQueue purges queue and forgets it. A queue with consumers is not
// deleted (ErrQueueBusy). A client's SUBSCRIBE or SEND racing with the
// delete waits for it and finds the name's new queue (openQueue). A delete
// whose purge fails changes nothing more than the purges that committed:
// the queue stays, with what it still holds, and the error says to retry.
func (b *Broker) DeleteQueue(ctx context.Context, name string) (int, error) {
	b.mu.Lock()
	q := b.queues[name]
	if q == nil {
		b.mu.Unlock()
		return 0, fmt.Errorf("%w %q", ErrNoQueue, name) // the admin API adds the hint
	}
	q.mu.Lock()
	n := q.core.Consumers()
	d := &queueDeletion{q: q, done: make(chan struct{})}
	if n == 0 {
		q.deleted = true
		delete(b.queues, name)
		b.deleting[name] = d
	}
	q.mu.Unlock()
	b.mu.Unlock()
	if n > 0 {
		return 0, fmt.Errorf("%w: %s has %d consumers", ErrQueueBusy, name, n)
	}
	var purged int
	var err error
	for {
		var n int
		n, err = b.deleteQueue(ctx, q)
		purged += n
		if err == nil {
			// A dedup id is the producer's word for one message of this
			// queue: a new queue of the name (a temporary queue's name comes
			// again in the next run) starts with none, as its messages do.
			if _, ferr := b.submitWait(ctx, &Batch{Ops: []Op{{Kind: OpForgetDedup, Queue: name}}}); ferr != nil {
				err = fmt.Errorf("delete %s: forget its dedup ids: %w; retry", name, ferr)
			}
		}
		if err != nil {
			b.mu.Lock()
			break
		}
		// What committed into q since the purge loop found it empty (a
		// dead letter or a SEND whose commit was in the journal's next
		// group) is purged too: q is dropped only once found empty under
		// its lock, and what commits after that goes to the name's next
		// queue (takeCommitted).
		b.mu.Lock()
		q.mu.Lock()
		empty := q.core.Snapshot().Count == 0
		if empty {
			q.dropped = true
		}
		q.mu.Unlock()
		if empty {
			break
		}
		b.mu.Unlock()
	}
	delete(b.deleting, name)
	if err != nil {
		// Not deleted: the queue and what it holds stay (the journal
		// still has those messages; a new queue of the name would not
		// know them until a restart).
		q.mu.Lock()
		q.deleted = false
		q.mu.Unlock()
		b.queues[name] = q
	}
	b.mu.Unlock()
	close(d.done)
	if err != nil {
		q.run(func(now int64) {}) // wake it: what waited for the delete goes on
		return 0, err
	}
	q.stop()
	b.log.Info("queue deleted", "queue", name, "messages", purged)
	return purged, nil
}

// deleteQueue purges q until it holds nothing.
func (b *Broker) deleteQueue(ctx context.Context, q *queue) (int, error) {
	name := q.name
	purged, err := q.purge(ctx)
	// A purge keeps the messages in flight: a delivery whose consumer left
	// while its claim was committing comes back when the claim completes.
	// Purge again until the queue holds nothing, so that no row of it
	// stays in the journal (it would be back after a restart).
	for err == nil {
		var left int
		q.run(func(int64) { left = q.core.Snapshot().Count })
		if left == 0 {
			break
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-t.C:
			var n int
			n, err = q.purge(ctx)
			purged += n
		case <-ctx.Done():
			t.Stop()
			err = fmt.Errorf("delete %s: %d messages still in flight: %w; retry", name, left, ctx.Err())
		}
	}
	return purged, err
}

// dlqDeleted is Requeue's error for a DLQ deleted while it ran.
func dlqDeleted(dlq string, moved int) error {
	return fmt.Errorf("requeue from %s: %w (deleted while the requeue ran, after %d messages had moved)", dlq, ErrNoQueue, moved)
}

// Requeue moves up to max (0: all) messages of the dead-letter queue of
// name back to the tail of name, oldest first, with their dlq-* headers
// removed and their delivery count reset. Messages of the DLQ in flight
// are skipped, however many.
func (b *Broker) Requeue(ctx context.Context, name string, maxN int) (int, error) {
	if strings.HasPrefix(name, b.cfg().Queues.DeadLetterQueue) {
		return 0, fmt.Errorf("%w %q: name the original queue, not its DLQ (herald queue requeue %s)", ErrNoQueue, name, strings.TrimPrefix(name, b.cfg().Queues.DeadLetterQueue))
	}
	dlq, err := b.mustQueue(b.cfg().Queues.DeadLetterQueue + name)
	if err != nil {
		return 0, err
	}
	b.queue(name) // the target exists before moves reach it
	moved := 0
	var after uint64
	for maxN == 0 || moved < maxN {
		want := 1000
		if maxN > 0 {
			want = min(want, maxN-moved)
		}
		var epoch uint64
		var purging, gone bool
		dlq.run(func(int64) {
			epoch, purging, gone = dlq.core.ReadEpoch(), dlq.core.Snapshot().Purging, dlq.deleted || dlq.dropped
		})
		if gone {
			return moved, dlqDeleted(dlq.name, moved)
		}
		if purging {
			return moved, fmt.Errorf("requeue from %s: %w; wait for it and retry", dlq.name, ErrPurging)
		}
		msgs, err := b.j.Load(ctx, dlq.name, after, want)
		if err != nil {
			return moved, fmt.Errorf("requeue from %s: %w", dlq.name, err)
		}
		if len(msgs) == 0 {
			break
		}
		cms := make([]*queuecore.Msg, len(msgs))
		for i, m := range msgs {
			cms[i] = coreMsg(m)
		}
		var cb *queuecore.Batch
		var stale bool
		dlq.run(func(now int64) {
			// A DLQ deleted since the read: what the name's new queue
			// holds was perhaps read, and is not this core's to move.
			if gone = dlq.deleted || dlq.dropped; !gone {
				cb, stale = dlq.core.MoveOut(cms, name, now, epoch)
			}
		})
		if gone {
			return moved, dlqDeleted(dlq.name, moved)
		}
		if stale {
			// A purge's part or another requeue committed since the read:
			// it may hold rows they took. Read again (a purge refuses it
			// above).
			continue
		}
		after = msgs[len(msgs)-1].ID
		if cb == nil {
			continue // all of these in flight: look further
		}
		if _, err := dlq.waitCore(ctx, cb); err != nil {
			return moved, fmt.Errorf("requeue from %s: %w", dlq.name, err)
		}
		for _, op := range cb.Ops {
			if op.Kind == queuecore.OpMoveOut {
				moved++ // (the batch may hold rows of count 0 too: queuecore.bare)
			}
		}
	}
	if moved > 0 {
		b.log.Info("dead letters requeued", "queue", name, "messages", moved)
	}
	return moved, nil
}
