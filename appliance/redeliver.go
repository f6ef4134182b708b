package appliance

import (
	"container/heap"
	"strconv"
	"time"
)

// pendingDead is a message on its way to the dead-letter queue.
type pendingDead struct {
	d      *delivery // nil when the message was not in flight (expired)
	m      *Message
	idx    int // index of its OpMove in the batch
	reason string
}

// deadLetterQueue names the DLQ of queue name.
func (q *queue) deadLetterQueue() string { return q.cfg.DeadLetterQueue + q.name }

// deadLetterOp moves m to the DLQ with headers naming where it came from,
// why, and how often it was delivered.
func (q *queue) deadLetterOp(m *Message, reason string) Op {
	h := m.Headers.Clone()
	h.Set("dlq-original-destination", prefixQueue+q.name)
	h.Set("dlq-reason", reason)
	h.Set("dlq-delivery-count", strconv.Itoa(m.Deliveries))
	return Op{Kind: OpMove, ID: m.ID, Queue: q.deadLetterQueue(), Headers: h, Deliveries: 0}
}

// deadLettered finishes dead-letter moves once committed: the message leaves
// this queue and joins the DLQ under its new ID.
func (q *queue) deadLettered(dead []pendingDead, ops []Op, err error) {
	if err != nil {
		q.mu.Lock()
		for _, pd := range dead {
			q.b.log.Error("dead-letter move failed; message stays queued", "queue", q.name, "id", pd.msg().ID, "err", err)
			q.placeLocked(pd.msg(), q.b.now())
		}
		q.dispatchLocked()
		q.mu.Unlock()
		q.flush()
		return
	}
	dlq := q.b.queue(q.deadLetterQueue())
	q.mu.Lock()
	for _, pd := range dead {
		m := pd.msg()
		q.count--
		q.bytes -= int64(m.Size())
		q.dlqMoved.Add(1)
		q.b.stats.deadLettered.Add(1)
		if pd.reason == "expired" {
			q.expired.Add(1)
		}
	}
	q.signalSpaceLocked()
	q.dispatchLocked()
	q.mu.Unlock()
	q.flush()
	for _, pd := range dead {
		m := pd.msg()
		op := ops[pd.idx]
		moved := &Message{ID: op.NewID, Queue: dlq.name, Headers: op.Headers, Body: m.Body, Group: m.Group, Enqueued: m.Enqueued}
		q.b.log.Warn("message dead-lettered", "queue", q.name, "id", m.ID, "dlq", dlq.name, "dlq_id", op.NewID, "reason", pd.reason, "deliveries", m.Deliveries)
		dlq.committed(moved, false)
	}
}

func (pd pendingDead) msg() *Message {
	if pd.d != nil {
		return pd.d.msg
	}
	return pd.m
}

// releaseLocked returns a delivery to the queue at once (disconnect, ack
// timeout, failed claim). A claimed message that reached max_deliveries is
// dead-lettered instead, through flushReleases.
func (q *queue) releaseLocked(d *delivery, reason string) {
	q.endLocked(d)
	q.b.log.Debug("message released", "queue", q.name, "id", d.msg.ID, "reason", reason)
	if d.claimed && d.msg.Deliveries >= q.cfg.MaxDeliveries && !q.isDLQ {
		q.dead = append(q.dead, pendingDead{d: d, reason: "max-deliveries"})
		return
	}
	q.placeLocked(d.msg, q.b.now())
}

// expireLocked drops or dead-letters a message whose expires time passed.
func (q *queue) expireLocked(m *Message) {
	if q.cfg.ExpiredToDLQ && !q.isDLQ {
		q.dead = append(q.dead, pendingDead{m: m, reason: "expired"})
		return
	}
	q.drops = append(q.drops, m)
}

