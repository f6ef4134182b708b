package queuecore

import (
	"cmp"
	"math"
	"slices"
)

// The backlog cache: messages committed past the window (the queue was
// spilled), kept in memory so that the page-in that later reaches them is
// answered here instead of by a journal read. It stands in for the journal
// exactly, past cacheFrom: with cache holding c[0..k] (ascending IDs, all
// above memTail and cacheFrom), every journal row of the queue reported
// through Committed with an ID in (max(memTail, cacheFrom), c[k].ID] is in
// the cache, held in memory (a MoveOut of a message not paged in), or
// gone; with cacheAll, the same holds for every reported row above
// max(memTail, cacheFrom). Reports come in commit order (the shell's duty
// 3), so a row with an ID below a reported one is reported already: a
// page-in answered from the cache (only once memTail has reached
// cacheFrom) returns what a journal read would have, but for rows
// committed and not reported yet, which that read may or may not have
// seen either.
//
// A cached message is the one Committed gave, which is the journal's row
// as committed; nothing changes a row above memTail except a purge and a
// MoveOut (which the cache gives up: purgeDone, MoveOut), since claims,
// marks and releases concern messages in memory only.
//
// The cache is bounded by Config.CacheBytes and by SetCacheCap (the
// broker's memory budget): what does not fit stays in the journal only
// (cacheAll turns false), and a lower cap evicts the newest messages
// first, keeping the cache a prefix of the backlog. Once such a cache is
// used up (or after a restart, a failed requeue, a purge that kept rows it
// lacks), it starts again at the next commit past the window: cacheFrom
// is set to the last ID reported before it, the journal answers page-ins
// up to there, and the cache those after.

// CacheOverhead is what a cached message weighs beyond its Size: the
// shell's message and header slice and the core's Msg.
const CacheOverhead = 384

func cacheWeight(m *Msg) int64 { return m.Size + CacheOverhead }

// CacheBytes is what the backlog cache weighs (its messages' Size plus
// CacheOverhead each): memory the broker charges besides MemBytes.
func (c *Core) CacheBytes() int64 { return c.cacheBytes }

// Cached is the number of messages in the backlog cache.
func (c *Core) Cached() int { return len(c.cache) - c.cacheHead }

// SetCacheCap bounds the backlog cache below Config.CacheBytes while the
// broker's memory budget is short (math.MaxInt64: no such bound). The
// newest cached messages are dropped down to it; they stay in the journal.
func (c *Core) SetCacheCap(capBytes int64) {
	c.cacheCap = capBytes
	c.cacheFit()
}

// cacheLimit is the bound in force.
func (c *Core) cacheLimit() int64 {
	if c.cfg.CacheBytes <= 0 || c.cacheOff {
		return 0
	}
	return min(c.cfg.CacheBytes, c.cacheCap)
}

// cacheFit evicts the newest cached messages while over the bound.
func (c *Core) cacheFit() {
	lim := c.cacheLimit()
	for c.cacheBytes > lim && len(c.cache) > c.cacheHead {
		c.cacheDropLast()
	}
}

func (c *Core) cacheDropLast() {
	m := c.cache[len(c.cache)-1]
	c.cache[len(c.cache)-1] = nil
	c.cache = c.cache[:len(c.cache)-1]
	c.cacheBytes -= cacheWeight(m)
	c.cacheAll = false
}

// cacheAdd keeps m, just committed past the window (prev: the highest ID
// reported before it); when it does not fit (or an earlier one did not),
// the cache stops where it is, until it is empty: then it starts again
// with m (every row reported before m has an ID up to prev, and the
// journal answers for those).
func (c *Core) cacheAdd(m *Msg, prev uint64) {
	if !c.cacheAll {
		if c.Cached() > 0 || c.cacheLimit() <= 0 {
			return
		}
		c.cacheAll, c.cacheFrom = true, prev
	}
	if w := cacheWeight(m); c.cacheBytes+w > c.cacheLimit() {
		c.cacheAll = false
		return
	}
	if c.cacheHead > 0 && c.cacheHead >= len(c.cache)/2 {
		n := copy(c.cache, c.cache[c.cacheHead:])
		clear(c.cache[n:])
		c.cache = c.cache[:n]
		c.cacheHead = 0
	}
	c.cache = append(c.cache, m)
	c.cacheBytes += cacheWeight(m)
}

