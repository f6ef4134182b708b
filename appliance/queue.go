package appliance

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herald-mq/herald/appliance/queuecore"
	"github.com/herald-mq/herald/appliance/stomp"
)

// queue is the shell around one queue's deterministic core
// (queuecore.Core): it serialises calls into the core under mu, turns the
// core's journal operations into journal batches, writes the MESSAGE
// frames it asks for, owns its timer and runs its page-ins.
//
// Journal completions only signal: a completion feeds the core under mu and
// hands the core's new journal work to the broker's pump (kick); it never
// submits, publishes or blocks. Callers that are not completions submit the
// work themselves (flush).
//
// Lock order: Broker.mu, then queue.mu, then session.outMu. No queue.mu is
// held while another queue's is taken (dead-letter and requeue moves are
// handed over after unlocking).
type queue struct {
	b    *Broker
	name string
	conf atomic.Pointer[QueueConfig] // effective settings: defaults with the matching policy; read with cfg(), replaced by Reload
	// isDLQ: a dead-letter queue never dead-letters (no DLQ.DLQ.x): its
	// messages are redelivered however often they are NACKed.
	isDLQ bool
	// destHdr is prefixQueue + name (dest), built at the first MESSAGE.
	destHdr atomic.Pointer[string]

	mu       sync.Mutex
	core     *queuecore.Core
	outbox   []*queuecore.Batch // journal work to submit, in order
	flushing bool
	// purgeWait: the purge running, if one waits for its end (EvPurged).
	purgeWait chan queuecore.Event
	lastPurge *PurgeView    // how the last purge since the start ended
	space     chan struct{} // closed and replaced when limits free up
	timer     *time.Timer
	timerAt   int64 // ms the timer is armed for, 0 = none
	deleted   bool  // removed by DeleteQueue: callers re-resolve the name
	// dropped: DeleteQueue found the queue empty and forgot it for good;
	// a message committed after that goes to the name's queue
	// (takeCommitted), not to this one.
	dropped  bool
	closed   bool // broker closing: no more timers or page-ins
	failLog  rateLog
	orderLog rateLog // EvOutOfOrder
	// pageLog: the Warn line of failed page-ins, at most one per
	// pageFailLogEvery, with the failures since the last one.
	pageLog struct {
		last  time.Time
		fails int
	}

	blocked, blockedNs atomic.Uint64

	// memCharged is what the queue holds of the broker's memory budget:
	// the core's MemBytes and CacheBytes as of its last step, the latter
	// also in cacheCharged. Under mu.
	memCharged, cacheCharged int64
	// lastStep is when the core last took an input (ms); under mu.
	lastStep int64
}

// delivery is one delivery attempt, as the core tracks it.
type delivery = queuecore.Delivery

func newQueue(b *Broker, name string) *queue {
	c := b.cfg().Queues.For(name)
	isDLQ := strings.HasPrefix(name, b.cfg().Queues.DeadLetterQueue)
	core := queuecore.New(coreConfig(c, isDLQ), b.seed.Add(1))
	q := &queue{b: b, name: name, isDLQ: isDLQ, core: core, space: make(chan struct{})}
	q.conf.Store(&c)
	return q
}

// coreConfig is what the core of a queue with settings c takes.
func coreConfig(c QueueConfig, isDLQ bool) queuecore.Config {
	return queuecore.Config{
		Window:        c.MemoryWindow,
		WindowBytes:   c.MemoryWindowBytes,
		CacheBytes:    c.BacklogCacheBytes,
		MaxMessages:   c.MaxMessages,
		MaxBytes:      c.MaxBytes,
		MaxDeliveries: c.MaxDeliveries,
		RedeliveryMin: c.RedeliveryMin.Milliseconds(),
		RedeliveryMax: c.RedeliveryMax.Milliseconds(),
		DeadLetter:    !isDLQ,
		ExpiredToDLQ:  c.ExpiredToDLQ,
	}
}

// cfg is the queue's effective settings (do not modify).
func (q *queue) cfg() *QueueConfig { return q.conf.Load() }

func (q *queue) nowMs() int64 { return q.b.now().UnixMilli() }

