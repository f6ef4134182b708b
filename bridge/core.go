package bridge

import (
	"math/rand/v2"
)

// Core is the deterministic state of one direction of a bridge: the window
// of messages taken from a source (the local queue, or the remote consumer)
// and forwarded to a sink (the remote stream or peer, or the local broker),
// which of them the sink has confirmed, what may be acknowledged at the
// source, and when to try the sink's link again. It has no goroutines,
// clock, sockets or I/O: the shell feeds it events with the time in
// nanoseconds and carries out the actions it returns, in order.
//
// The rules that make a transfer exactly once across the link:
//   - an item is acknowledged at its source only after the sink confirmed
//     it (ActAckSource follows Confirmed, never anything else, except for
//     an item refused for a loop, which is acknowledged unforwarded);
//   - every forward of an item carries the same dedup id, so the sink keeps
//     one copy however often it is sent;
//   - after a link failure every unconfirmed item is forwarded again, in the
//     order the source gave them;
//   - order does not depend on the link storing in send order: a forward
//     made while an earlier item is unconfirmed carries AfterSeq, the
//     sink's sequence the item before it is predicted to have (the sink's
//     last sequence, read when the link came up or confirmed since, plus
//     the items forwarded since), and a sink that
//     can check it (JetStream's Nats-Expected-Last-Sequence) stores it
//     only if its last sequence is that one. While the core is the sink's
//     only writer, a prediction is never below the true sequence (the
//     sink holds only this core's items past what it read, in order), so
//     the last sequence can be the predicted one only if the item before
//     is stored: so an item is
//     stored only right after the one before it, whatever fails in
//     between (a stream leader change answering one publish "no
//     responders" while the next reaches the new leader). A forward the
//     sink refuses (Refused) waits until every item before it is confirmed
//     and goes again without the condition; nothing behind it is forwarded
//     meanwhile;
//   - another writer makes the prediction wrong, and then the condition
//     proves nothing (its message can take the predicted place of a failed
//     one). A confirmation past its predicted sequence means messages came
//     before it that the core did not count: it forwards one at a time and
//     asks the shell to read them (ActCheck). If one is not this core's
//     (another writer), it stays so (Shared, until the process restarts:
//     the order of a window of one, which a failure cannot break); if all
//     are its own (a forward of a failed link, or of an earlier process,
//     stored late), it goes back to the window;
//   - an item the source delivers again (after a reconnection of the
//     source) is the same item: it keeps its place and is not forwarded
//     twice while the first forward may still be confirmed.
type Core struct {
	cfg      CoreConfig
	rng      *rand.Rand
	next     uint64
	items    map[uint64]*entry
	byID     map[string]uint64
	order    []uint64 // unconfirmed keys in source order (compacted lazily)
	sent     int      // items forwarded and not yet confirmed
	state    LinkState
	fails    int   // consecutive failed attempts (a link up without a confirmation is one)
	retryAt  int64 // next attempt while down
	upAt     int64 // when the link last came up
	everUp   bool
	tailID   string // ID of the last item offered (its successor's predecessor)
	seqKnown bool   // lastSeq was read from the sink when the link came up
	shared   bool   // someone else writes to the sink (a confirmation not predicted)
	// suspect: a confirmation came past its prediction; the sink's
	// sequences checkFrom..checkTo are to be checked (ActCheck) for
	// another writer's message. Meanwhile nothing goes behind an
	// unconfirmed item.
	suspect, checking    bool
	checkFrom, checkTo   uint64
	issuedFrom, issuedTo uint64 // the range of the check in progress
	lastSeq              uint64 // the sink's last sequence as far as known: its own at the link's start, then confirmations
	stats                CoreStats
}

