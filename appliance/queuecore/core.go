package queuecore

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"strconv"
)

// Defaults for Config.
const (
	DefaultWindow        = 10000
	DefaultGroupOverflow = 4
	DefaultRetryMin      = 250    // ms
	DefaultRetryMax      = 30_000 // ms
)

// Config is one queue's effective settings.
type Config struct {
	Window        int   // ready messages kept in memory; the rest is paged in
	WindowBytes   int64 // and their bytes (Size); 0 = no byte bound
	GroupOverflow int   // multiples of Window that blocked groups may add to memory
	MaxMessages   int   // 0 = no limit
	MaxBytes      int64 // 0 = no limit
	MaxDeliveries int   // dead-letter after this many; 0 = never
	RedeliveryMin int64 // ms, NACK back-off, doubled per delivery
	RedeliveryMax int64 // ms
	DeadLetter    bool  // false for a dead-letter queue: it never dead-letters
	ExpiredToDLQ  bool  // expired messages move to the DLQ instead of being dropped
	RetryMin      int64 // ms back-off of messages whose journal write failed
	RetryMax      int64 // ms
	// CacheBytes bounds the backlog cache (cache.go): messages committed
	// past the window kept in memory for the page-in that reaches them;
	// 0 = none.
	CacheBytes int64
}

// Stats are the queue's counters.
type Stats struct {
	Enqueued, Delivered, Redelivered, Acked, Expired, DeadLettered uint64
	StaleAcks, AckTimeouts, JournalFailures                        uint64
	// CacheHits: page-ins answered from the backlog cache instead of
	// the journal.
	CacheHits uint64
}

// Core is one queue's state machine. The zero value is not usable: New.
type Core struct {
	cfg Config
	rng *rand.Rand

	ready     readyIndex
	delayed   delayHeap
	byID      map[uint64]*Msg // every message in memory, any state
	memBytes  int64           // their sizes (MemBytes)
	windowCap int64           // SetWindowCap: a bound on memBytes; 0 = none
	// delayedBytes is the size of the delayed messages in memory.
	delayedBytes int64
	flight       map[uint64]*Delivery
	consumers    []*Consumer
	rr           int

	count        int   // committed messages of the queue, every state
	bytes        int64 // their Size
	pendingN     int   // reserved enqueues not yet committed
	pendingBytes int64

	lastID    uint64 // highest committed ID of this queue
	memTail   uint64 // every message with ID <= memTail is in memory or gone
	spilled   bool   // the journal may hold messages > memTail
	spillSeq  uint64
	goneAhead map[uint64]string // left before being paged in (requeued), with their group: a page-in read earlier may still bring them
	pageEpoch uint64            // purges committed: a page-in read before one is stale
	// readEpoch: purge batches and requeue moves committed; a requeue's
	// journal read before one may hold rows they took (MoveOut).
	readEpoch uint64
	// parked: groups whose ready messages were dropped from memory so that
	// paging could go past them (the window was full of blocked groups).
	// Messages of a parked group with ID >= parked[g] and <= memTail are in
	// the journal only; once the group has nothing held or ready, a rescan
	// page-in loads them.
	parked      map[string]uint64
	stash       map[string][]*Msg // ready messages of parked groups at or past parked[g] (back from flight or delay)
	paging      bool
	pageRetryAt int64
	// The run of failed page-ins (PageInFailing): whether there is one,
	// since the first failure (ms), how many, and the last one's error.
	pageFailing   bool
	pageFailSince int64
	pageFails     int
	pageFailErr   string

	purging      bool
	deadlines    int    // deliveries with an ack deadline
	nextDeadline int64  // earliest of them (a lower bound)
	failStreak   int    // consecutive failed rounds of journal work
	streakSeq    uint64 // nextSeq when failStreak last grew

	// markHi is the highest delivered mark the core has emitted (its
	// journal value after Recover). The journal counts one delivery for
	// every message with ID <= mark and no claim row of its own, so a first
	// delivery in queue order costs one raise of the mark per batch
	// instead of a claim row (written before the MESSAGE) and its delete
	// (with the message). The core keeps the mark true: it raises it to a
	// message's ID only when no message with a lower ID can still be
	// undelivered without a row (canMark), and gives a row of its own
	// (count 0) to every undelivered message it places at or below the
	// mark (place: a failed claim, delete or move put back), in the delay
	// heap, or leaving, where the mark could pass it.
	markHi uint64
	// repin: messages whose row of count 0 (place, or a revert) failed,
	// written again with the next batch the core emits, or at repinAt.
	repin   []*Msg
	repinAt int64
	// pinsOut: rows of count 0 emitted whose outcome is not known yet. The
	// mark is raised only with none outstanding and none to write again:
	// a raise that committed while such a row failed would count a
	// delivery of a message never delivered until the row is written
	// again (and a crash in between would keep it).
	pinsOut int

	// The backlog cache (cache.go): cache[cacheHead:] in ID order.
	cache      []*Msg
	cacheHead  int
	cacheBytes int64
	cacheAll   bool   // the cache stands for every reported row past cacheFrom
	cacheFrom  uint64 // it stands for rows past this ID only (cache.go)
	cacheOff   bool   // commits were reported out of order: never again
	cacheCap   int64  // SetCacheCap

	purgeUpTo  uint64            // the running purge deletes every message <= purgeUpTo
	purgeKeep  map[uint64]string // except these (with their group)
	purgeFrom  uint64            // what its batches committed so far: every message <= purgeFrom is gone (but purgeKeep)
	purgeCount int               // and how many messages that was
	purgeBytes int64             // of what size

	nextSeq uint64
	pending map[uint64]*pend
	work    pend // journal work of the current input, emitted at its end

	out Output
	Stats
}