// run feeds the core under the lock and applies its outputs, then submits
// the journal work itself: for callers that may block (readers, admin,
// timers, page-ins).
func (q *queue) run(fn func(now int64)) {
	moved, work := q.stepLocked(fn)
	q.handOver(moved, false)
	if work {
		q.flush()
	}
}

// signal is run for journal completions: the journal work goes to the
// broker's pump instead of being submitted here.
func (q *queue) signal(fn func(now int64)) {
	moved, work := q.stepLocked(fn)
	q.handOver(moved, true)
	if work {
		q.kick()
	}
}

// stepLocked runs fn on the core under the lock and applies its outputs;
// work says whether journal work waits in the outbox.
func (q *queue) stepLocked(fn func(now int64)) (moved []queuecore.Moved, work bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.nowMs()
	fn(now)
	q.lastStep = now
	q.accountLocked(now)
	moved = q.applyLocked()
	return moved, len(q.outbox) > 0
}

// accountLocked brings the queue's share of the memory budget up to date
// and, while the queues' half of it is short (less than a quarter free),
// caps what the queue holds in memory (ready, delayed, in flight) at what
// it holds plus what is free, and at least windowFloor (a queue whose
// consumers wait can always page in): new messages then stay in the
// journal. The backlog cache (queues.backlog_cache_bytes) comes after
// every window: it may use only what that half has free above its half,
// and gives back what it holds beyond, newest messages first; past that
// point the other queues are asked to give theirs back too (shedCaches).
// q.mu is held.
func (q *queue) accountLocked(now int64) {
	gone := q.closed || q.deleted
	free := q.b.mem.queueFree() + q.memCharged - q.core.MemBytes() // this queue's windows charged as they are now
	cacheCap := max(free-q.b.mem.half/2, 0)
	if gone {
		cacheCap = 0
	}
	q.core.SetCacheCap(cacheCap)
	mb, cb := q.core.MemBytes(), q.core.CacheBytes()
	if gone {
		mb, cb = 0, 0
	}
	if d := mb + cb - q.memCharged; d != 0 {
		q.b.mem.chargeQueue(d)
	}
	if d := cb - q.cacheCharged; d != 0 {
		q.b.cached.Add(d)
	}
	q.memCharged, q.cacheCharged = mb+cb, cb
	capBytes := int64(0)
	free = q.b.mem.queueFree()
	if free < q.b.mem.half/4 {
		capBytes = max(mb+free, windowFloor)
	}
	q.core.SetWindowCap(capBytes, now)
	if free < q.b.mem.half/2 && q.b.cached.Load() > cb {
		q.b.shedCaches()
	}
}

// applyLocked carries out the core's outputs, except the moves to other
// queues, which it returns.
func (q *queue) applyLocked() []queuecore.Moved {
	out := q.core.Take()
	q.outbox = append(q.outbox, out.Batches...)
	for _, d := range out.Deliver {
		sub := d.C.Ref.(*subscription)
		f := q.frameFor(d)
		if d.AutoAck() {
			sub.s.deliverQueue(f, d)
		} else {
			sub.s.deliverQueue(f, nil)
		}
	}
	if out.Space {
		q.signalSpaceLocked()
	}
	for _, ev := range out.Events {
		if ev.Kind == queuecore.EvPurged {
			q.lastPurge = &PurgeView{Deleted: ev.Count, Bytes: ev.Bytes, EndedAt: q.b.now().UTC()}
			if ev.Err != nil {
				q.lastPurge.Error = ev.Err.Error()
			}
			if q.purgeWait != nil {
				q.purgeWait <- ev
				q.purgeWait = nil
			}
		}
		q.logEvent(ev)
	}
	if out.PageIn != nil {
		q.startPageIn(out.PageIn)
	}
	q.armTimerLocked(out.Wake)
	return out.Moved
}