// CoreConfig are the core's settings.
type CoreConfig struct {
	Window     int   // forwarded-unconfirmed items at most
	BackoffMin int64 // ns
	BackoffMax int64 // ns
	AckTimeout int64 // ns: a forward unconfirmed this long fails the link
	// SeqOrder: the sink numbers what it stores and can refuse a forward
	// whose predecessor's sequence is not its last (JetStream): forwards
	// behind an unconfirmed item carry AfterSeq. Without, the sink is
	// trusted to store in send order (one connection).
	SeqOrder bool
}

// LinkState is the state of the sink's link.
type LinkState uint8

const (
	LinkDown       LinkState = iota // waiting for retryAt
	LinkConnecting                  // ActConnect issued, no answer yet
	LinkUp
)

func (s LinkState) String() string {
	switch s {
	case LinkUp:
		return "up"
	case LinkConnecting:
		return "connecting"
	}
	return "down"
}

// Item is what the source delivered.
type Item struct {
	ID    string // dedup id across the link
	Bytes int
	Skip  bool // refused (a loop): acknowledge at the source, do not forward
}

type entry struct {
	Item
	key     uint64
	sentAt  int64  // 0: not forwarded since the last link failure
	prevID  string // ID of the item offered before it (its After)
	pseq    uint64 // its sequence at the sink, as predicted when forwarded (0: unknown)
	cond    bool   // forwarded with AfterSeq
	blocked bool   // refused: forwarded again only once every earlier item is confirmed
}

// ActionKind says what the shell must do.
type ActionKind uint8

const (
	ActForward   ActionKind = iota + 1 // send item Key to the sink
	ActAckSource                       // acknowledge item Key at the source (then forget it)
	ActConnect                         // (re)connect the sink; answer LinkUp or ConnectFailed
	// ActCheck: read the sink's messages From..To and answer Checked
	// with whether any is not this core's (another writer's).
	ActCheck
)

// Action is one step for the shell.
type Action struct {
	Kind ActionKind
	Key  uint64
	// AfterSeq (ActForward): the sink's sequence the item before this
	// one, still unconfirmed, is predicted to have; 0 when every earlier
	// item is confirmed (no condition is needed). A sink that can make it
	// a condition stores the item only if its last sequence is that one,
	// refusing it otherwise (answer Refused).
	AfterSeq uint64
	// From, To (ActCheck): the sink's sequences to check.
	From, To uint64
}

// CoreStats are the core's counters.
type CoreStats struct {
	Taken, Forwarded, Resent, Confirmed, Skipped, Redelivered uint64
	Reconnects, Failures, Refused                             uint64
	Dropped                                                   uint64 // items the shell could not forward (Drop)
	// Shared: a confirmation came at a sequence the core did not predict:
	// someone else writes to the sink, and the core forwards one at a time.
	Shared                     bool
	PendingItems, PendingBytes int64
	InFlight                   int
}

// NewCore returns a core whose link starts down with an attempt due at once.
func NewCore(cfg CoreConfig, seed uint64) *Core {
	if cfg.Window < 1 {
		cfg.Window = 1
	}
	if cfg.BackoffMin < 1 {
		cfg.BackoffMin = 1
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = cfg.BackoffMin
	}
	return &Core{cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), items: map[uint64]*entry{}, byID: map[string]uint64{}}
}

// State is the link's state.
func (c *Core) State() LinkState { return c.state }

// RetryAt is when the next connection attempt is due (while down).
func (c *Core) RetryAt() int64 { return c.retryAt }

// Stats returns the counters.
func (c *Core) Stats() CoreStats {
	s := c.stats
	s.InFlight = c.sent
	s.Shared = c.shared
	return s
}