// pend is a batch waiting for its outcome: ops and, aligned with them, the
// deliveries they finish (claims).
type pend struct {
	ops []Op
	ds  []*Delivery
}

// Output is what the core asks of the shell; see the package doc.
type Output struct {
	Batches []*Batch
	Deliver []*Delivery
	PageIn  *PageIn
	Moved   []Moved
	Events  []Event
	Wake    int64
	Space   bool
}

// New returns an empty queue core. seed makes its random choices (NACK
// back-off jitter) reproducible.
func New(cfg Config, seed uint64) *Core {
	return &Core{
		cfg:     normalize(cfg),
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		byID:    map[uint64]*Msg{},
		flight:  map[uint64]*Delivery{},
		pending: map[uint64]*pend{},
		// Nothing in the journal yet: an empty cache stands for it.
		cacheAll: true,
		cacheCap: noCacheCap,
	}
}

// normalize applies the defaults of Config.
func normalize(cfg Config) Config {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.GroupOverflow <= 0 {
		cfg.GroupOverflow = DefaultGroupOverflow
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = DefaultRetryMin
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(DefaultRetryMax, cfg.RetryMin)
	}
	if cfg.RedeliveryMax < cfg.RedeliveryMin {
		cfg.RedeliveryMax = cfg.RedeliveryMin
	}
	return cfg
}

// Config returns the core's settings.
func (c *Core) Config() Config { return c.cfg }

// SetConfig replaces the settings (a configuration reload), with New's
// defaults applied. The limits apply from the next Reserve, MaxDeliveries from
// the next delivery, NACK or failed delivery, the redelivery back-off from
// the next NACK or failed delivery, the window
// from the next page-in. Nothing changes for what is already in memory: a
// delayed message keeps its due time, and a window lowered below what memory
// holds comes down as messages leave (page-ins wait; blocked groups are
// parked as usual). Producers blocked on a full queue are told to retry
// (Space).
func (c *Core) SetConfig(cfg Config, now int64) {
	c.cfg = normalize(cfg)
	c.cacheFit()
	c.out.Space = true
	c.end(now)
}

// Take returns the outputs collected since the last Take.
func (c *Core) Take() Output {
	o := c.out
	c.out = Output{}
	o.Wake = c.wake()
	return o
}

func (c *Core) wake() int64 {
	var w int64
	at := func(t int64) {
		if t > 0 && (w == 0 || t < w) {
			w = t
		}
	}
	if len(c.delayed) > 0 {
		at(c.delayed[0].NotBefore)
	}
	if c.deadlines > 0 {
		at(c.nextDeadline)
	}
	if (c.spilled || len(c.parked) > 0) && !c.paging && (!c.purging || c.pageFailing) && c.pageRetryAt > 0 {
		at(c.pageRetryAt)
	}
	if len(c.repin) > 0 {
		at(c.repinAt)
	}
	return w
}

// --- limits and enqueue -------------------------------------------------

// Reserve counts an enqueue of size bytes against the limits before it is
// journaled, counting enqueues still pending commit. It returns false and
// the setting that refused it when the queue is full.
func (c *Core) Reserve(size int64) (bool, string) {
	if c.cfg.MaxMessages > 0 && c.count+c.pendingN >= c.cfg.MaxMessages {
		return false, "max_messages=" + strconv.Itoa(c.cfg.MaxMessages)
	}
	if c.cfg.MaxBytes > 0 && c.bytes+c.pendingBytes+size > c.cfg.MaxBytes {
		return false, "max_bytes=" + strconv.FormatInt(c.cfg.MaxBytes, 10)
	}
	c.pendingN++
	c.pendingBytes += size
	return true, ""
}