// handOver gives moved messages to the queues they moved to.
func (q *queue) handOver(moved []queuecore.Moved, completion bool) {
	for _, mv := range moved {
		m := mv.Msg.Ref.(*Message)
		target := mv.Queue
		var h stomp.Headers
		if target == "" {
			target = q.deadLetterQueue()
			h = q.deadLetterHeaders(m, mv.Msg.Deliveries, mv.Reason)
			q.b.stats.deadLettered.Add(1)
			q.b.log.Warn("message dead-lettered", "queue", q.name, "id", m.ID, "dlq", target, "dlq_id", mv.NewID, "reason", mv.Reason, "deliveries", mv.Msg.Deliveries)
		} else {
			h = requeueHeaders(m)
		}
		nm := &Message{ID: mv.NewID, Queue: target, Headers: h, Body: m.Body, Group: m.Group, Enqueued: m.Enqueued}
		for tq := q.b.queue(target); !tq.takeCommitted(nm, false, completion); {
			tq = q.b.queue(target) // dropped by DeleteQueue meanwhile: the name's new queue
		}
	}
}

// takeCommitted gives the core committed message m; false (and nothing
// done) when DeleteQueue dropped q meanwhile: the caller resolves the name
// again. completion: on a journal completion (signal, not run).
func (q *queue) takeCommitted(m *Message, reserved, completion bool) bool {
	ok := false
	fn := func(now int64) {
		if q.dropped {
			return
		}
		ok = true
		q.core.Committed(coreMsg(m), reserved, now)
	}
	if completion {
		q.signal(fn)
	} else {
		q.run(fn)
	}
	return ok
}

// coreMsg is the core's view of m.
func coreMsg(m *Message) *queuecore.Msg {
	return &queuecore.Msg{ID: m.ID, Size: int64(m.Size()), Group: m.Group, NotBefore: m.NotBefore,
		Expires: m.Expires, Enqueued: m.Enqueued, Deliveries: m.Deliveries, ClaimRow: m.ClaimRow, Ref: m}
}

// --- journal work -------------------------------------------------------

// kick asks the broker's pump to flush this queue.
func (q *queue) kick() { q.b.pump.add(q) }

// flush submits the journal work the core produced, in order, one
// submitter at a time.
func (q *queue) flush() {
	q.mu.Lock()
	if q.flushing {
		q.mu.Unlock()
		return
	}
	q.flushing = true
	for len(q.outbox) > 0 {
		work := q.outbox
		q.outbox = nil
		q.mu.Unlock()
		for _, cb := range work {
			q.submitCore(cb, nil)
		}
		q.mu.Lock()
	}
	q.flushing = false
	q.mu.Unlock()
}

// submitCore submits a core batch; its completion feeds the core and then
// calls after (if set) with the journal batch and error.
func (q *queue) submitCore(cb *queuecore.Batch, after func(*Batch, error)) {
	ops := q.journalOps(cb)
	q.b.j.Submit(&Batch{Ops: ops, Done: func(b *Batch, err error) {
		q.completed(cb, b.Ops, err)
		if after != nil {
			after(b, err)
		}
	}})
}

// completed feeds the outcome of core batch cb (journal ops jops) to the
// core. It runs on the journal's completion goroutine: it only signals.
func (q *queue) completed(cb *queuecore.Batch, jops []Op, err error) {
	q.b.journalResult(err)
	var res queuecore.Result
	if err == nil {
		res.NewIDs = make([]uint64, len(jops))
		for i := range jops {
			res.NewIDs[i] = jops[i].NewID
			if jops[i].Kind == OpPurge {
				res.Affected, res.Bytes, res.PurgedTo = jops[i].Affected, jops[i].Bytes, jops[i].PurgedTo
			}
		}
	}
	q.signal(func(now int64) { q.core.Done(cb.Seq, res, err, now) })
}

