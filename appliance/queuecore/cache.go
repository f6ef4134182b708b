package queuecore

import "math"

// The backlog cache: messages committed past the window (the queue was
// spilled), kept in memory so that the page-in that later reaches them is
// answered here instead of by a journal read. It stands in for the journal
// exactly: with cache holding c[0..k] (ascending IDs, all above memTail),
// every journal row of the queue reported through Committed with an ID in
// (memTail, c[k].ID] is in the cache, held in memory (a MoveOut of a
// message not paged in), or gone; with cacheAll, the same holds for every
// reported row above memTail. Reports come in commit order (the shell's
// duty 3), so a row with an ID below a reported one is reported already:
// a page-in answered from the cache cannot miss a row the journal would
// have returned.
//
// A cached message is the one Committed gave, which is the journal's row
// as committed; nothing changes a row above memTail except a purge and a
// MoveOut (which the cache gives up: purgeDone, MoveOut), since claims,
// marks and releases concern messages in memory only.
//
// The cache is bounded by Config.CacheBytes and by SetCacheCap (the
// broker's memory budget): what does not fit stays in the journal only
// (cacheAll turns false until the queue is no longer spilled), and a lower
// cap evicts the newest messages first, keeping the cache a prefix of the
// backlog.

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
	if c.cfg.CacheBytes <= 0 {
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

// cacheAdd keeps m, just committed past the window; when it does not fit
// (or an earlier one did not), the cache stops where it is.
func (c *Core) cacheAdd(m *Msg) {
	if !c.cacheAll {
		return
	}
	if n := len(c.cache); n > c.cacheHead && c.cache[n-1].ID >= m.ID {
		// Not in commit order (the shell's duty 3): the cache cannot say
		// what lies between. Never again until the backlog is drained.
		c.cacheClear(false)
		return
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
	c.cache, c.cacheHead, c.cacheBytes = c.cache[:0], 0, 0
	c.cacheAll = all
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
	if c.cacheHead == len(c.cache) {
		c.cache, c.cacheHead = c.cache[:0], 0
	}
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
	for i := c.cacheHead; i < len(c.cache); i++ {
		if m := c.cache[i]; m.ID == id {
			c.cacheBytes -= cacheWeight(m)
			copy(c.cache[i:], c.cache[i+1:])
			c.cache[len(c.cache)-1] = nil
			c.cache = c.cache[:len(c.cache)-1]
			return
		}
	}
}

// fromCache answers req (not a rescan) from the cache when the journal
// would return the same: the messages after memTail up to req.Limit and
// req.MaxBytes, all cached, or fewer when the cache stands for the whole
// backlog. They leave the cache.
func (c *Core) fromCache(req *PageIn) ([]*Msg, bool) {
	c.cacheTrim()
	if req.After != c.memTail || (c.Cached() == 0 && !c.cacheAll) {
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
	if c.cacheHead == len(c.cache) {
		c.cache, c.cacheHead = c.cache[:0], 0
	}
	return msgs, true
}

// noCacheCap is SetCacheCap's "no bound".
const noCacheCap = math.MaxInt64
