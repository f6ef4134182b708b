package appliance

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// queue is one durable queue. Every committed message is in the journal;
// memory holds only a window of the ready ones (the rest is paged in by ID as
// the queue drains), the delayed ones, and those in flight.
//
// Lock order: queue.mu, then session.outMu. Never call Journal.Submit with
// queue.mu held: completions take queue.mu.
type queue struct {
	b    *Broker
	name string
	cfg  QueueConfig // effective settings: defaults with the matching policy
	// isDLQ: a dead-letter queue never dead-letters (no DLQ.DLQ.x): its
	// messages are redelivered however often they are NACKed.
	isDLQ bool

	mu        sync.Mutex
	ready     []*Message // deliverable, sorted by ID
	delayed   delayHeap  // not deliverable before NotBefore
	timer     *time.Timer
	timerAt   time.Time
	inflight  map[uint64]*delivery
	consumers []*subscription
	rr        int

	count   int   // committed messages in the queue, every state
	bytes   int64 // their Size
	pending int   // enqueues submitted, not yet committed (for limits)
	space   chan struct{}

	// paging: messages with ID > memTail may be in the journal only.
	memTail  uint64
	groups   map[string]int // message groups with a message in flight (or in NACK back-off)
	lastID   uint64         // highest committed message ID known to this queue
	spilled  bool
	spillSeq uint64
	paging   bool

	claims   []claim // claims to submit, in dispatch order
	flushing bool
	dead     []pendingDead // dead-letter moves to submit
	drops    []*Message    // expired messages to delete
	timeouts int           // in-flight deliveries with an ack deadline

	ackTimeouts, staleAcks, blocked, blockedNs atomic.Uint64

	enqueued, delivered, redelivered, acked, expired, dlqMoved atomic.Uint64
}

type claim struct {
	d     *delivery
	frame *stomp.Frame
}

// delivery is one delivery attempt of a message to a subscription.
type delivery struct {
	msg      *Message
	sub      *subscription
	attempt  int
	token    string
	released bool // returned, acked or dead-lettered: no longer held
	claimed  bool // claim committed (or not needed): MESSAGE may be sent
	deadline time.Time
}

func newQueue(b *Broker, name string) *queue {
	return &queue{b: b, name: name, cfg: b.cfg.Queues.For(name), isDLQ: strings.HasPrefix(name, b.cfg.Queues.DeadLetterQueue), inflight: map[uint64]*delivery{}, groups: map[string]int{}, space: make(chan struct{})}
}

// --- ready list ---------------------------------------------------------

func (q *queue) insertReadyLocked(m *Message) {
	n := len(q.ready)
	if n == 0 || q.ready[n-1].ID < m.ID {
		q.ready = append(q.ready, m)
		return
	}
	i := sort.Search(n, func(i int) bool { return q.ready[i].ID >= m.ID })
	if i < n && q.ready[i].ID == m.ID {
		return
	}
	q.ready = append(q.ready, nil)
	copy(q.ready[i+1:], q.ready[i:])
	q.ready[i] = m
}

// placeLocked puts a message that is not in flight where it belongs.
func (q *queue) placeLocked(m *Message, now time.Time) {
	if m.NotBefore > now.UnixMilli() {
		heap.Push(&q.delayed, m)
		q.armTimerLocked()
		return
	}
	q.insertReadyLocked(m)
}

func (q *queue) memLocked() int { return len(q.ready) + len(q.delayed) }

// --- enqueue ------------------------------------------------------------

// committed adds a message whose enqueue is durable. reserved says whether
// it was counted by reserve.
func (q *queue) committed(m *Message, reserved bool) {
	q.enqueued.Add(1)
	q.mu.Lock()
	if reserved {
		q.pending--
	}
	q.count++
	q.bytes += int64(m.Size())
	q.lastID = max(q.lastID, m.ID)
	if m.ID <= q.memTail {
		// already paged in by a reader that saw the commit first
	} else if q.spilled || q.memLocked() >= q.cfg.MemoryWindow {
		q.spilled = true
		q.spillSeq++
	} else {
		q.memTail = m.ID
		q.placeLocked(m, q.b.now())
	}
	q.dispatchLocked()
	q.mu.Unlock()
	q.flush()
}