// Unreserve returns a reservation whose enqueue did not happen (failed, or
// a duplicate).
func (c *Core) Unreserve(size int64) {
	c.pendingN--
	c.pendingBytes -= size
	c.out.Space = true
}

// Recover sets what the journal holds for the queue at startup (mark: its
// delivered mark, see Op.Mark); the messages themselves are paged in.
func (c *Core) Recover(count int, bytes int64, maxID, mark uint64, now int64) {
	c.count, c.bytes, c.lastID = count, bytes, maxID
	c.markHi = mark
	c.spilled = count > 0
	c.cacheClear(!c.spilled)
	c.dispatch(now)
}

// Committed adds a message whose enqueue (or move into this queue) is
// durable. reserved says whether Reserve counted it.
func (c *Core) Committed(m *Msg, reserved bool, now int64) {
	if reserved {
		c.pendingN--
		c.pendingBytes -= m.Size
	}
	c.count++
	c.bytes += m.Size
	prev := c.lastID
	if m.ID <= c.lastID {
		c.cacheOff = true
		c.cacheClear(!c.spilled)
		c.out.Events = append(c.out.Events, Event{Kind: EvOutOfOrder, ID: m.ID, Reason: "commit of " + strconv.FormatUint(m.ID, 10) + " reported after " + strconv.FormatUint(c.lastID, 10)})
	}
	c.lastID = max(c.lastID, m.ID)
	c.Enqueued++
	switch {
	case m.ID <= c.memTail || c.byID[m.ID] != nil:
		// already paged in by a load that saw the commit first
	case c.spilled || c.windowFull():
		c.spilled = true
		c.spillSeq++
		c.cacheAdd(m, prev)
	case c.inHole(m):
		c.memTail = m.ID // its group's rescan loads it
		c.spillSeq++
	default:
		c.memTail = m.ID
		c.place(m, now)
	}
	c.end(now)
}

// hold records m as in memory.
func (c *Core) hold(m *Msg) {
	if old := c.byID[m.ID]; old != nil {
		c.memBytes -= old.Size
	}
	c.byID[m.ID] = m
	c.memBytes += m.Size
}

// unhold records that message id left memory.
func (c *Core) unhold(id uint64) {
	if old := c.byID[id]; old != nil {
		c.memBytes -= old.Size
		delete(c.byID, id)
	}
}

// Idle reports whether the queue holds nothing at all: no message (in the
// journal or on its way in), no consumer, no journal work outstanding, no
// page-in. Such a queue can be forgotten and made again from nothing.
func (c *Core) Idle() bool {
	return c.count == 0 && c.pendingN == 0 && len(c.pending) == 0 && len(c.consumers) == 0 &&
		len(c.byID) == 0 && !c.paging && len(c.work.ops) == 0
}

// MemBytes is the size of every message the core holds in memory (ready,
// delayed, in flight or leaving): what the queue weighs in the broker's
// memory budget.
func (c *Core) MemBytes() int64 { return c.memBytes }

// SetWindowCap bounds the bytes of every message the core holds in memory
// (MemBytes: ready, delayed, in flight) to capBytes while the broker's
// memory budget is short (0: no such bound; Config.WindowBytes still
// bounds the ready window). Messages committed past it stay in the
// journal, and page-ins load at most what is left under it, as past the
// configured window; with nothing ready, a page-in loads one message past
// it, so that consumers never starve. Messages already in memory stay.
func (c *Core) SetWindowCap(capBytes int64, now int64) {
	if capBytes == c.windowCap {
		return
	}
	c.windowCap = capBytes
	c.end(now)
}

// capRoom is what SetWindowCap leaves for more messages in memory
// (math.MaxInt64 without a cap).
func (c *Core) capRoom() int64 {
	if c.windowCap <= 0 {
		return math.MaxInt64
	}
	return c.windowCap - c.memBytes
}

func (c *Core) windowFull() bool {
	if c.capRoom() <= 0 {
		return true
	}
	if wb := c.cfg.WindowBytes; wb > 0 && (c.ready.eligBytes >= wb || c.ready.bytes >= wb*int64(c.cfg.GroupOverflow)) {
		return true
	}
	return len(c.ready.elig) >= c.cfg.Window || c.ready.n >= c.cfg.Window*c.cfg.GroupOverflow
}