// journalOps maps a core batch to journal operations, one for one.
func (q *queue) journalOps(cb *queuecore.Batch) []Op {
	ops := make([]Op, len(cb.Ops))
	for i, op := range cb.Ops {
		var m *Message
		var id uint64
		if op.Msg != nil {
			m = op.Msg.Ref.(*Message)
			id = op.Msg.ID
		}
		switch op.Kind {
		case queuecore.OpDelete, queuecore.OpDrop:
			ops[i] = Op{Kind: OpDelete, ID: id, NoClaim: op.NoClaim}
		case queuecore.OpClaim:
			ops[i] = Op{Kind: OpClaim, ID: id, Deliveries: op.Deliveries, Mark: op.Mark}
			if op.Mark {
				ops[i].Queue = q.name
			}
		case queuecore.OpRelease:
			ops[i] = Op{Kind: OpRelease, ID: id, NotBefore: op.NotBefore}
		case queuecore.OpDeadLetter:
			h := q.deadLetterHeaders(m, op.Msg.Deliveries, op.Reason)
			ops[i] = Op{Kind: OpMove, ID: id, Queue: q.deadLetterQueue(), Headers: h, Size: movedSize(m, h)}
		case queuecore.OpMoveOut:
			h := requeueHeaders(m)
			ops[i] = Op{Kind: OpMove, ID: id, Queue: op.Target, Headers: h, Size: movedSize(m, h)}
		case queuecore.OpPurge:
			ops[i] = Op{Kind: OpPurge, Queue: q.name, ID: op.UpTo, After: op.After, Keep: op.Keep}
		}
	}
	return ops
}

// movedSize is the size of m once its headers are h.
func movedSize(m *Message, h stomp.Headers) int {
	return (&Message{Headers: h, Body: m.Body}).Size()
}

// coreAck submits the batch of an ACK or NACK through the session (so its
// RECEIPT waits for it); see ackResult.
func (q *queue) ackResult(cb *queuecore.Batch, stale bool) ackResult {
	if stale {
		q.b.stats.staleAcks.Add(1)
		return ackResult{stale: true}
	}
	return ackResult{ops: q.journalOps(cb), done: func(ops []Op, err error) {
		if ops == nil && err == nil {
			err = errTxAborted
		}
		q.completed(cb, ops, err)
	}}
}

// --- enqueue ------------------------------------------------------------

// live returns the queue that now holds this name: q, or the queue that
// replaced it after a DeleteQueue; nil for a deleted temporary queue
// whose owner is gone.
func (q *queue) live() *queue {
	q.mu.Lock()
	deleted := q.deleted
	q.mu.Unlock()
	if deleted {
		if q.b.tempGone(strings.TrimPrefix(q.name, q.b.cfg().Queues.DeadLetterQueue)) {
			// A temporary queue (or its dead letters) whose owner is gone
			// is not made again; its journal rows go at the next start
			// (Open).
			return nil
		}
		return q.b.queue(q.name)
	}
	return q
}

// committed adds a message whose enqueue is durable (a completion).
// reserved says whether reserve counted it.
func (q *queue) committed(m *Message, reserved bool) {
	for {
		lq := q.live()
		if lq == nil {
			if reserved {
				q.enqueueFailed(m)
			}
			return
		}
		if lq != q {
			if reserved {
				q.enqueueFailed(m)
			}
			for !lq.takeCommitted(m, false, true) {
				if lq = q.live(); lq == nil {
					return
				}
			}
			return
		}
		if q.takeCommitted(m, reserved, true) {
			return
		}
		// Dropped by DeleteQueue after it found q empty: live resolves
		// the name's new queue now.
	}
}

// enqueueFailed returns the reservation of an enqueue that did not commit
// (or was a duplicate).
func (q *queue) enqueueFailed(m *Message) {
	q.mu.Lock()
	q.core.Unreserve(int64(m.Size()))
	q.applyLocked()
	q.mu.Unlock()
}

// reserve counts an enqueue against the limits, enqueues still pending
// commit included. It returns false with the limit's name when the queue
// is full, and a channel closed when space may have come back.
func (q *queue) reserve(size int) (bool, string, <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ok, limit := q.core.Reserve(int64(size))
	if !ok {
		return false, limit, q.space
	}
	return true, "", nil
}

func (q *queue) signalSpaceLocked() {
	if c := q.cfg(); c.MaxMessages == 0 && c.MaxBytes == 0 {
		return // no limits: nobody waits for space
	}
	close(q.space)
	q.space = make(chan struct{})
}

// --- paging -------------------------------------------------------------