// enqueueFailed undoes the pending count of an enqueue that did not commit.
func (q *queue) enqueueFailed() {
	q.mu.Lock()
	q.pending--
	q.signalSpaceLocked()
	q.mu.Unlock()
}

// reserve counts an enqueue against the limits. It returns false with the
// limit's name when the queue is full.
func (q *queue) reserve(size int) (bool, string, <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.cfg
	if c.MaxMessages > 0 && q.count+q.pending >= c.MaxMessages {
		return false, "max_messages=" + strconv.Itoa(c.MaxMessages), q.space
	}
	if c.MaxBytes > 0 && q.bytes+int64(size) > c.MaxBytes {
		return false, "max_bytes=" + strconv.FormatInt(c.MaxBytes, 10), q.space
	}
	q.pending++
	return true, "", nil
}

func (q *queue) signalSpaceLocked() {
	if c := q.cfg; c.MaxMessages == 0 && c.MaxBytes == 0 {
		return // no limits: nobody waits for space
	}
	close(q.space)
	q.space = make(chan struct{})
}

// --- paging -------------------------------------------------------------

// pageIn loads the next window of messages from the journal when the queue
// has spilled. Safe against concurrent commits: see spillSeq.
func (q *queue) pageIn(ctx context.Context) error {
	q.mu.Lock()
	if q.paging || !q.spilled {
		q.mu.Unlock()
		return nil
	}
	q.paging = true
	after, seq := q.memTail, q.spillSeq
	want := q.cfg.MemoryWindow - q.memLocked()
	q.mu.Unlock()

	if want < 1 {
		want = 1
	}
	msgs, err := q.b.j.Load(ctx, q.name, after, want)

	q.mu.Lock()
	q.paging = false
	if err != nil {
		q.mu.Unlock()
		return err
	}
	now := q.b.now()
	for _, m := range msgs {
		if m.ID <= q.memTail {
			continue
		}
		if _, held := q.inflight[m.ID]; held {
			continue
		}
		q.memTail = m.ID
		q.placeLocked(m, now)
	}
	if len(msgs) < want && q.spillSeq == seq {
		q.spilled = false
	}
	q.dispatchLocked()
	q.mu.Unlock()
	q.flush()
	return nil
}

func (q *queue) maybePageLocked() {
	if q.spilled && !q.paging && q.memLocked() < q.cfg.MemoryWindow*3/4 {
		q.b.wg.Add(1)
		go func() {
			defer q.b.wg.Done()
			if err := q.pageIn(context.Background()); err != nil {
				q.b.log.Error("page in failed", "queue", q.name, "err", err)
			}
		}()
	}
}

// --- dispatch -----------------------------------------------------------

// dispatchLocked hands ready messages to consumers with credit, round robin.
// Client-ack deliveries are claimed in the journal (delivery count raised)
// before their MESSAGE goes out; see flushClaims.
func (q *queue) dispatchLocked() {
	now := q.b.now()
	q.promoteLocked(now)
	for len(q.ready) > 0 && len(q.consumers) > 0 {
		sub := q.nextConsumerLocked()
		if sub == nil {
			break
		}
		i := q.nextReadyLocked()
		if i < 0 {
			break
		}
		m := q.ready[i]
		if i == 0 {
			q.ready[0] = nil
			q.ready = q.ready[1:]
		} else {
			q.ready = append(q.ready[:i], q.ready[i+1:]...)
		}
		if m.Expires != 0 && m.Expires <= now.UnixMilli() {
			q.expireLocked(m)
			continue
		}
		m.Deliveries++
		d := &delivery{msg: m, sub: sub, attempt: m.Deliveries}
		d.token = strconv.FormatUint(m.ID, 10) + "." + strconv.Itoa(d.attempt)
		q.inflight[m.ID] = d
		if m.Group != "" {
			q.groups[m.Group]++
		}
		if to := sub.ackTimeout; to > 0 && sub.ack != ackAuto {
			d.deadline = now.Add(to)
			q.armTimerLocked()
		}
		sub.inflight = append(sub.inflight, d)
		q.delivered.Add(1)
		if m.Deliveries > 1 {
			q.redelivered.Add(1)
		}
		f := q.frameFor(d)
		if sub.ack == ackAuto {
			d.claimed = true
			sub.s.deliverQueue(f, d)
			continue
		}
		q.claims = append(q.claims, claim{d: d, frame: f})
	}
	q.maybePageLocked()
}