// place puts a message that is in memory and not held where it belongs.
func (c *Core) place(m *Msg, now int64) {
	c.hold(m)
	if bare(m) && (m.ID <= c.markHi || m.NotBefore > now) {
		// Undelivered at or below the mark (its claim, delete or move
		// failed after the mark passed it), or delayed (the mark may pass
		// it while it waits): a row of its own says 0.
		c.claimRow(m, 0, nil)
	}
	if m.NotBefore > now {
		m.state = stDelayed
		heap.Push(&c.delayed, m)
		c.delayedBytes += m.Size
		return
	}
	if m.holdsGroup {
		m.holdsGroup = false
		c.ready.release(m.Group)
	}
	if c.inHole(m) {
		// Its group's earlier messages are still in the journal: it
		// waits for them (the group's rescan).
		m.state = stParked
		if c.stash == nil {
			c.stash = map[string][]*Msg{}
		}
		c.stash[m.Group] = append(c.stash[m.Group], m)
		return
	}
	c.ready.add(m)
}

// unstash makes the stashed messages of group g with ID < below ready.
func (c *Core) unstash(g string, below uint64) {
	kept := c.stash[g][:0]
	for _, m := range c.stash[g] {
		if m.ID < below {
			c.ready.add(m)
		} else {
			kept = append(kept, m)
		}
	}
	if len(kept) == 0 {
		delete(c.stash, g)
	} else {
		c.stash[g] = kept
	}
}

// unstashOne takes stashed message m out (requeue, purge).
func (c *Core) unstashOne(m *Msg) {
	s := c.stash[m.Group]
	for i, x := range s {
		if x == m {
			s = append(s[:i], s[i+1:]...)
			break
		}
	}
	if len(s) == 0 {
		delete(c.stash, m.Group)
	} else {
		c.stash[m.Group] = s
	}
	m.state = stNone
}

// --- paging -------------------------------------------------------------

// maybePage asks for the next page-in when one is due. It reports
// whether it answered one from the backlog cache (dispatch goes on).
func (c *Core) maybePage(now int64) bool {
	// While a purge runs nothing is dispatched, and what a page-in loaded
	// would mostly be the purge's next batch to delete: paging waits,
	// unless page-ins are failing (a read that works ends the run of
	// failures, which the shell reports, however long the purge).
	if (!c.spilled && len(c.parked) == 0) || c.paging || c.purging && !c.pageFailing || now < c.pageRetryAt {
		return false
	}
	// Due: from now on the window decides (a Wake in the past would spin
	// the shell's timer).
	c.pageRetryAt = 0
	// A parked group with nothing held or ready: load what it left in the
	// journal (lowest first, for a reproducible order).
	g, from := "", uint64(0)
	for pg, p := range c.parked {
		if c.ready.groups[pg] == nil && (from == 0 || p < from || p == from && pg < g) {
			g, from = pg, p
		}
	}
	if from != 0 {
		c.paging = true
		c.out.PageIn = &PageIn{After: from - 1, Limit: c.cfg.Window, MaxBytes: capBytes(max(c.cfg.WindowBytes, 0), c.capRoom()), seq: c.spillSeq, epoch: c.pageEpoch, Group: g, scan: true}
		return false
	}
	// At least 1: a window of 1 pages too.
	if !c.spilled || len(c.ready.elig) >= max(1, c.cfg.Window*3/4) {
		return false
	}
	if wb := c.cfg.WindowBytes; wb > 0 && c.ready.eligBytes >= max(1, wb*3/4) {
		return false
	}
	// Up to Window eligible messages; messages of blocked groups may add up
	// to (GroupOverflow-1) windows more. Beyond that, the blocked group with
	// the most ready messages is parked, so that no number of blocked
	// messages hides the rest of the queue.
	limit, maxBytes := c.pageBudget()
	for limit < 1 && c.park() {
		limit, maxBytes = c.pageBudget()
	}
	if limit < 1 {
		return false
	}
	req := &PageIn{After: c.memTail, Limit: limit, MaxBytes: maxBytes, seq: c.spillSeq, epoch: c.pageEpoch}
	if msgs, ok := c.fromCache(req); ok {
		c.CacheHits++
		c.pageRecovered("answered from the backlog cache")
		c.loaded(req, msgs, now)
		return true
	}
	c.paging = true
	c.out.PageIn = req
	return false
}

// pageBudget is how many messages, and bytes (0: no bound), a page-in may
// load; a count below 1 means none.
func (c *Core) pageBudget() (int, int64) {
	limit := min(c.cfg.Window-len(c.ready.elig), c.cfg.Window*c.cfg.GroupOverflow-c.ready.n)
	room := c.capRoom()
	if room < 1 {
		if len(c.ready.elig) > 0 || (c.cfg.WindowBytes > 0 && c.delayedBytes >= c.cfg.WindowBytes) {
			return 0, 0
		}
		// Nothing to deliver: one message more, so that consumers do not
		// starve under a cap (the journal always returns one row); but
		// delayed messages, which paging must hold to pass, no further
		// than the configured byte window.
		room = 1
	}
	wb := c.cfg.WindowBytes
	if wb <= 0 {
		return limit, capBytes(0, room)
	}
	maxBytes := min(wb-c.ready.eligBytes, wb*int64(c.cfg.GroupOverflow)-c.ready.bytes, room)
	if maxBytes < 1 {
		return 0, 0
	}
	return limit, maxBytes
}