// Offer takes an item the source delivered and returns its key. An item
// whose ID is already held is the same item delivered again: its key is
// returned with dup set, and the shell replaces its source handle (the
// newest delivery is the one to acknowledge).
func (c *Core) Offer(it Item, now int64) (key uint64, dup bool, acts []Action) {
	if k, ok := c.byID[it.ID]; ok {
		c.stats.Redelivered++
		return k, true, nil
	}
	c.next++
	e := &entry{Item: it, key: c.next}
	c.stats.Taken++
	if it.Skip {
		c.stats.Skipped++
		return e.key, false, []Action{{Kind: ActAckSource, Key: e.key}}
	}
	e.prevID = c.tailID
	c.tailID = it.ID
	c.items[e.key] = e
	c.byID[it.ID] = e.key
	c.order = append(c.order, e.key)
	c.stats.PendingItems++
	c.stats.PendingBytes += int64(it.Bytes)
	return e.key, false, c.pump(now, nil)
}

// pump forwards unsent items in order while the link is up and the window
// has room. The first item held goes without a condition (every earlier
// one is confirmed); each later one carries After, the item before it. A
// refused item stops the pump until it is the first held.
func (c *Core) pump(now int64, acts []Action) []Action {
	if c.state != LinkUp {
		return acts
	}
	head := true
	var prev *entry // the previous item held, in order
	for _, k := range c.order {
		if c.sent >= c.cfg.Window {
			break
		}
		e := c.items[k]
		if e == nil {
			continue
		}
		if e.sentAt != 0 {
			head = false
			prev = e
			continue
		}
		if e.blocked && !head {
			break
		}
		a := Action{Kind: ActForward, Key: k}
		if !head && c.cfg.SeqOrder {
			// Behind an unconfirmed item only with the condition, and only
			// while nobody else writes to the sink.
			if c.shared || c.suspect || prev == nil || prev.ID != e.prevID || prev.pseq == 0 {
				break
			}
			a.AfterSeq = prev.pseq
		}
		e.blocked = false
		e.cond = a.AfterSeq != 0
		e.pseq = 0
		switch {
		case !c.cfg.SeqOrder:
		case head && c.seqKnown:
			e.pseq = c.lastSeq + 1
		case !head:
			e.pseq = prev.pseq + 1
		}
		head = false
		prev = e
		e.sentAt = max(now, 1)
		c.sent++
		c.stats.Forwarded++
		acts = append(acts, a)
	}
	return acts
}

// Checked answers ActCheck: foreign reports whether a message in the
// range is another writer's (or the check failed: assumed so). Another
// writer makes the core forward one at a time from then on (Shared).
func (c *Core) Checked(foreign bool, now int64) []Action {
	c.checking = false
	var acts []Action
	switch {
	case foreign:
		c.shared, c.suspect = true, false
	case c.suspect && (c.checkFrom < c.issuedFrom || c.checkTo > c.issuedTo):
		// More came past their predictions while it checked: check all.
		acts = append(acts, c.issueCheck())
	default:
		c.suspect = false
	}
	return c.pump(now, acts)
}

func (c *Core) issueCheck() Action {
	c.checking = true
	c.issuedFrom, c.issuedTo = c.checkFrom, c.checkTo
	return Action{Kind: ActCheck, From: c.checkFrom, To: c.checkTo}
}

// Refused: the sink refused item key's forward because its condition
// (AfterSeq) did not hold: the item before it was not the last stored (it
// failed, or another writer's message came between). The item is
// forwarded again once every item before it is confirmed; nothing behind
// it goes meanwhile. A refusal of an item not in flight is ignored (the
// shell drops answers of a link that failed since).
func (c *Core) Refused(key uint64, now int64) []Action {
	e := c.items[key]
	if e == nil || e.sentAt == 0 {
		return nil
	}
	e.sentAt = 0
	e.blocked = true
	c.sent--
	c.stats.Refused++
	return c.pump(now, nil)
}

