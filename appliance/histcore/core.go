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
//     Evicted > S; an emptied ring's mark is remembered per topic within
//     a byte bound of its own (SetMarkMax), then folded into one
//     store-wide mark, which answers for every topic it no longer knows;
//   - a Handover delivers, per topic, a suffix of the history followed by
//     every later live message, each once, in sequence order.
package histcore

import (
	"container/list"
	"slices"
	"strings"
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
	gone     uint64    // highest Seq of a mark folded out of marks
	// marks are the evicted marks of emptied rings, per topic, oldest
	// first in markOrder, weighing markBytes (markOverhead plus the name
	// each) within markMax.
	marks     map[string]*list.Element // of *mark
	markOrder list.List
	markBytes int64
	markMax   int64
	// Dropped counts messages that left a ring for the byte bound (or
	// were larger than it); Expired those that left for keep or max_age.
	Dropped, Expired uint64
}

// mark is an emptied ring's evicted mark.
type mark struct {
	topic   string
	evicted uint64
}

// markOverhead is what a remembered mark weighs besides its topic's name.
const markOverhead = 64

// New returns an empty store bounded by maxBytes, remembering the marks of
// emptied rings within maxBytes/64 (at least 64 KiB; see SetMarkMax).
func New(maxBytes int64) *Store {
	return &Store{maxBytes: maxBytes, rings: map[string]*ring{}, marks: map[string]*list.Element{}, markMax: max(64<<10, maxBytes/64)}
}

// SetMarkMax changes the bytes the marks of emptied rings may weigh; the
// oldest over it are folded into the store-wide mark.
func (s *Store) SetMarkMax(n int64) {
	s.markMax = max(n, 0)
	s.foldMarks()
}

// MarkBytes is the weight of the remembered marks.
func (s *Store) MarkBytes() int64 { return s.markBytes }

// remember keeps topic's mark (an emptied ring's), replacing an older one.
func (s *Store) remember(topic string, evicted uint64) {
	s.unremember(topic)
	s.marks[topic] = s.markOrder.PushBack(&mark{topic: topic, evicted: evicted})
	s.markBytes += markOverhead + int64(len(topic))
	s.foldMarks()
}

// unremember drops topic's mark and returns it (gone when it has none).
func (s *Store) unremember(topic string) uint64 {
	el := s.marks[topic]
	if el == nil {
		return s.gone
	}
	m := el.Value.(*mark)
	s.markOrder.Remove(el)
	delete(s.marks, topic)
	s.markBytes -= markOverhead + int64(len(topic))
	return m.evicted
}

// foldMarks folds the oldest marks into gone while they weigh over markMax.
func (s *Store) foldMarks() {
	for s.markBytes > s.markMax {
		m := s.markOrder.Front().Value.(*mark)
		s.gone = max(s.gone, s.unremember(m.topic))
	}
}

// markOf is topic's mark when it has no ring.
func (s *Store) markOf(topic string) uint64 {
	if el := s.marks[topic]; el != nil {
		return el.Value.(*mark).evicted
	}
	return s.gone
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
		// A ring forgotten earlier may have held this topic: its mark
		// (or the store-wide one) says what a resuming reader missed.
		r = &ring{topic: topic, evicted: s.unremember(topic)}
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
// messages held; its highest eviction is remembered as the topic's mark
// (within markMax; older marks fold into gone, which answers for a topic
// with neither ring nor mark, conservatively: a reader resuming before it
// may have missed messages, perhaps of another topic).
func (s *Store) dropIfEmpty(r *ring) {
	if r.len() == 0 {
		delete(s.rings, r.topic)
		if r.evicted > 0 {
			s.remember(r.topic, r.evicted)
		}
	}
}

// Expire evicts, in every ring, the messages older than its max_age at now,
// and returns the bytes released.
func (s *Store) Expire(now int64) int64 {
	var n int64
	var emptied []*ring
	for _, r := range s.rings {
		n += s.trim(r, now)
		if r.len() == 0 {
			emptied = append(emptied, r)
		}
	}
	// Their marks are remembered in topic order, so that which fold first
	// does not depend on the map's.
	slices.SortFunc(emptied, func(a, b *ring) int { return strings.Compare(a.topic, b.topic) })
	for _, r := range emptied {
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
	evicted := s.markOf(topic)
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

// Evicted is the highest Seq that left topic's ring (or a forgotten ring:
// its mark, or the store-wide one).
func (s *Store) Evicted(topic string) uint64 {
	if r := s.rings[topic]; r != nil {
		return r.evicted
	}
	return s.markOf(topic)
}

// ReadMatching is Read for every topic match accepts that has a ring or a
// remembered mark (a pattern's subscriber). Unknown says that a topic the
// store no longer knows may have lost messages after after (the
// store-wide mark is above it): which topic, it cannot tell.
func (s *Store) ReadMatching(match func(topic string) bool, n int, after uint64, now int64) (hist []TopicHistory, unknown bool) {
	for t := range s.rings {
		if match(t) {
			hist = append(hist, s.Read(t, n, after, now))
		}
	}
	if after > 0 {
		for t, el := range s.marks {
			if el.Value.(*mark).evicted > after && match(t) {
				hist = append(hist, s.Read(t, n, after, now))
			}
		}
	}
	return hist, after > 0 && s.gone > after
}