// capBytes is a page-in's byte bound: b (0: none) lowered to room.
func capBytes(b, room int64) int64 {
	if room == math.MaxInt64 {
		return b
	}
	if b <= 0 || room < b {
		return max(room, 1)
	}
	return b
}

// cutByBytes reports whether a page-in stopped at its byte budget (so it
// says nothing of what the journal holds beyond).
func cutByBytes(req *PageIn, msgs []*Msg) bool {
	if req.MaxBytes <= 0 {
		return false
	}
	var n int64
	for _, m := range msgs {
		n += m.Size
	}
	return n >= req.MaxBytes
}

// park drops the ready messages of the blocked group with the most of them
// from memory (they stay in the journal). It returns false when no group
// is blocked with ready messages.
func (c *Core) park() bool {
	var g string
	var gr *group
	for name, x := range c.ready.groups {
		if x.held > 0 && len(x.ready) > 0 && (gr == nil || len(x.ready) > len(gr.ready) || len(x.ready) == len(gr.ready) && name < g) {
			g, gr = name, x
		}
	}
	if gr == nil {
		return false
	}
	from := gr.ready[0].ID
	for _, m := range append([]*Msg(nil), gr.ready...) {
		c.ready.remove(m)
		if m.Deliveries > 0 || m.pinned {
			// Delivered before: memory may count more deliveries than the
			// journal (auto-ack). Or given a row of count 0 that may not
			// be committed yet: a rescan could read the message without
			// that row (ClaimRow false), and its first delivery would then
			// raise the mark over a row of 0 (a count of 0 for a MESSAGE
			// that went out). It stays, waiting for the rescan.
			m.state = stParked
			if c.stash == nil {
				c.stash = map[string][]*Msg{}
			}
			c.stash[g] = append(c.stash[g], m)
			continue
		}
		c.unhold(m.ID)
	}
	if p, ok := c.parked[g]; !ok || from < p {
		if c.parked == nil {
			c.parked = map[string]uint64{}
		}
		c.parked[g] = from
	}
	return true
}

// inHole reports whether m is one of the messages its parked group left in
// the journal.
func (c *Core) inHole(m *Msg) bool {
	p, ok := c.parked[m.Group]
	return ok && m.Group != "" && m.ID >= p
}

// Paged delivers the messages a PageIn loaded (in ID order), or its error.
func (c *Core) Paged(req *PageIn, msgs []*Msg, err error, now int64) {
	c.paging = false
	if err != nil {
		c.pageRetryAt = now + c.retryDelay(1)
		c.JournalFailures++
		if !c.pageFailing {
			c.pageFailing, c.pageFailSince, c.pageFails = true, now, 0
		}
		c.pageFails++
		c.pageFailErr = err.Error()
		c.out.Events = append(c.out.Events, Event{Kind: EvPageInFailed, Reason: "page in", Err: err, Since: c.pageFailSince, Failures: c.pageFails})
		c.end(now)
		return
	}
	c.pageRetryAt = 0
	c.pageRecovered("read the journal")
	if req.epoch != c.pageEpoch {
		// A purge committed since: what was read may be gone. Read again.
		c.end(now)
		return
	}
	if req.scan {
		c.rescanned(req, msgs, now)
		c.end(now)
		return
	}
	c.loaded(req, msgs, now)
	c.end(now)
}

// loaded places what a page-in (not a rescan) read, from the journal or
// the backlog cache.
func (c *Core) loaded(req *PageIn, msgs []*Msg, now int64) {
	for _, m := range msgs {
		if m.ID <= c.memTail {
			continue
		}
		if c.byID[m.ID] != nil || c.isGone(m.ID) {
			continue // moving out, or moved out, before it was paged in
		}
		c.memTail = m.ID
		if c.inHole(m) {
			continue // its group's rescan loads it
		}
		c.placePaged(m, now)
	}
	c.forgetGone()
	if len(msgs) < req.Limit && !cutByBytes(req, msgs) && c.spillSeq == req.seq {
		c.spilled = false
		// Nothing reported lies past memTail: the cache is empty and
		// stands for the journal again.
		c.cacheClear(true)
		return
	}
	c.cacheTrim()
}

