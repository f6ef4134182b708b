// Package histcore is the deterministic core of Herald's topic history
// (topics.history): a ring of recent messages per topic, bounded per topic
// by a count (keep) and an age (max_age) and over all topics by bytes
// (topics.history_max_bytes), and the hand-over that gives a new subscriber
// the last N messages and then the live ones with no gap and no duplicate.
//
// It has no goroutines, locks, clocks, sockets or SQL: the shell (package
// appliance, topic.go) passes the time in and serialises every call to a
// Store under one lock, the same lock under which it hands a published
// message to the subscriptions. See Handover for the subscriber's side.
//
// Invariants (checked by the seeded simulation in sim_test.go after every
// step):
//   - a ring holds its topic's most recent messages in publication order
//     (sequence numbers increasing), at most keep of them, none older than
//     max_age once Expire or Append has run at that time;
//   - the bytes of all rings never exceed the store's bound after a call
//     returns, and equal the sum of the sizes held; the oldest message of
//     any topic goes first when the bound is reached, and a message larger
//     than the bound is not kept;
//   - Evicted(topic) is the highest sequence number that left the ring, so
//     a reader resuming after sequence S knows it missed messages when
//     Evicted > S;
//   - a Handover delivers, per topic, a suffix of the history followed by
//     every later live message, each once, in sequence order.
package histcore

import (
	"container/list"
	"slices"
)

// Entry is one message kept in a ring.
type Entry struct {
	Seq   uint64 // the broker's topic sequence (message-id t<Seq>), increasing
	At    int64  // ms since the epoch the message was accepted
	Size  int64  // weight charged to the byte bound
	Value any    // the message, opaque to the core
}

// ring is one topic's history, oldest first.
type ring struct {
	topic   string
	entries []*list.Element // of *item, oldest first; head is the first live one
	head    int
	evicted uint64 // highest Seq that left the ring
	keep    int
	maxAge  int64
}

type item struct {
	r *ring
	e Entry
}

func (r *ring) len() int { return len(r.entries) - r.head }

// front is the ring's oldest element.
func (r *ring) front() *list.Element { return r.entries[r.head] }

// popFront drops the oldest element from the ring (not from the store's
// order); the slice is compacted once half of it is dead.
func (r *ring) popFront() {
	r.entries[r.head] = nil
	r.head++
	if r.head > 32 && r.head*2 >= len(r.entries) {
		n := copy(r.entries, r.entries[r.head:])
		clear(r.entries[n:])
		r.entries = r.entries[:n]
		r.head = 0
	}
}

// Store holds the rings of all topics.
type Store struct {
	maxBytes int64
	bytes    int64
	rings    map[string]*ring
	order    list.List // of *item, in append order: the oldest first
	gone     uint64    // highest Seq evicted from a ring since forgotten
	// Dropped counts messages that left a ring for the byte bound (or
	// were larger than it); Expired those that left for keep or max_age.
	Dropped, Expired uint64
}

// New returns an empty store bounded by maxBytes.
func New(maxBytes int64) *Store {
	return &Store{maxBytes: maxBytes, rings: map[string]*ring{}}
}

// Bytes is the weight of all messages held.
func (s *Store) Bytes() int64 { return s.bytes }

// Len is the number of messages held.
func (s *Store) Len() int { return s.order.Len() }

// Topics is the number of topics with a ring.
func (s *Store) Topics() int { return len(s.rings) }

// Append adds e to topic's ring, whose limits are keep messages (at least
// 1) and maxAge ms (0: no age limit), then evicts: the ring's messages over
// keep or older than now-maxAge, then the store's oldest while the bytes
// exceed the bound. It returns the bytes released (the caller charged
// e.Size) and whether e was kept: a message larger than the bound is not.
// e.Seq must be higher than any Seq appended to this topic before.
func (s *Store) Append(topic string, keep int, maxAge int64, e Entry, now int64) (released int64, kept bool) {
	r := s.rings[topic]
	if r == nil {
		// A ring forgotten earlier may have held this topic: a reader
		// resuming before gone may have missed messages.
		r = &ring{topic: topic, evicted: s.gone}
		s.rings[topic] = r
	}
	r.keep, r.maxAge = max(keep, 1), max(maxAge, 0)
	if e.Size > s.maxBytes {
		r.evicted = max(r.evicted, e.Seq)
		s.Dropped++
		released = e.Size + s.trim(r, now)
		s.dropIfEmpty(r)
		return released, false
	}
	r.entries = append(r.entries, s.order.PushBack(&item{r: r, e: e}))
	s.bytes += e.Size
	released = s.trim(r, now)
	for s.bytes > s.maxBytes {
		released += s.evictOldest()
	}
	return released, true
}