// Confirmed: the sink stored item key (a PubAck, a RECEIPT), at sequence
// seq (0: the sink has none). Confirmations of items no longer held
// (already confirmed) are ignored. A confirmation is accepted even from
// before a link failure: the item was stored.
func (c *Core) Confirmed(key, seq uint64, now int64) []Action {
	// Every confirmation raises what is known of the sink's last sequence,
	// an item's no longer held too: a prediction may be too high (a
	// refusal), never too low.
	if seq > c.lastSeq {
		c.lastSeq = seq
	}
	if c.state == LinkUp {
		c.fails = 0 // the sink stores: the link works (backoff)
	}
	e := c.items[key]
	if e == nil {
		return nil
	}
	var check []Action
	if seq != 0 && e.pseq != 0 && seq > e.pseq && !c.shared {
		// Messages the core did not count came before this one: its own
		// (a forward of a failed link or an earlier process stored late)
		// or another writer's. Until checked, one at a time.
		if !c.suspect {
			c.suspect, c.checkFrom, c.checkTo = true, e.pseq, seq-1
		} else {
			c.checkFrom, c.checkTo = min(c.checkFrom, e.pseq), max(c.checkTo, seq-1)
		}
		if !c.checking {
			check = []Action{c.issueCheck()}
		}
	}
	if e.sentAt != 0 {
		c.sent--
	}
	c.forget(e)
	c.stats.Confirmed++
	acts := append(check, Action{Kind: ActAckSource, Key: key})
	return c.pump(now, acts)
}

func (c *Core) forget(e *entry) {
	delete(c.items, e.key)
	delete(c.byID, e.ID)
	c.stats.PendingItems--
	c.stats.PendingBytes -= int64(e.Bytes)
	if len(c.order) > 64 && len(c.order) > 2*len(c.items) {
		kept := c.order[:0]
		for _, k := range c.order {
			if c.items[k] != nil {
				kept = append(kept, k)
			}
		}
		c.order = kept
	}
}

// SinkFailed: a forward failed or the link broke. Every unconfirmed item
// will be forwarded again, in order, once the link is back; the next
// attempt is scheduled with back-off.
func (c *Core) SinkFailed(now int64) []Action {
	if c.state != LinkUp {
		return nil
	}
	c.stats.Failures++
	c.down(now)
	return nil
}

func (c *Core) down(now int64) {
	if c.state == LinkUp && now-c.upAt >= c.cfg.BackoffMax {
		c.fails = 0 // a link that stood this long was a success
	}
	for _, e := range c.items {
		if e.sentAt != 0 {
			e.sentAt = 0
			c.stats.Resent++
		}
	}
	c.sent = 0
	c.state = LinkDown
	c.fails++
	c.retryAt = now + c.backoff()
}

// backoff is the delay before the next attempt: doubling from BackoffMin
// with each consecutive failure up to BackoffMax, of which a random half
// is taken off (jitter, so that bridges restarting together do not retry
// together). A connection that comes up does not end the run of failures:
// a confirmation does (Confirmed), or the link staying up for BackoffMax
// (down). A failure that follows every successful connection (a message
// the sink refuses each time, a publish that times out) backs off like a
// failed connection; when the link came up counted as a success, it was
// retried every BackoffMin forever, each time reconnecting.
func (c *Core) backoff() int64 {
	d := c.cfg.BackoffMin
	for i := 1; i < c.fails && d < c.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.BackoffMax)
	half := d / 2
	return d - half + c.rng.Int64N(half+1)
}

// ConnectFailed: the attempt asked for by ActConnect failed.
func (c *Core) ConnectFailed(now int64) {
	if c.state == LinkConnecting {
		c.stats.Failures++
		c.down(now)
	}
}

// MarkShared: the sink may have other writers (a JetStream stream that
// takes subjects beyond the out maps): from now on the core forwards one
// at a time, as after noticing another writer (Shared), since a predicted
// sequence proves nothing when someone else can take it.
func (c *Core) MarkShared() { c.shared = true }