// placePaged places a message loaded from the journal.
func (c *Core) placePaged(m *Msg, now int64) {
	if m.Group != "" && m.Deliveries > 0 && m.NotBefore > now {
		// A NACK's back-off made durable before a restart: it still
		// heads its group, as it did before.
		m.holdsGroup = true
		c.ready.hold(m.Group)
	}
	c.place(m, now)
}

// rescanned places what a parked group left in the journal, up to memTail.
func (c *Core) rescanned(req *PageIn, msgs []*Msg, now int64) {
	g := req.Group
	from, ok := c.parked[g]
	if !ok || from != req.After+1 {
		return // unparked or parked anew meanwhile: rescan again
	}
	// Done when the journal had no more, and nothing was committed into
	// the hole since it was read.
	last, done := req.After, len(msgs) < req.Limit && !cutByBytes(req, msgs) && c.spillSeq == req.seq
	for _, m := range msgs {
		if m.ID > c.memTail {
			done = true
			break
		}
		last = m.ID
		if m.Group != g || m.ID < from || c.byID[m.ID] != nil || c.isGone(m.ID) {
			continue
		}
		c.placePaged(m, now)
	}
	if done || last >= c.memTail {
		delete(c.parked, g)
		c.unstash(g, ^uint64(0))
	} else {
		c.parked[g] = max(from, last+1)
		c.unstash(g, c.parked[g])
	}
	c.forgetGone()
}

// PageInFailing reports the run of failed page-ins the queue is in: since
// when (ms, the first failure of the run), the last failure's error, and
// whether there is one. A run starts at a failed page-in and ends at the
// next page-in that succeeds (read from the journal, or answered from the
// backlog cache), or once the queue has nothing left in the journal to
// page in (a purge took it). The shell reports a run that lasts too long
// as not ready.
func (c *Core) PageInFailing() (since int64, err string, failing bool) {
	return c.pageFailSince, c.pageFailErr, c.pageFailing
}

// pageRecovered ends the run of failed page-ins, if any.
func (c *Core) pageRecovered(how string) {
	if !c.pageFailing {
		return
	}
	c.out.Events = append(c.out.Events, Event{Kind: EvPageInRecovered, Reason: how, Since: c.pageFailSince, Failures: c.pageFails})
	c.pageFailing, c.pageFailSince, c.pageFails, c.pageFailErr = false, 0, 0, ""
}

func (c *Core) isGone(id uint64) bool {
	_, ok := c.goneAhead[id]
	return ok
}

// forgetGone forgets the messages that left before being paged in once no
// page-in can bring them any more.
func (c *Core) forgetGone() {
	for id, g := range c.goneAhead {
		if id <= c.memTail && !c.inHole(&Msg{ID: id, Group: g}) {
			delete(c.goneAhead, id)
		}
	}
}

// --- consumers ----------------------------------------------------------

// Subscribe adds a consumer.
func (c *Core) Subscribe(con *Consumer, now int64) {
	if con.Prefetch < 1 {
		con.Prefetch = 1
	}
	c.consumers = append(c.consumers, con)
	c.end(now)
}

// Unsubscribe removes a consumer; what it held returns to the queue at its
// original position (or is dead-lettered at max_deliveries).
func (c *Core) Unsubscribe(con *Consumer, now int64) {
	for i, x := range c.consumers {
		if x == con {
			c.consumers = append(c.consumers[:i], c.consumers[i+1:]...)
			break
		}
	}
	con.closed = true
	held := con.inflight
	con.inflight, con.inflightBytes = nil, 0
	for _, d := range held {
		if !d.claimed {
			d.abandoned = true // finished when its claim completes
			c.dropDeadline(d)
			continue
		}
		c.release(d, now)
	}
	c.end(now)
}

// Consumers is the number of subscribed consumers.
func (c *Core) Consumers() int { return len(c.consumers) }

// NoteStale counts a stale ack of message id when the queue has the
// message (its holder changed); false when it does not.
func (c *Core) NoteStale(id uint64) bool {
	if c.byID[id] == nil {
		return false
	}
	c.StaleAcks++
	return true
}

// Holds reports whether con holds message id.
func (c *Core) Holds(con *Consumer, id uint64) bool {
	d := c.flight[id]
	return d != nil && d.C == con && !d.abandoned
}

// --- dispatch -----------------------------------------------------------

// Tick is the clock input: delayed messages due, ack deadlines passed.
func (c *Core) Tick(now int64) { c.end(now) }