func (q *queue) startPageIn(req *queuecore.PageIn) {
	if q.closed {
		q.core.Paged(req, nil, errBrokerClosed, q.nowMs())
		return
	}
	// While the memory budget is short, a page-in loads at most what is
	// free (at least windowFloor, and always one message), and reserves it
	// until its messages are charged: queues paging in at once cannot
	// together pass the budget. The core sees the bound it was given.
	reserved := int64(0)
	if free := q.b.mem.queueFree(); free < q.b.mem.half/4 {
		if lim := max(free, windowFloor); req.MaxBytes <= 0 || req.MaxBytes > lim {
			req.MaxBytes = lim
		}
		reserved = req.MaxBytes
		q.b.mem.chargeQueue(reserved)
	}
	if !q.b.goBackground(func() { q.pageIn(req, reserved) }) {
		q.b.mem.chargeQueue(-reserved)
		q.closed = true
	}
}

func (q *queue) pageIn(req *queuecore.PageIn, reserved int64) {
	msgs, err := q.b.j.Page(q.b.ctx, PageRequest{Queue: q.name, Group: req.Group, After: req.After, Limit: req.Limit, MaxBytes: req.MaxBytes})
	cms := make([]*queuecore.Msg, len(msgs))
	for i, m := range msgs {
		cms[i] = coreMsg(m)
	}
	q.run(func(now int64) { q.core.Paged(req, cms, err, now) })
	q.b.mem.chargeQueue(-reserved)
}

// --- consumers ----------------------------------------------------------

// addConsumer subscribes sub; false when the queue was deleted meanwhile
// (the caller resolves the name again).
//
// The check and the subscribe are one step under the queue's lock, where
// DeleteQueue and forgetIdleQueues count consumers and mark the queue
// deleted: a SUBSCRIBE cannot attach to a queue they have just taken.
func (q *queue) addConsumer(sub *subscription) bool {
	ok := true
	q.run(func(now int64) {
		if q.deleted {
			ok = false
			return
		}
		q.core.Subscribe(sub.con, now)
	})
	return ok
}

// removeConsumer detaches sub; its unacked messages return to the queue at
// their original positions.
func (q *queue) removeConsumer(sub *subscription) {
	q.run(func(now int64) { q.core.Unsubscribe(sub.con, now) })
}

func (q *queue) consumers() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.core.Consumers()
}

// --- acknowledgement ----------------------------------------------------

// ackResult tells the session what an ACK or NACK did.
type ackResult struct {
	ops   []Op                      // journal work to make it durable
	done  func(ops []Op, err error) // run after the ops commit, with them
	stale bool                      // the token named no current delivery: ignored
}

