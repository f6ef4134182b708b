package queuecore

import (
	"container/heap"
	"slices"
)

// Purge starts deleting every message of the queue that is not in flight
// (nor already on its way out) at the time of the call: a run of batches,
// one after the other, each deleting the next messages in ID order, as
// many as the journal deletes in one go (Op.After, Result.PurgedTo), so
// that the journal's other work goes on between them. Memory changes only
// as each batch commits; until the last, dispatch and page-ins pause. The
// end is the event EvPurged (with Err if a batch failed: what committed
// before stays deleted). It returns the first batch, or nil while another
// purge is running.
func (c *Core) Purge(now int64) *Batch {
	if c.purging {
		return nil
	}
	c.purging = true
	keep := make([]uint64, 0, len(c.flight))
	for id, m := range c.byID {
		if m.state == stFlight || m.state == stLeaving {
			keep = append(keep, id)
		}
	}
	for id := range c.flight {
		if c.byID[id] == nil {
			keep = append(keep, id)
		}
	}
	slices.Sort(keep)
	c.purgeUpTo, c.purgeFrom, c.purgeCount, c.purgeBytes = c.lastID, 0, 0, 0
	c.purgeKeep = make(map[uint64]string, len(keep))
	for _, id := range keep {
		g := ""
		if m := c.byID[id]; m != nil {
			g = m.Group
		} else if d := c.flight[id]; d != nil {
			g = d.Msg.Group
		}
		c.purgeKeep[id] = g
	}
	return c.emitDirect(pend{ops: []Op{c.purgeOp(keep)}})
}

// purgeOp is the running purge's next batch: what is left of its range,
// with keep (sorted) the IDs not to delete.
func (c *Core) purgeOp(keep []uint64) Op {
	// Messages past UpTo may be kept as well: leaving before their commit
	// was reported (a requeue loads what the journal holds).
	i, _ := slices.BinarySearch(keep, c.purgeFrom+1)
	j, _ := slices.BinarySearch(keep, c.purgeUpTo+1)
	return Op{Kind: OpPurge, After: c.purgeFrom, UpTo: c.purgeUpTo, Keep: keep[i:max(i, j)]}
}

// purgeTakes reports whether the running purge deletes message id.
func (c *Core) purgeTakes(id uint64) bool {
	_, kept := c.purgeKeep[id]
	return c.purging && id > c.purgeFrom && id <= c.purgeUpTo && !kept
}

// purgeDone applies one committed batch of the running purge and emits the
// next, or ends the purge.
func (c *Core) purgeDone(op Op, res Result, err error) {
	if err != nil {
		c.purgeEnd(err)
		return
	}
	to := res.PurgedTo
	if to == 0 || to > op.UpTo {
		to = op.UpTo
	}
	keep := make(map[uint64]bool, len(op.Keep))
	for _, id := range op.Keep {
		keep[id] = true
	}
	for id, m := range c.byID {
		if id <= op.After || id > to || keep[id] {
			continue
		}
		switch m.state {
		case stReady:
			c.ready.remove(m)
		case stDelayed:
			c.delayed.remove(m)
			c.delayedBytes -= m.Size
			m.state = stNone
			if m.holdsGroup {
				m.holdsGroup = false
				c.ready.release(m.Group)
			}
		case stParked:
			c.unstashOne(m)
		default:
			continue
		}
		c.unhold(id)
	}
	// Every message up to to is now gone or kept in memory, except kept
	// ones that left memory meanwhile (a requeue of messages not paged in
	// yet failed): the pager must find those again. Kept ones of the
	// purge's earlier batches too: they may still be out of memory.
	tail := to
	for id := range c.purgeKeep {
		if id > c.memTail && id <= tail && c.byID[id] == nil && !c.isGone(id) {
			tail = id - 1
		}
	}
	if tail < to {
		c.spilled = true
		c.spillSeq++
		// Kept rows past memTail that the cache may not hold.
		c.cacheClear(false)
	}
	// Parked groups: what they left up to to is gone, but for kept
	// messages not in memory (failed requeues).
	for g, p := range c.parked {
		if p > to {
			continue
		}
		np := to + 1
		for id, kg := range c.purgeKeep {
			if kg == g && id >= p && id < np && c.byID[id] == nil && !c.isGone(id) {
				np = id
			}
		}
		c.parked[g] = np
	}
	c.memTail = max(c.memTail, tail)
	c.cacheTrim() // what it cached up to to is purged
	for g, p := range c.parked {
		if p > c.memTail {
			delete(c.parked, g)
			c.unstash(g, ^uint64(0))
		} else {
			c.unstash(g, p)
		}
	}
	c.pageEpoch++
	c.readEpoch++
	c.count -= res.Affected
	c.bytes -= res.Bytes
	c.purgeCount += res.Affected
	c.purgeBytes += res.Bytes
	c.purgeFrom = max(c.purgeFrom, to)
	c.out.Space = true
	if c.purgeFrom >= c.purgeUpTo {
		c.purgeEnd(nil)
		return
	}
	c.emit(pend{ops: []Op{c.purgeOp(op.Keep)}})
}