// end finishes every input: dispatch, then emit the journal work.
func (c *Core) end(now int64) {
	c.dispatch(now)
	if c.pageFailing && !c.paging && !c.spilled && len(c.parked) == 0 {
		c.pageRecovered("nothing left to page in")
	}
	if len(c.repin) > 0 && (len(c.work.ops) > 0 || now >= c.repinAt) {
		c.repinFailed()
	}
	if len(c.work.ops) > 0 {
		c.emit(c.work)
		c.work = pend{}
	}
}

func (c *Core) emit(p pend) *Batch {
	c.nextSeq++
	pp := p
	c.pending[c.nextSeq] = &pp
	b := &Batch{Seq: c.nextSeq, Ops: p.ops}
	c.out.Batches = append(c.out.Batches, b)
	return b
}

func (c *Core) addWork(op Op, d *Delivery) {
	c.work.ops = append(c.work.ops, op)
	c.work.ds = append(c.work.ds, d)
}

func (c *Core) dispatch(now int64) {
	c.promote(now)
	for c.dispatchOnce(now) {
	}
}

// dispatchOnce delivers what it can; it reports whether a page-in was
// answered from the backlog cache meanwhile (more may go out: nothing
// else became due, so promote need not run again).
func (c *Core) dispatchOnce(now int64) bool {
	if !c.purging {
		for len(c.ready.elig) > 0 {
			con := c.nextConsumer()
			if con == nil {
				break
			}
			m := c.ready.pop()
			m.holdsGroup = m.Group != "" // it holds its group until it leaves or is ready again
			if m.Expires != 0 && m.Expires <= now {
				c.expire(m)
				continue
			}
			if c.cfg.DeadLetter && c.cfg.MaxDeliveries > 0 && m.Deliveries >= c.cfg.MaxDeliveries {
				// Delivered max_deliveries times already, and the last
				// delivery ended without a release that would have
				// dead-lettered it (a crash; or a reload lowered the
				// limit).
				c.deadLetter(m, "max-deliveries")
				continue
			}
			m.Deliveries++
			m.state = stFlight
			d := &Delivery{Msg: m, C: con, Attempt: m.Deliveries}
			c.flight[m.ID] = d
			con.inflight = append(con.inflight, d)
			con.inflightBytes += m.Size
			c.Delivered++
			if m.Deliveries > 1 {
				c.Redelivered++
			}
			if con.Mode == AckAuto {
				d.claimed = true
				c.out.Deliver = append(c.out.Deliver, d)
				continue
			}
			if con.AckTimeout > 0 {
				d.deadline = now + con.AckTimeout
				if c.deadlines == 0 || d.deadline < c.nextDeadline {
					c.nextDeadline = d.deadline
				}
				c.deadlines++
			}
			if c.canMark(m) {
				c.markHi = m.ID
				c.addWork(Op{Kind: OpClaim, Msg: m, Deliveries: d.Attempt, Mark: true}, d)
				continue
			}
			c.claimRow(m, d.Attempt, d)
		}
	}
	return c.maybePage(now)
}

// canMark reports whether the first delivery of m, just taken from the
// ready index, may raise the delivered mark to m.ID: every message of the
// queue with a lower ID is gone, delivered, or has a row of its own. Below
// m.ID nothing is in the journal only (no parked group: messages up to
// memTail are in memory), nothing ready (m was the first eligible message
// and no group holds ready messages back), and delayed messages have rows
// (place). Messages in flight count at least one delivery; messages
// leaving and claims in flight that fail come back through place.
func (c *Core) canMark(m *Msg) bool {
	return m.Deliveries == 1 && !m.ClaimRow && m.ID > c.markHi && len(c.parked) == 0 && c.ready.n == len(c.ready.elig) &&
		c.pinsOut == 0 && len(c.repin) == 0
}

// repinFailed writes again the rows of count 0 that failed, for the
// messages still undelivered in memory (leaving ones included: should the
// move fail, they stay).
func (c *Core) repinFailed() {
	for _, m := range c.repin {
		if c.byID[m.ID] != m || m.Deliveries != 0 {
			// Gone, or delivered since: place pins it again if it comes
			// back undelivered (its claim failed).
			m.pinned = false
			continue
		}
		c.addWork(c.pin(m), nil)
	}
	clear(c.repin)
	c.repin = c.repin[:0]
}

// claimRow emits a claim row: m's count is n whatever the mark says.
func (c *Core) claimRow(m *Msg, n int, d *Delivery) {
	if n == 0 {
		c.addWork(c.pin(m), d)
		return
	}
	m.ClaimRow = true
	c.addWork(Op{Kind: OpClaim, Msg: m, Deliveries: n}, d)
}

// pin returns a claim row of count 0 for m, counted in pinsOut until Done
// reports it.
func (c *Core) pin(m *Msg) Op {
	m.ClaimRow, m.pinned = true, true
	c.pinsOut++
	return Op{Kind: OpClaim, Msg: m}
}