// LinkUp: the attempt succeeded; the held items are forwarded in order.
// sinkLast is the sink's last sequence read while connecting (SeqOrder;
// else 0). The back-off starts again from BackoffMin only once the sink
// confirms something, or the link stood for BackoffMax.
func (c *Core) LinkUp(now int64, sinkLast uint64) []Action {
	if c.state == LinkUp {
		return nil
	}
	if c.everUp {
		c.stats.Reconnects++
	}
	c.everUp = true
	c.state = LinkUp
	c.upAt = now
	if c.cfg.SeqOrder {
		c.lastSeq = max(c.lastSeq, sinkLast)
		c.seqKnown = true
	}
	// The failures go on counting until a confirmation (backoff).
	return c.pump(now, nil)
}

// SourceLost: the source's connection ended. Its unacknowledged items go
// back to it (it will deliver them again, in order); the core keeps the
// items in flight up to the first one not in flight, so that their
// confirmations are not lost and the redelivered copies are matched to
// them by ID, and forgets that one and every item after it (they come
// again behind the kept ones, in their order; an item in flight among
// them that the sink stores after all is kept once by its dedup id).
func (c *Core) SourceLost(now int64) {
	c.tailID = ""
	var drop []*entry
	for _, k := range c.order {
		e := c.items[k]
		if e == nil {
			continue
		}
		if len(drop) == 0 && e.sentAt != 0 {
			c.tailID = e.ID
			continue
		}
		drop = append(drop, e)
	}
	for _, e := range drop {
		if e.sentAt != 0 {
			c.sent--
		}
		c.forget(e)
	}
}

// Tick advances time: it asks for a connection attempt when one is due,
// and fails the link when a forward is unconfirmed for AckTimeout.
func (c *Core) Tick(now int64) []Action {
	switch c.state {
	case LinkDown:
		if now >= c.retryAt {
			c.state = LinkConnecting
			return []Action{{Kind: ActConnect}}
		}
	case LinkUp:
		if c.cfg.AckTimeout > 0 {
			for _, e := range c.items {
				if e.sentAt != 0 && now-e.sentAt >= c.cfg.AckTimeout {
					c.stats.Failures++
					c.down(now)
					break
				}
			}
		}
	}
	return nil
}

// Drop: the shell could not forward item key, which the sink refuses for
// good (a topic message, best effort, or a queue message that the shell
// sends to its dead-letter queue at the source): the item is forgotten,
// not acknowledged at its source, and the link does not fail for it. A
// refusal by the sink's client before sending (its subject, headers or
// size) comes at an item's first forward (they do not change), so nothing
// behind it was on the wire before: the shell abandons the rest of the
// actions it was carrying out (the forwards after key's, of the items
// behind it, which may name it in their conditions), and those items are
// forwarded again (the actions returned), the one after the dropped item
// now following the one before it. A refusal by the sink itself, once the
// forwards behind it are on the wire (each names its predicted sequence,
// or a later one, so the sink stores none of them), is answered by
// SinkFailed first, then Drop: they all go again once the link is back.
// Dropping an item not held does nothing.
func (c *Core) Drop(key uint64, now int64) []Action {
	e := c.items[key]
	if e == nil {
		return nil
	}
	behind := false
	for _, k := range c.order {
		x := c.items[k]
		if x == nil {
			continue
		}
		if x == e {
			behind = true
			continue
		}
		if !behind {
			continue
		}
		if x.prevID == e.ID {
			x.prevID = e.prevID
		}
		if x.sentAt != 0 {
			x.sentAt = 0
			c.sent--
			c.stats.Forwarded-- // never sent: the shell abandoned it
		}
	}
	if c.tailID == e.ID {
		c.tailID = e.prevID
	}
	if e.sentAt != 0 {
		c.sent--
	}
	c.forget(e)
	c.stats.Dropped++
	return c.pump(now, nil)
}

// Conditioned reports whether item key is in flight with AfterSeq (a
// refusal of a forward without one is not the order condition's).
func (c *Core) Conditioned(key uint64) bool {
	e := c.items[key]
	return e != nil && e.sentAt != 0 && e.cond
}

// Holds reports whether item key is still held (not yet confirmed).
func (c *Core) Holds(key uint64) bool { return c.items[key] != nil }