// trim evicts r's messages over keep or past maxAge.
func (s *Store) trim(r *ring, now int64) int64 {
	var n int64
	for r.len() > 0 {
		it := r.front().Value.(*item)
		if r.len() <= r.keep && (r.maxAge == 0 || it.e.At > now-r.maxAge) {
			break
		}
		n += s.remove(r)
		s.Expired++
	}
	return n
}

// remove drops r's oldest message.
func (s *Store) remove(r *ring) int64 {
	el := r.front()
	it := el.Value.(*item)
	s.order.Remove(el)
	r.popFront()
	r.evicted = max(r.evicted, it.e.Seq)
	s.bytes -= it.e.Size
	return it.e.Size
}

// evictOldest drops the oldest message of all topics for the byte bound.
func (s *Store) evictOldest() int64 {
	r := s.order.Front().Value.(*item).r
	n := s.remove(r)
	s.Dropped++
	s.dropIfEmpty(r)
	return n
}

// dropIfEmpty forgets an empty ring, so that rings are at most as many as
// messages held; its highest eviction joins gone, which Last reports for
// a topic with no ring (conservatively: a reader resuming before it may
// have missed messages, perhaps of another topic).
func (s *Store) dropIfEmpty(r *ring) {
	if r.len() == 0 {
		s.gone = max(s.gone, r.evicted)
		delete(s.rings, r.topic)
	}
}

// Expire evicts, in every ring, the messages older than its max_age at now,
// and returns the bytes released.
func (s *Store) Expire(now int64) int64 {
	var n int64
	for _, r := range s.rings {
		n += s.trim(r, now)
		s.dropIfEmpty(r)
	}
	return n
}

// SetMax changes the byte bound, evicting the oldest messages down to it,
// and returns the bytes released.
func (s *Store) SetMax(maxBytes int64) int64 {
	s.maxBytes = maxBytes
	var n int64
	for s.bytes > s.maxBytes {
		n += s.evictOldest()
	}
	return n
}

// Limit changes topic's keep and maxAge (a reload) and trims its ring at
// now; it returns the bytes released.
func (s *Store) Limit(topic string, keep int, maxAge int64, now int64) int64 {
	r := s.rings[topic]
	if r == nil {
		return 0
	}
	r.keep, r.maxAge = max(keep, 1), max(maxAge, 0)
	n := s.trim(r, now)
	s.dropIfEmpty(r)
	return n
}

// Forget drops topic's ring (its topic is no longer kept by any rule) and
// returns the bytes released.
func (s *Store) Forget(topic string) int64 {
	r := s.rings[topic]
	if r == nil {
		return 0
	}
	var n int64
	for r.len() > 0 {
		n += s.remove(r)
		s.Expired++
	}
	s.dropIfEmpty(r)
	return n
}

// Range calls fn with every topic that has a ring, in no order, until fn
// returns false.
func (s *Store) Range(fn func(topic string) bool) {
	for t := range s.rings {
		if !fn(t) {
			return
		}
	}
}

// Read returns topic's history for a subscriber: the messages with Seq >
// after, at most n of them (the most recent), oldest first, none older
// than the ring's max_age at now. When after is not 0 (a reader resuming),
// Gap says that messages after it are not all given: they left the ring,
// or there are more than n, or they are past max_age. Upto is the
// highest Seq the topic's ring has seen (see Handover.Finish).
func (s *Store) Read(topic string, n int, after uint64, now int64) TopicHistory {
	th := TopicHistory{Topic: topic}
	r := s.rings[topic]
	evicted := s.gone
	if r != nil {
		evicted = r.evicted
	}
	th.Gap = after > 0 && evicted > after
	th.Upto = evicted
	if r == nil {
		return th
	}
	if r.len() > 0 {
		th.Upto = max(th.Upto, r.entries[len(r.entries)-1].Value.(*item).e.Seq)
	}
	i := len(r.entries) - 1
	for ; i >= r.head && len(th.Entries) < n; i-- {
		e := r.entries[i].Value.(*item).e
		if e.Seq <= after || (r.maxAge > 0 && e.At <= now-r.maxAge) {
			break
		}
		th.Entries = append(th.Entries, e)
	}
	// A resuming reader also missed what the ring holds after its point
	// but is not given (past n, or past max_age and not yet trimmed).
	if after > 0 && i >= r.head && r.entries[i].Value.(*item).e.Seq > after {
		th.Gap = true
	}
	slices.Reverse(th.Entries)
	return th
}

// Evicted is the highest Seq that left topic's ring (or a forgotten ring).
func (s *Store) Evicted(topic string) uint64 {
	if r := s.rings[topic]; r != nil {
		return r.evicted
	}
	return s.gone
}