// purgeEnd ends the running purge.
func (c *Core) purgeEnd(err error) {
	c.out.Events = append(c.out.Events, Event{Kind: EvPurged, Reason: "purge", Err: err, Count: c.purgeCount, Bytes: c.purgeBytes})
	c.purging = false
	c.purgeKeep = nil
	c.purgeUpTo, c.purgeFrom, c.purgeCount, c.purgeBytes = 0, 0, 0, 0
}

// ReadEpoch is what a journal read made for MoveOut is checked against:
// read it before the read.
func (c *Core) ReadEpoch() uint64 { return c.readEpoch }

// MoveOut starts moving messages loaded from the journal (in ID order) to
// queue target: requeue out of a dead-letter queue. Messages in flight or
// already leaving are skipped, and so are those a pending purge deletes.
// It returns nil when none can move. Memory changes only when the batch
// commits.
//
// readEpoch is ReadEpoch before the load. If a purge's batch or another
// requeue's move committed since, msgs may hold rows those took (the core
// cannot tell those it never held from the rest): MoveOut then moves
// nothing and reports stale, and the caller loads again.
func (c *Core) MoveOut(msgs []*Msg, target string, now int64, readEpoch uint64) (b *Batch, stale bool) {
	if readEpoch != c.readEpoch {
		return nil, true
	}
	var p pend
	for _, lm := range msgs {
		m := c.byID[lm.ID]
		switch {
		case c.purgeTakes(lm.ID):
			continue // gone once the purge commits: a move would find no message
		case m == nil:
			if lm.ID <= c.memTail && !c.inHole(lm) {
				continue // gone meanwhile
			}
			c.cacheDrop(lm.ID) // held from now on; its row changes
			m = lm
			c.hold(m)
		case m.state == stReady:
			c.ready.remove(m)
		case m.state == stDelayed:
			heap.Remove(&c.delayed, m.heapIdx)
			c.delayedBytes -= m.Size
		case m.state == stParked:
			c.unstashOne(m)
		default:
			continue
		}
		if m.Group != "" && !m.holdsGroup {
			// Until the move commits it still heads its group: should it
			// fail, nothing of its group may have overtaken it.
			m.holdsGroup = true
			c.ready.hold(m.Group)
		}
		m.state = stLeaving
		if bare(m) {
			// See bare: in the batch of the move, in front of it.
			p.ops = append(p.ops, c.pin(m))
			p.ds = append(p.ds, nil)
		}
		p.ops = append(p.ops, Op{Kind: OpMoveOut, Msg: m, Target: target})
		p.ds = append(p.ds, nil)
	}
	if len(p.ops) == 0 {
		return nil, false
	}
	return c.emitDirect(p), false
}

// Snapshot is what the admin views show of a queue.
type Snapshot struct {
	Count, InFlight, Delayed, Consumers int
	InMemory                            int // ready, delayed and in flight (not those whose delete is committing)
	Bytes                               int64
	Oldest                              int64 // ms of the oldest enqueue in memory, 0 if none
	Spilled, Purging                    bool
	PurgeDeleted                        int   // by the running purge, so far
	Cached                              int   // messages in the backlog cache
	CacheBytes                          int64 // and their weight (CacheBytes)
	Stats
}

// Snapshot returns the queue's counts.
func (c *Core) Snapshot() Snapshot {
	s := Snapshot{Count: c.count, Bytes: c.bytes, InFlight: len(c.flight), Delayed: len(c.delayed),
		Consumers: len(c.consumers), Spilled: c.spilled, Purging: c.purging, PurgeDeleted: c.purgeCount, Stats: c.Stats,
		Cached: c.Cached(), CacheBytes: c.cacheBytes}
	for _, m := range c.byID {
		if m.state != stLeaving {
			s.InMemory++
		}
		if m.Enqueued > 0 && (s.Oldest == 0 || m.Enqueued < s.Oldest) {
			s.Oldest = m.Enqueued
		}
	}
	return s
}