// parseToken splits an ack token "ID.ATTEMPT" (or a bare message id, the
// 1.0/1.1 form: attempt 0).
func parseToken(token string, byID bool) (id uint64, attempt int, ok bool) {
	idPart, attPart := token, ""
	if !byID {
		if i := strings.IndexByte(token, '.'); i >= 0 {
			idPart, attPart = token[:i], token[i+1:]
		}
	}
	id, err := strconv.ParseUint(idPart, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if attPart != "" {
		a, err := strconv.Atoi(attPart)
		if err != nil || a < 1 {
			return 0, 0, false
		}
		attempt = a
	}
	return id, attempt, true
}

// noteStale counts a stale ACK or NACK of message id on this queue when the
// queue has that message.
func (q *queue) noteStale(id uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.core.NoteStale(id)
}

// holds reports whether sub holds message id.
func (q *queue) holds(sub *subscription, id uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.core.Holds(sub.con, id)
}

// ack acknowledges (cumulatively for ack mode client) and returns the
// journal deletes for the session to submit.
func (q *queue) ack(sub *subscription, token string, byID bool) ackResult {
	return q.ackOrNack(sub, token, byID, func(id uint64, attempt int, now int64) (*queuecore.Batch, bool) {
		return q.core.Ack(sub.con, id, attempt, now)
	})
}

// ackMany applies a run of ACKs of sub (toks, in order) with one core input
// and returns the one journal batch that makes them durable; stale tokens
// are counted as ack does.
func (q *queue) ackMany(sub *subscription, toks []queuecore.AckToken) ackResult {
	var cb *queuecore.Batch
	var stale int
	q.run(func(now int64) { cb, stale = q.core.AckMany(sub.con, toks, now) })
	if stale > 0 {
		q.b.stats.staleAcks.Add(uint64(stale))
	}
	if cb == nil {
		return ackResult{stale: true}
	}
	return q.ackResult(cb, false)
}

// nack returns the deliveries after a back-off, or dead-letters them when
// requeue is false or they reached max_deliveries.
func (q *queue) nack(sub *subscription, token string, byID, requeue bool, why string) ackResult {
	return q.ackOrNack(sub, token, byID, func(id uint64, attempt int, now int64) (*queuecore.Batch, bool) {
		return q.core.NackReason(sub.con, id, attempt, requeue, why, now)
	})
}

func (q *queue) ackOrNack(sub *subscription, token string, byID bool, fn func(id uint64, attempt int, now int64) (*queuecore.Batch, bool)) ackResult {
	id, attempt, ok := parseToken(token, byID)
	if !ok {
		q.mu.Lock()
		q.core.StaleAcks++
		q.mu.Unlock()
		return q.ackResult(nil, true)
	}
	var cb *queuecore.Batch
	var stale bool
	q.run(func(now int64) { cb, stale = fn(id, attempt, now) })
	return q.ackResult(cb, stale)
}

// autoAcked deletes auto-ack deliveries once their MESSAGEs were written:
// one core input per queue.
func autoAcked(ds []*delivery) {
	for len(ds) > 0 {
		q := ds[0].C.Ref.(*subscription).q
		var mine, rest []*delivery
		for _, d := range ds {
			if d.C.Ref.(*subscription).q == q {
				mine = append(mine, d)
			} else {
				rest = append(rest, d)
			}
		}
		q.run(func(now int64) { q.core.Written(mine, now) })
		ds = rest
	}
}

// frameFor builds the MESSAGE of delivery d: the frame and its headers in
// one allocation, the numbers (message id, ack token, timestamp) in one
// string, sliced.
func (q *queue) frameFor(d *delivery) *stomp.Frame {
	m := d.Msg.Ref.(*Message)
	sub := d.C.Ref.(*subscription)
	n := len(m.Headers) + 7
	var f *stomp.Frame
	if n <= 10 {
		fh := &struct {
			f stomp.Frame
			h [10]stomp.Header
		}{}
		f = &fh.f
		f.Headers = fh.h[:0]
	} else {
		f = &stomp.Frame{Headers: make(stomp.Headers, 0, n)}
	}
	f.Command, f.Body = stomp.CmdMessage, m.Body
	// "ID.ATTEMPT" then the timestamp: the message-id is its first part.
	var nb [64]byte
	b := strconv.AppendUint(nb[:0], m.ID, 10)
	idLen := len(b)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(d.Attempt), 10)
	tokLen := len(b)
	if m.Enqueued > 0 {
		b = strconv.AppendInt(b, m.Enqueued, 10)
	}
	nums := string(b)
	f.Headers = append(f.Headers,
		stomp.Header{Key: "subscription", Value: sub.id},
		stomp.Header{Key: "message-id", Value: nums[:idLen]},
		stomp.Header{Key: "destination", Value: q.dest()})
	if sub.ack != ackAuto {
		f.Headers = append(f.Headers, stomp.Header{Key: "ack", Value: nums[:tokLen]})
	}
	if d.Attempt > 1 {
		f.Headers = append(f.Headers, stomp.Header{Key: "redelivered", Value: "true"})
	}
	f.Headers = append(f.Headers, stomp.Header{Key: "delivery-count", Value: nums[idLen+1 : tokLen]})
	if m.Enqueued > 0 {
		f.Headers = append(f.Headers, stomp.Header{Key: hdrTimestampT, Value: nums[tokLen:]})
	}
	for _, h := range m.Headers {
		switch h.Key {
		case hdrTimestampT, "redelivered", "delivery-count", "ack", "message-id", "subscription":
			// The broker's only: a producer's own would come through where
			// the broker sets none (redelivered on a first delivery, ack
			// for an auto subscriber).
			continue
		}
		f.Headers = append(f.Headers, h)
	}
	return f
}