// maxGroupScan bounds how far past blocked groups dispatch looks for a
// deliverable message.
const maxGroupScan = 4096

// nextReadyLocked returns the index of the first ready message whose group
// (if any) has nothing in flight, or -1.
func (q *queue) nextReadyLocked() int {
	for i, m := range q.ready {
		if i >= maxGroupScan {
			break
		}
		if m.Group == "" || q.groups[m.Group] == 0 {
			return i
		}
	}
	return -1
}

// endLocked ends a delivery: no longer held by its consumer. A NACKed
// grouped message waiting out its back-off keeps blocking its group (see
// releaseGroupLocked), so that the group's order holds.
func (q *queue) endLocked(d *delivery) {
	d.released = true
	delete(q.inflight, d.msg.ID)
	if g := d.msg.Group; g != "" {
		q.releaseGroupLocked(g)
	}
}

func (q *queue) releaseGroupLocked(g string) {
	if q.groups[g]--; q.groups[g] <= 0 {
		delete(q.groups, g)
	}
}

func (q *queue) nextConsumerLocked() *subscription {
	n := len(q.consumers)
	for i := 0; i < n; i++ {
		sub := q.consumers[(q.rr+i)%n]
		if len(sub.inflight) < sub.prefetch {
			q.rr = (q.rr + i + 1) % n
			return sub
		}
	}
	return nil
}

func (q *queue) frameFor(d *delivery) *stomp.Frame {
	m := d.msg
	f := &stomp.Frame{Command: stomp.CmdMessage, Body: m.Body}
	f.Headers = make(stomp.Headers, 0, len(m.Headers)+7)
	f.Headers = append(f.Headers,
		stomp.Header{Key: "subscription", Value: d.sub.id},
		stomp.Header{Key: "message-id", Value: strconv.FormatUint(m.ID, 10)},
		stomp.Header{Key: "destination", Value: prefixQueue + q.name})
	if d.sub.ack != ackAuto {
		f.Headers = append(f.Headers, stomp.Header{Key: "ack", Value: d.token})
	}
	if m.Deliveries > 1 {
		f.Headers = append(f.Headers, stomp.Header{Key: "redelivered", Value: "true"})
	}
	f.Headers = append(f.Headers, stomp.Header{Key: "delivery-count", Value: strconv.Itoa(m.Deliveries)})
	f.Headers = append(f.Headers, m.Headers...)
	return f
}

// flush submits the journal work collected under the lock.
func (q *queue) flush() {
	q.flushClaims()
	q.flushReleases()
}

// flushClaims submits pending claims to the journal in dispatch order, one
// submitter at a time, and sends each MESSAGE once its claim is durable.
func (q *queue) flushClaims() {
	q.mu.Lock()
	if q.flushing || len(q.claims) == 0 {
		q.mu.Unlock()
		return
	}
	q.flushing = true
	for len(q.claims) > 0 {
		cl := q.claims
		q.claims = nil
		q.mu.Unlock()
		ops := make([]Op, len(cl))
		for i, c := range cl {
			ops[i] = Op{Kind: OpClaim, ID: c.d.msg.ID, Deliveries: c.d.attempt}
		}
		q.b.j.Submit(&Batch{Ops: ops, Done: func(_ *Batch, err error) { q.claimsDone(cl, err) }})
		q.mu.Lock()
	}
	q.flushing = false
	q.mu.Unlock()
}

