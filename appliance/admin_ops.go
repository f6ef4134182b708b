package appliance

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Errors of the admin operations.
var (
	ErrNoQueue   = errors.New("appliance: no such queue")
	ErrQueueBusy = errors.New("appliance: queue has consumers")
)

// apply submits ops as one batch and waits for the commit.
func (b *Broker) apply(ctx context.Context, ops []Op) (*Batch, error) {
	done := make(chan error, 1)
	batch := &Batch{Ops: ops, Done: func(_ *Batch, err error) { done <- err }}
	b.j.Submit(batch)
	select {
	case err := <-done:
		return batch, err
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the journal: %w (the operation may still complete)", ctx.Err())
	}
}

func (b *Broker) mustQueue(name string) (*queue, error) {
	q := b.lookupQueue(name)
	if q == nil {
		return nil, fmt.Errorf("%w %q: list queues with: herald queues", ErrNoQueue, name)
	}
	return q, nil
}

// Peek returns the oldest n messages of queue in order, in flight or not.
func (b *Broker) Peek(ctx context.Context, name string, n int) ([]*Message, error) {
	if _, err := b.mustQueue(name); err != nil {
		return nil, err
	}
	if n <= 0 {
		n = 10
	}
	return b.j.Load(ctx, name, 0, n)
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

func (q *queue) purge(ctx context.Context) (int, error) {
	q.mu.Lock()
	keep := make([]uint64, 0, len(q.inflight))
	for id := range q.inflight {
		keep = append(keep, id)
	}
	upTo := q.lastID
	// Nothing up to upTo may come back into memory: clear the window and
	// move the paging cursor past it. In-flight messages stay; a NACK
	// returns them as usual.
	for _, m := range q.delayed {
		if m.holdsGroup {
			m.holdsGroup = false
			q.releaseGroupLocked(m.Group)
		}
	}
	q.ready, q.delayed = nil, nil
	q.memTail = max(q.memTail, upTo)
	q.spilled = false
	q.mu.Unlock()
	batch, err := q.b.apply(ctx, []Op{{Kind: OpPurge, Queue: q.name, ID: upTo, Keep: keep}})
	if err != nil {
		return 0, fmt.Errorf("purge %s: %w", q.name, err)
	}
	op := batch.Ops[0]
	q.mu.Lock()
	q.count -= op.Affected
	q.bytes -= op.Bytes
	q.signalSpaceLocked()
	q.mu.Unlock()
	q.b.log.Info("queue purged", "queue", q.name, "messages", op.Affected)
	return op.Affected, nil
}

// DeleteQueue purges queue and forgets it. A queue with consumers is not
// deleted (ErrQueueBusy).
func (b *Broker) DeleteQueue(ctx context.Context, name string) (int, error) {
	q, err := b.mustQueue(name)
	if err != nil {
		return 0, err
	}
	q.mu.Lock()
	n := len(q.consumers)
	q.mu.Unlock()
	if n > 0 {
		return 0, fmt.Errorf("%w: %s has %d consumers; close them first (herald connections)", ErrQueueBusy, name, n)
	}
	purged, err := q.purge(ctx)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	if b.queues[name] == q {
		delete(b.queues, name)
	}
	b.mu.Unlock()
	q.stopTimers()
	b.log.Info("queue deleted", "queue", name, "messages", purged)
	return purged, nil
}

// Requeue moves up to max (0: all) messages of the dead-letter queue of
// name back to the tail of name, oldest first, with their dlq-* headers
// removed and their delivery count reset.
func (b *Broker) Requeue(ctx context.Context, name string, maxN int) (int, error) {
	if strings.HasPrefix(name, b.cfg.Queues.DeadLetterQueue) {
		return 0, fmt.Errorf("%w %q: name the original queue, not its DLQ (herald queue requeue %s)", ErrNoQueue, name, strings.TrimPrefix(name, b.cfg.Queues.DeadLetterQueue))
	}
	dlq, err := b.mustQueue(b.cfg.Queues.DeadLetterQueue + name)
	if err != nil {
		return 0, err
	}
	target := b.queue(name)
	moved := 0
	for maxN == 0 || moved < maxN {
		want := 1000
		if maxN > 0 {
			want = min(want, maxN-moved)
		}
		n, err := dlq.requeueTo(ctx, target, want)
		moved += n
		if err != nil {
			return moved, err
		}
		if n == 0 {
			break
		}
	}
	if moved > 0 {
		b.log.Info("dead letters requeued", "queue", name, "messages", moved)
	}
	return moved, nil
}

// requeueTo moves up to n of q's messages not in flight to target.
func (q *queue) requeueTo(ctx context.Context, target *queue, n int) (int, error) {
	msgs, err := q.b.j.Load(ctx, q.name, 0, n+64)
	if err != nil {
		return 0, err
	}
	q.mu.Lock()
	var ops []Op
	var picked []*Message
	var maxID uint64
	for _, m := range msgs {
		if len(picked) == n {
			break
		}
		if _, held := q.inflight[m.ID]; held {
			continue
		}
		h := m.Headers.Clone()
		for _, k := range []string{"dlq-original-destination", "dlq-reason", "dlq-delivery-count"} {
			h.Del(k)
		}
		m.Headers = h
		picked = append(picked, m)
		maxID = max(maxID, m.ID)
		ops = append(ops, Op{Kind: OpMove, ID: m.ID, Queue: target.name, Headers: h})
	}
	if len(picked) == 0 {
		q.mu.Unlock()
		return 0, nil
	}
	// Take them out of memory and keep the pager from reading them back.
	gone := make(map[uint64]bool, len(picked))
	for _, m := range picked {
		gone[m.ID] = true
	}
	keepReady := q.ready[:0]
	for _, m := range q.ready {
		if !gone[m.ID] {
			keepReady = append(keepReady, m)
		}
	}
	q.ready = keepReady
	var keepDelayed delayHeap
	for _, m := range q.delayed {
		if !gone[m.ID] {
			keepDelayed = append(keepDelayed, m)
		}
	}
	q.delayed = keepDelayed
	initHeap(&q.delayed)
	q.memTail = max(q.memTail, maxID)
	q.mu.Unlock()

	batch, err := q.b.apply(ctx, ops)
	if err != nil {
		// Nothing moved: put them back where they were.
		q.mu.Lock()
		for _, m := range picked {
			q.placeLocked(m, q.b.now())
		}
		q.mu.Unlock()
		return 0, fmt.Errorf("requeue from %s: %w", q.name, err)
	}
	q.mu.Lock()
	for _, m := range picked {
		q.count--
		q.bytes -= int64(m.Size())
	}
	q.mu.Unlock()
	for i, m := range picked {
		target.committed(&Message{ID: batch.Ops[i].NewID, Queue: target.name, Headers: m.Headers, Body: m.Body, Group: m.Group, Enqueued: m.Enqueued}, false)
	}
	return len(picked), nil
}