func (c *Core) nextConsumer() *Consumer {
	n := len(c.consumers)
	for i := 0; i < n; i++ {
		con := c.consumers[(c.rr+i)%n]
		if len(con.inflight) < con.Prefetch && (con.MaxBytes <= 0 || con.inflightBytes < con.MaxBytes || len(con.inflight) == 0) {
			c.rr = (c.rr + i + 1) % n
			return con
		}
	}
	return nil
}

// promote makes due delayed messages ready and ends deliveries whose ack
// deadline passed.
func (c *Core) promote(now int64) {
	for len(c.delayed) > 0 && c.delayed[0].NotBefore <= now {
		m := heap.Pop(&c.delayed).(*Msg)
		c.delayedBytes -= m.Size
		c.place(m, now)
	}
	if c.deadlines == 0 || now < c.nextDeadline {
		return
	}
	c.deadlines, c.nextDeadline = 0, 0
	var expired []*Delivery
	for _, d := range c.flight {
		if d.deadline == 0 || d.ended || d.abandoned {
			continue
		}
		if d.deadline <= now {
			if d.claimed {
				expired = append(expired, d)
				d.deadline = 0 // not counted any more
				continue
			}
			// Its claim is pending: it expires once the claim completes
			// (claimDone), not by a Wake in the past (a spinning timer).
			c.deadlines++
			continue
		}
		if c.nextDeadline == 0 || d.deadline < c.nextDeadline {
			c.nextDeadline = d.deadline
		}
		c.deadlines++
	}
	// Map order is random: release in ID order so the outcome is
	// reproducible.
	sortDeliveries(expired)
	for _, d := range expired {
		d.C.inflight = removeDelivery(d.C.inflight, d)
		d.C.inflightBytes -= d.Msg.Size
		c.AckTimeouts++
		c.out.Events = append(c.out.Events, Event{Kind: EvAckTimeout, ID: d.Msg.ID})
		c.release(d, now)
	}
}

// release ends a claimed delivery that was neither acked nor nacked
// (disconnect, ack timeout): the message goes back to its position, or to
// the dead-letter queue when it reached max_deliveries.
func (c *Core) release(d *Delivery, now int64) {
	d.ended = true
	c.dropDeadline(d)
	delete(c.flight, d.Msg.ID)
	m := d.Msg
	if c.cfg.DeadLetter && c.cfg.MaxDeliveries > 0 && m.Deliveries >= c.cfg.MaxDeliveries {
		c.deadLetter(m, "max-deliveries")
		return
	}
	c.place(m, now)
}

func (c *Core) dropDeadline(d *Delivery) {
	if d.deadline != 0 && c.deadlines > 0 {
		c.deadlines--
	}
	d.deadline = 0
}

func (c *Core) expire(m *Msg) {
	if c.cfg.ExpiredToDLQ && c.cfg.DeadLetter {
		c.deadLetter(m, "expired")
		return
	}
	m.state = stLeaving
	if bare(m) {
		c.claimRow(m, 0, nil)
	}
	c.addWork(deleteOp(OpDrop, m), nil)
}

func (c *Core) deadLetter(m *Msg, reason string) {
	m.state = stLeaving
	if bare(m) {
		c.claimRow(m, 0, nil)
	}
	c.addWork(Op{Kind: OpDeadLetter, Msg: m, Reason: reason}, nil)
}

// bare reports whether m is undelivered with no row of count 0: a message
// that leaves (drop, dead-letter, move) gets one in the batch that moves
// it, so that the delivered mark, which may pass it while it is leaving,
// does not count a delivery should it stay (a crash before the commit).
// deleteOp deletes m (kind OpDelete or OpDrop), skipping the claims table
// when m has no claim row.
func deleteOp(kind OpKind, m *Msg) Op { return Op{Kind: kind, Msg: m, NoClaim: !m.ClaimRow} }

func bare(m *Msg) bool { return m.Deliveries == 0 && !m.pinned }

func (c *Core) retryDelay(streak int) int64 {
	d := c.cfg.RetryMin
	for i := 1; i < streak && d < c.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, c.cfg.RetryMax)
}

// backoff is the NACK redelivery delay after n deliveries: exponential from
// RedeliveryMin, capped at RedeliveryMax, with ±25% jitter.
func (c *Core) backoff(n int) int64 {
	d := c.cfg.RedeliveryMin
	for i := 1; i < n && d < c.cfg.RedeliveryMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.RedeliveryMax)
	if d <= 0 {
		return 0
	}
	return d + c.rng.Int64N(d/2+1) - d/4
}