func (q *queue) claimsDone(cl []claim, err error) {
	q.mu.Lock()
	for _, c := range cl {
		d := c.d
		if d.released {
			continue
		}
		if err != nil {
			q.b.log.Error("claim failed; message stays queued and is retried in a second", "queue", q.name, "id", d.msg.ID, "err", err)
			d.msg.Deliveries--
			// Not at once: a journal that fails (disk full) must not make
			// dispatch spin.
			d.msg.NotBefore = q.b.now().Add(time.Second).UnixMilli()
			q.releaseLocked(d, "claim-failed")
			continue
		}
		d.claimed = true
		d.sub.s.deliverQueue(c.frame, nil)
	}
	q.dispatchLocked()
	q.mu.Unlock()
	q.flush()
}

// --- consumers ----------------------------------------------------------

func (q *queue) addConsumer(sub *subscription) {
	q.mu.Lock()
	q.consumers = append(q.consumers, sub)
	q.dispatchLocked()
	q.mu.Unlock()
	q.flush()
}

// removeConsumer detaches sub and returns its unacked messages to the queue
// at their original positions.
func (q *queue) removeConsumer(sub *subscription) {
	q.mu.Lock()
	for i, c := range q.consumers {
		if c == sub {
			q.consumers = append(q.consumers[:i], q.consumers[i+1:]...)
			break
		}
	}
	sub.closed = true
	held := sub.inflight
	sub.inflight = nil
	for _, d := range held {
		if !d.released {
			q.releaseLocked(d, "disconnect")
		}
	}
	q.dispatchLocked()
	q.mu.Unlock()
	q.flush()
}

// --- acknowledgement ----------------------------------------------------

// ackResult tells the session what an ACK or NACK did.
type ackResult struct {
	ops   []Op                      // journal work to make it durable
	done  func(ops []Op, err error) // run after the ops commit, with them
	stale bool                      // the token named no current delivery: ignored
}

// takeLocked removes the deliveries an ACK/NACK of token covers (cumulative
// for ack mode client) from sub. byID is the 1.0/1.1 form (message-id).
func (q *queue) takeLocked(sub *subscription, token string, byID bool) []*delivery {
	idx := -1
	for i, d := range sub.inflight {
		if (byID && strconv.FormatUint(d.msg.ID, 10) == token) || (!byID && d.token == token) {
			idx = i
			break
		}
	}
	if idx < 0 || !sub.inflight[idx].claimed {
		return nil
	}
	var taken []*delivery
	if sub.ack == ackClient {
		taken = append(taken, sub.inflight[:idx+1]...)
		sub.inflight = append(sub.inflight[:0:0], sub.inflight[idx+1:]...)
	} else {
		taken = []*delivery{sub.inflight[idx]}
		sub.inflight = append(sub.inflight[:idx:idx], sub.inflight[idx+1:]...)
	}
	for _, d := range taken {
		q.endLocked(d)
	}
	return taken
}

// holds reports whether sub holds message id.
func (q *queue) holds(sub *subscription, id uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.inflight[id]
	return d != nil && d.sub == sub
}

// ack removes the deliveries and returns the journal deletes.
func (q *queue) ack(sub *subscription, token string, byID bool) ackResult {
	q.mu.Lock()
	taken := q.takeLocked(sub, token, byID)
	if taken == nil {
		q.mu.Unlock()
		q.staleAcks.Add(1)
		q.b.stats.staleAcks.Add(1)
		return ackResult{stale: true}
	}
	ops := make([]Op, len(taken))
	for i, d := range taken {
		ops[i] = Op{Kind: OpDelete, ID: d.msg.ID}
	}
	q.dispatchLocked()
	q.mu.Unlock()
	q.flush()
	return ackResult{ops: ops, done: func(_ []Op, err error) { q.deleted(taken, err) }}
}

// deleted finishes acks (or drops) once their deletes committed.
func (q *queue) deleted(ds []*delivery, err error) {
	q.mu.Lock()
	for _, d := range ds {
		if err != nil {
			// Still in the journal: make it deliverable again.
			q.b.log.Error("ack not recorded; message will be redelivered", "queue", q.name, "id", d.msg.ID, "err", err)
			q.placeLocked(d.msg, q.b.now())
			continue
		}
		q.count--
		q.bytes -= int64(d.msg.Size())
		q.acked.Add(1)
	}
	q.signalSpaceLocked()
	q.dispatchLocked()
	q.mu.Unlock()
	q.flush()
}