// cacheClear empties the cache; all says whether it stands for the whole
// backlog afterwards (true only when nothing lies in the journal past
// memTail).
func (c *Core) cacheClear(all bool) {
	clear(c.cache)
	c.cacheHead, c.cacheBytes = len(c.cache), 0
	c.cacheReset()
	c.cacheAll, c.cacheFrom = all, 0
}

// cacheTrim drops cached messages at or below memTail (paged in from the
// journal, which read them too).
func (c *Core) cacheTrim() {
	for c.cacheHead < len(c.cache) && c.cache[c.cacheHead].ID <= c.memTail {
		m := c.cache[c.cacheHead]
		c.cache[c.cacheHead] = nil
		c.cacheHead++
		c.cacheBytes -= cacheWeight(m)
	}
	c.cacheReset()
}

// cacheCut gives up the cache from id on: the journal holds row id past
// memTail and the cache does not (a MoveOut of a message not paged in
// failed).
func (c *Core) cacheCut(id uint64) {
	if id <= c.memTail {
		return
	}
	for len(c.cache) > c.cacheHead && c.cache[len(c.cache)-1].ID >= id {
		c.cacheDropLast()
	}
	c.cacheAll = false
}

// cacheDrop takes message id out of the cache: it is held in memory now
// (a MoveOut of a message not paged in), and its row changes (gone, or
// pinned and back in the journal only should the move fail: leaveFailed
// cuts the cache there).
func (c *Core) cacheDrop(id uint64) {
	live := c.cache[c.cacheHead:]
	i, ok := slices.BinarySearchFunc(live, id, func(m *Msg, id uint64) int { return cmp.Compare(m.ID, id) })
	if !ok {
		return
	}
	c.cacheBytes -= cacheWeight(live[i])
	// Requeues take the oldest first: shift what is before it (usually
	// nothing), not the rest of the cache.
	copy(live[1:i+1], live[:i])
	live[0] = nil
	c.cacheHead++
	c.cacheReset()
}

// cacheReset makes an emptied cache start at the front of its slice again,
// and gives back a large slice (its memory is not in CacheBytes).
func (c *Core) cacheReset() {
	if c.cacheHead < len(c.cache) {
		return
	}
	if cap(c.cache) > 4096 {
		c.cache = nil
	} else {
		c.cache = c.cache[:0]
	}
	c.cacheHead = 0
}

// fromCache answers req (not a rescan) from the cache when the journal
// would return the same: the messages after memTail up to req.Limit and
// req.MaxBytes, all cached, or fewer when the cache stands for the whole
// backlog. They leave the cache.
func (c *Core) fromCache(req *PageIn) ([]*Msg, bool) {
	c.cacheTrim()
	if req.After != c.memTail || c.memTail < c.cacheFrom || (c.Cached() == 0 && !c.cacheAll) {
		return nil, false
	}
	end, loaded := c.cacheHead, int64(0)
	for end < len(c.cache) && end-c.cacheHead < req.Limit && (req.MaxBytes <= 0 || loaded < req.MaxBytes) {
		loaded += c.cache[end].Size
		end++
	}
	full := end-c.cacheHead >= req.Limit || (req.MaxBytes > 0 && loaded >= req.MaxBytes)
	if !full && !c.cacheAll {
		return nil, false
	}
	msgs := make([]*Msg, end-c.cacheHead)
	copy(msgs, c.cache[c.cacheHead:end])
	for i := c.cacheHead; i < end; i++ {
		c.cacheBytes -= cacheWeight(c.cache[i])
		c.cache[i] = nil
	}
	c.cacheHead = end
	c.cacheReset()
	return msgs, true
}

// noCacheCap is SetCacheCap's "no bound".
const noCacheCap = math.MaxInt64