// flushReleases submits the dead-letter moves and drops collected under the
// lock.
func (q *queue) flushReleases() {
	q.mu.Lock()
	dead, drops := q.dead, q.drops
	q.dead, q.drops = nil, nil
	q.mu.Unlock()
	if len(dead) > 0 {
		ops := make([]Op, len(dead))
		for i := range dead {
			dead[i].idx = i
			ops[i] = q.deadLetterOp(dead[i].msg(), dead[i].reason)
		}
		q.b.j.Submit(&Batch{Ops: ops, Done: func(b *Batch, err error) { q.deadLettered(dead, b.Ops, err) }})
	}
	if len(drops) > 0 {
		ops := make([]Op, len(drops))
		ds := make([]*delivery, len(drops))
		for i, m := range drops {
			ops[i] = Op{Kind: OpDelete, ID: m.ID}
			ds[i] = &delivery{msg: m, released: true}
			q.expired.Add(1)
		}
		q.b.j.Submit(&Batch{Ops: ops, Done: func(_ *Batch, err error) { q.deleted(ds, err) }})
	}
}

// --- time: delayed messages and ack timeouts ----------------------------

// promoteLocked moves due delayed messages to the ready list and releases
// deliveries whose ack timeout passed.
func (q *queue) promoteLocked(now time.Time) {
	ms := now.UnixMilli()
	for len(q.delayed) > 0 && q.delayed[0].NotBefore <= ms {
		m := heap.Pop(&q.delayed).(*Message)
		if m.holdsGroup {
			m.holdsGroup = false
			q.releaseGroupLocked(m.Group)
		}
		q.insertReadyLocked(m)
	}
	if q.timeouts > 0 {
		q.timeouts = 0
		for _, d := range q.inflight {
			if d.deadline.IsZero() {
				continue
			}
			if !d.deadline.After(now) {
				q.removeFromSubLocked(d)
				q.b.log.Info("ack timeout: message returned to the queue", "queue", q.name, "id", d.msg.ID, "subscription", d.sub.id)
				q.ackTimeouts.Add(1)
				q.releaseLocked(d, "ack-timeout")
				continue
			}
			q.timeouts++
		}
	}
}

func (q *queue) removeFromSubLocked(d *delivery) {
	sub := d.sub
	for i, x := range sub.inflight {
		if x == d {
			sub.inflight = append(sub.inflight[:i], sub.inflight[i+1:]...)
			return
		}
	}
}

// armTimerLocked makes sure the queue wakes up at its next due time.
func (q *queue) armTimerLocked() {
	var next time.Time
	if len(q.delayed) > 0 {
		next = time.UnixMilli(q.delayed[0].NotBefore)
	}
	q.timeouts = 0
	for _, d := range q.inflight {
		if !d.deadline.IsZero() {
			q.timeouts++
			if next.IsZero() || d.deadline.Before(next) {
				next = d.deadline
			}
		}
	}
	if next.IsZero() {
		return
	}
	if q.timer != nil && !q.timerAt.IsZero() && !q.timerAt.After(next) {
		return
	}
	q.timerAt = next
	wait := next.Sub(q.b.now())
	if wait < time.Millisecond {
		wait = time.Millisecond
	}
	if q.timer == nil {
		q.timer = time.AfterFunc(wait, q.onTimer)
	} else {
		q.timer.Reset(wait)
	}
}

func (q *queue) onTimer() {
	q.mu.Lock()
	q.timerAt = time.Time{}
	q.dispatchLocked()
	q.armTimerLocked()
	q.mu.Unlock()
	q.flush()
}

func (q *queue) stopTimers() {
	q.mu.Lock()
	if q.timer != nil {
		q.timer.Stop()
	}
	q.mu.Unlock()
}

// delayHeap orders messages by NotBefore, then ID.
type delayHeap []*Message

func (h delayHeap) Len() int { return len(h) }
func (h delayHeap) Less(i, j int) bool {
	if h[i].NotBefore != h[j].NotBefore {
		return h[i].NotBefore < h[j].NotBefore
	}
	return h[i].ID < h[j].ID
}
func (h delayHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)   { *h = append(*h, x.(*Message)) }
func (h *delayHeap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return x
}

func initHeap(h *delayHeap) { heap.Init(h) }