// autoAcked deletes auto-ack deliveries once their MESSAGEs were written:
// one journal batch per queue.
func autoAcked(ds []*delivery) {
	for len(ds) > 0 {
		q := ds[0].sub.q
		var mine, rest []*delivery
		for _, d := range ds {
			if d.sub.q == q {
				mine = append(mine, d)
			} else {
				rest = append(rest, d)
			}
		}
		q.autoAcked(mine)
		ds = rest
	}
}

func (q *queue) autoAcked(ds []*delivery) {
	q.mu.Lock()
	ops := make([]Op, 0, len(ds))
	taken := ds[:0:0]
	subs := map[*subscription]bool{}
	for _, d := range ds {
		if d.released {
			continue
		}
		q.endLocked(d)
		subs[d.sub] = true
		ops = append(ops, Op{Kind: OpDelete, ID: d.msg.ID})
		taken = append(taken, d)
	}
	// One pass per subscription rather than a search and a copy per message.
	for sub := range subs {
		kept := sub.inflight[:0]
		for _, d := range sub.inflight {
			if !d.released {
				kept = append(kept, d)
			}
		}
		clear(sub.inflight[len(kept):])
		sub.inflight = kept
	}
	q.dispatchLocked()
	q.mu.Unlock()
	q.flush()
	if len(ops) > 0 {
		q.b.j.Submit(&Batch{Ops: ops, Done: func(_ *Batch, err error) { q.deleted(taken, err) }})
	}
}

// nack returns the deliveries after a back-off, or dead-letters them when
// requeue is false or they reached max_deliveries.
func (q *queue) nack(sub *subscription, token string, byID, requeue bool) ackResult {
	q.mu.Lock()
	taken := q.takeLocked(sub, token, byID)
	if taken == nil {
		q.mu.Unlock()
		q.staleAcks.Add(1)
		q.b.stats.staleAcks.Add(1)
		return ackResult{stale: true}
	}
	var ops []Op
	now := q.b.now()
	var dead []pendingDead
	for _, d := range taken {
		m := d.msg
		switch {
		case !requeue && !q.isDLQ:
			dead = append(dead, pendingDead{d: d, idx: len(ops), reason: "nack"})
			ops = append(ops, q.deadLetterOp(m, "nack"))
		case m.Deliveries >= q.cfg.MaxDeliveries && !q.isDLQ:
			dead = append(dead, pendingDead{d: d, idx: len(ops), reason: "max-deliveries"})
			ops = append(ops, q.deadLetterOp(m, "max-deliveries"))
		default:
			if m.Group != "" {
				// Still blocks its group until it is ready again.
				q.groups[m.Group]++
				m.holdsGroup = true
			}
			m.NotBefore = now.Add(q.backoff(m.Deliveries)).UnixMilli()
			ops = append(ops, Op{Kind: OpRelease, ID: m.ID, NotBefore: m.NotBefore})
			q.placeLocked(m, now)
		}
	}
	q.dispatchLocked()
	q.mu.Unlock()
	q.flush()
	return ackResult{ops: ops, done: func(ops []Op, err error) {
		if len(dead) > 0 {
			q.deadLettered(dead, ops, err)
		}
	}}
}

// backoff is the redelivery delay after n deliveries: exponential from
// redelivery_delay_min, capped at redelivery_delay_max, with ±25% jitter.
func (q *queue) backoff(n int) time.Duration {
	c := q.cfg
	d := c.RedeliveryMin.Duration
	for i := 1; i < n && d < c.RedeliveryMax.Duration; i++ {
		d *= 2
	}
	if d > c.RedeliveryMax.Duration {
		d = c.RedeliveryMax.Duration
	}
	if d <= 0 {
		return 0
	}
	j := time.Duration(rand.Int64N(int64(d)/2+1)) - d/4
	return d + j
}