// dest is the queue's destination header, built once.
func (q *queue) dest() string {
	if d := q.destHdr.Load(); d != nil {
		return *d
	}
	d := prefixQueue + q.name
	q.destHdr.Store(&d)
	return d
}

// --- timer --------------------------------------------------------------

// armTimerLocked makes sure the queue wakes up at the core's next due time.
func (q *queue) armTimerLocked(at int64) {
	if at == 0 || q.closed {
		return
	}
	if q.timerAt != 0 && q.timerAt <= at {
		return
	}
	q.timerAt = at
	wait := time.Duration(at-q.nowMs()) * time.Millisecond
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
	q.run(func(now int64) {
		q.timerAt = 0
		if !q.closed {
			q.core.Tick(now)
		}
	})
}

// stop ends the queue's timer and page-ins (broker closing, queue deleted).
func (q *queue) stop() {
	q.mu.Lock()
	q.closed = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.b.mem.chargeQueue(-q.memCharged)
	q.b.cached.Add(-q.cacheCharged)
	q.memCharged, q.cacheCharged = 0, 0
	q.mu.Unlock()
}

// --- logging ------------------------------------------------------------

func (q *queue) logEvent(ev queuecore.Event) {
	switch ev.Kind {
	case queuecore.EvAckTimeout:
		q.b.log.Info("ack timeout: message returned to the queue", "queue", q.name, "id", ev.ID)
	case queuecore.EvPurged:
		if ev.Err != nil {
			q.b.log.Warn("queue purge failed; what it deleted before stays deleted, the rest stays in the queue", "queue", q.name, "messages", ev.Count, "err", ev.Err)
		} else {
			q.b.log.Info("queue purged", "queue", q.name, "messages", ev.Count, "bytes", ev.Bytes)
		}
	case queuecore.EvOutOfOrder:
		if n, ok := q.orderLog.allow(q.b.now()); ok {
			q.b.log.Error("bug: queue commits reported out of order; the message may wait for a restart to be delivered", "queue", q.name, "id", ev.ID, "detail", ev.Reason, "suppressed", n)
		}
	case queuecore.EvJournalFailed:
		if n, ok := q.failLog.allow(q.b.now()); ok {
			q.b.log.Error("journal write failed; the messages concerned are retried after a back-off", "queue", q.name, "what", ev.Reason, "err", ev.Err, "suppressed", n)
		}
	case queuecore.EvPageInFailed:
		if errors.Is(ev.Err, errBrokerClosed) || errors.Is(ev.Err, context.Canceled) {
			return // shutting down: not a read error
		}
		q.pageLog.fails++
		now := q.b.now()
		if !q.pageLog.last.IsZero() && now.Sub(q.pageLog.last) < pageFailLogEvery {
			return
		}
		q.b.log.Warn("queue page-ins failing: the journal could not read the queue's next messages; retrying",
			"queue", q.name, "failures", q.pageLog.fails, "failing_since", time.UnixMilli(ev.Since).UTC().Format(time.RFC3339), "err", ev.Err)
		q.pageLog.last, q.pageLog.fails = now, 0
	case queuecore.EvPageInRecovered:
		q.b.log.Info("queue page-ins recovered", "queue", q.name, "failures", ev.Failures,
			"failed_for", (time.Duration(q.nowMs()-ev.Since) * time.Millisecond).String(), "how", ev.Reason)
	}
}

// pageFailLogEvery: a queue whose page-ins fail logs at most one line
// this often, with the number of failures since the last.
const pageFailLogEvery = 30 * time.Second

// rateLog lets one line through per interval and counts the rest.
type rateLog struct {
	last       time.Time
	suppressed int
}

const rateLogEvery = 10 * time.Second

func (r *rateLog) allow(now time.Time) (suppressed int, ok bool) {
	if !r.last.IsZero() && now.Sub(r.last) < rateLogEvery {
		r.suppressed++
		return 0, false
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	return n, true
}
