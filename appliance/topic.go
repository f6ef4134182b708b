package appliance

import (
	"container/list"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// topicRegistry maps topic names to subscriptions. Publishing reads
// immutable lists (no lock on the hot path); a subscription change copies
// only the list of its own topic name (or the list of wildcard patterns),
// never the whole registry.
type topicRegistry struct {
	mu    sync.Mutex              // serialises changes
	exact sync.Map                // name -> *subList, subscriptions to that exact name
	wild  atomic.Pointer[subList] // subscriptions with a wildcard pattern
	seq   atomic.Uint64
	// stats per topic name, for admin; idle names are forgotten
	// (forgetIdle).
	stats sync.Map // name -> *topicStats

	// Last values (topics.last_value), least recently updated first, and
	// their bytes; under mu.
	lvOrder list.List // of *topicStats
	lvBytes int64
	// pubLocks serialise, per topic (by a hash of its name), a publish's
	// sequence, last value and hand-out to the subscriptions when
	// topics.last_value is on (and no history rule holds hist.mu), so the
	// value kept is the last one every subscriber got.
	pubLocks [64]sync.Mutex
	mem      *memBudget // charged with lvBytes

	lvEvicted atomic.Uint64 // last values dropped for the byte bound
	forgotten atomic.Uint64 // idle topics forgotten
}

// subList is an immutable list of subscriptions.
type subList struct{ subs []*subscription }

// listOf reads one name's list; nil (empty) while add is creating it.
func listOf(v any) []*subscription {
	if l := v.(*atomic.Pointer[subList]).Load(); l != nil {
		return l.subs
	}
	return nil
}

// exactSubs returns the subscriptions to exactly name.
func (r *topicRegistry) exactSubs(name string) []*subscription {
	if v, ok := r.exact.Load(name); ok {
		return listOf(v)
	}
	return nil
}

// wildSubs returns the subscriptions with a wildcard pattern.
func (r *topicRegistry) wildSubs() []*subscription { return r.wild.Load().subs }

// rangeExact calls fn for every name with subscriptions, until it returns
// false.
func (r *topicRegistry) rangeExact(fn func(name string, subs []*subscription) bool) {
	r.exact.Range(func(k, v any) bool {
		return fn(k.(string), listOf(v))
	})
}

type topicStats struct {
	in, out, dropped atomic.Uint64
	used             atomic.Int64              // ms since epoch of its creation or last message
	last             atomic.Pointer[lastValue] // with topics.last_value; set under topicRegistry.mu

	lvElem *list.Element // in topicRegistry.lvOrder while last is set; under mu
	lvSize int64         // last's weight; under mu
}

// topicLockIndex picks name's lock in topicRegistry.pubLocks (FNV-1a).
func topicLockIndex(name string) int {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint32(name[i])) * 16777619
	}
	return int(h % 64)
}

type lastValue struct {
	id      string
	headers stomp.Headers
	body    []byte
}

// lastValueOverhead is the weight of a last value besides its name,
// headers and body: its structs, list element and map entry.
const lastValueOverhead = 256

func (lv *lastValue) weight(name string) int64 {
	n := len(name) + len(lv.id) + len(lv.body) + lastValueOverhead
	for _, h := range lv.headers {
		n += len(h.Key) + len(h.Value) + 32
	}
	return int64(n)
}

// lastValueMax is the byte bound of all last values: topics.last_value_max_bytes,
// and at most an eighth of the memory budget (a quarter of the connections'
// half): last values never drain by themselves, and producers wait while
// that half is spent.
func (b *Broker) lastValueMax() int64 {
	return min(b.cfg().Topics.LastValueMaxBytes, b.mem.limit/8)
}

// setLast makes lv the last value of topic st, or drops st's last value
// when lv alone weighs more than maxBytes; then it evicts the least
// recently updated values while all weigh more than maxBytes. r.mu is held.
func (r *topicRegistry) setLast(name string, st *topicStats, lv *lastValue, maxBytes int64) {
	r.dropLast(st)
	w := lv.weight(name)
	if w > maxBytes {
		r.lvEvicted.Add(1)
		return
	}
	st.last.Store(lv)
	st.lvSize = w
	st.lvElem = r.lvOrder.PushBack(st)
	r.lvBytes += w
	r.mem.charge(w)
	for r.lvBytes > maxBytes {
		r.dropLast(r.lvOrder.Front().Value.(*topicStats))
		r.lvEvicted.Add(1)
	}
}

// dropLast forgets st's last value, if any. r.mu is held.
func (r *topicRegistry) dropLast(st *topicStats) {
	if st.lvElem == nil {
		return
	}
	r.lvOrder.Remove(st.lvElem)
	r.lvBytes -= st.lvSize
	r.mem.release(st.lvSize)
	st.lvElem, st.lvSize = nil, 0
	st.last.Store(nil)
}

// forgetIdle drops the state of every topic with no subscriber, no last
// value and no message since cutoff (ms since epoch), and returns how many
// it dropped. A publish racing with it may count on the dropped state; a
// last value never lands there (publish re-checks under mu).
func (r *topicRegistry) forgetIdle(cutoff int64) int {
	n := 0
	r.stats.Range(func(k, v any) bool {
		st := v.(*topicStats)
		if st.used.Load() > cutoff || st.last.Load() != nil {
			return true
		}
		r.mu.Lock()
		if st.used.Load() <= cutoff && st.lvElem == nil && len(r.exactSubs(k.(string))) == 0 {
			if r.stats.CompareAndDelete(k, v) {
				n++
			}
		}
		r.mu.Unlock()
		return true
	})
	r.forgotten.Add(uint64(n))
	return n
}

// forgetTopics runs forgetIdle every quarter of topics.idle_forget (at most
// every minute) until the broker stops.
func (b *Broker) forgetTopics() {
	defer b.wg.Done()
	idle := b.cfg().Topics.IdleForget.Duration
	every := min(max(idle/4, time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			cutoff := b.now().Add(-idle).UnixMilli()
			b.topics.forgetIdle(cutoff)
			b.expireHistory(b.now().UnixMilli())
			b.forgetIdleQueues(cutoff)
		case <-b.stop:
			return
		}
	}
}

func newTopicRegistry() *topicRegistry {
	r := &topicRegistry{}
	r.wild.Store(&subList{})
	return r
}

// add registers sub; with topics.last_value it first queues the last
// message of every topic sub matches, under the lock publish takes to
// record last values, so that the subscriber sees each message once and in
// order.
//
// A subscription with history (sub.hist) is registered with its hand-over
// pending, then served its history (sendHistory), which lets live
// messages through once the history is out.
func (r *topicRegistry) add(b *Broker, sub *subscription) {
	r.addLocked(b, sub)
	if sub.hist != nil {
		b.sendHistory(sub)
	}
}

func (r *topicRegistry) addLocked(b *Broker, sub *subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b.sendLastValues(sub)
	if hasWildcard(sub.name) {
		r.wild.Store(&subList{append(append([]*subscription(nil), r.wildSubs()...), sub)})
		return
	}
	v, _ := r.exact.LoadOrStore(sub.name, &atomic.Pointer[subList]{})
	p := v.(*atomic.Pointer[subList])
	p.Store(&subList{append(append([]*subscription(nil), listOf(v)...), sub)})
}

func (r *topicRegistry) remove(sub *subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	without := func(list []*subscription) []*subscription {
		var out []*subscription
		for _, s := range list {
			if s != sub {
				out = append(out, s)
			}
		}
		return out
	}
	if hasWildcard(sub.name) {
		r.wild.Store(&subList{without(r.wildSubs())})
		return
	}
	v, ok := r.exact.Load(sub.name)
	if !ok {
		return
	}
	p := v.(*atomic.Pointer[subList])
	if rest := without(listOf(v)); len(rest) > 0 {
		p.Store(&subList{rest})
	} else {
		r.exact.Delete(sub.name)
	}
}

// statsFor returns the state of topic name, created if need be, marked
// used at now (ms since epoch).
func (r *topicRegistry) statsFor(name string, now int64) *topicStats {
	if v, ok := r.stats.Load(name); ok {
		st := v.(*topicStats)
		if st.used.Load() < now {
			st.used.Store(now)
		}
		return st
	}
	st := &topicStats{}
	st.used.Store(now)
	v, _ := r.stats.LoadOrStore(name, st)
	return v.(*topicStats)
}

// publish fans a message out to every matching subscriber and sink. With
// no subscriber the message is gone, unless a topics.history rule keeps
// it (topic_history.go) or topics.last_value is on.
//
// from is the publisher's session (nil: none): subscribers whose writer
// was idle are left on its list to write to from its goroutine once the
// frames it has read are handled (flushClients, topic_direct.go) instead
// of waking their writers now.
func (b *Broker) publish(name string, userHeaders stomp.Headers, body []byte, from *session) {
	// A publisher's message is stamped with the time the reader came to
	// its frame (frameStarted's clock read, not another).
	var now int64
	if from != nil && b.realClock && !from.frameAt.IsZero() {
		now = from.frameAt.UnixMilli()
	} else {
		now = b.now().UnixMilli()
	}
	st := b.topics.statsFor(name, now)
	// The MESSAGE as every subscriber gets it, built once: its headers
	// (less message-id, set below) are also what history and the last
	// value keep. Without history, last value or a subscriber (a topic
	// only a multicast channel carries) it is not built at all.
	var shared *topicShared
	var headers stomp.Headers
	var id string
	build := func() {
		shared = newTopicShared(prefixTopic+name, userHeaders, body, now)
		headers = shared.f.Headers[2:]
	}
	setID := func(seq uint64) {
		shared.setID(topicMessageID(seq))
		id = shared.id
	}
	rule, kept := b.historyRule(name)
	keepLast := b.cfg().Topics.LastValue
	if kept || keepLast {
		build()
	}
	var pubLock *sync.Mutex
	if kept {
		// The sequence, the ring and the hand-out to the subscriptions
		// in one critical section: see topic_history.go.
		b.hist.mu.Lock()
	} else if keepLast {
		pubLock = &b.topics.pubLocks[topicLockIndex(name)]
		pubLock.Lock()
	}
	seq := b.topics.seq.Add(1)
	if shared != nil {
		setID(seq)
	}
	var msg *histMsg
	if kept {
		msg = &histMsg{id: id, headers: headers, body: body}
		b.appendHistory(name, rule, seq, now, msg)
	}
	var exact, wild []*subscription
	if keepLast {
		b.topics.mu.Lock()
		if v, ok := b.topics.stats.Load(name); !ok || v.(*topicStats) != st {
			st = b.topics.statsFor(name, now) // forgotten meanwhile
		}
		b.topics.setLast(name, st, &lastValue{id: id, headers: headers, body: body}, b.lastValueMax())
		exact, wild = b.topics.exactSubs(name), b.topics.wildSubs()
		b.topics.mu.Unlock()
	} else {
		exact, wild = b.topics.exactSubs(name), b.topics.wildSubs()
		if shared == nil && (len(exact) > 0 || anyMatches(wild, name)) {
			build()
			setID(seq)
		}
	}
	st.in.Add(1)
	b.stats.topicIn.Add(1)
	// One frame for every subscriber: each gets its own head (command,
	// subscription, ack) and shares the encoded rest (topicShared).
	deliver := func(sub *subscription) {
		if sub.hist != nil {
			if msg == nil {
				msg = &histMsg{id: id, headers: headers, body: body}
			}
			held, gap := b.holdLive(sub, name, seq, now, msg)
			if held {
				return
			}
			if gap {
				// The first message of a topic whose lost history no
				// earlier one could report: its own frame, marked.
				if sub.s.deliverTopic(sub, st, topicFrame(sub, prefixTopic+name, id, headers, body, gapHeader)) {
					st.out.Add(1)
					b.stats.topicOut.Add(1)
				} else {
					st.dropped.Add(1)
				}
				return
			}
		}
		if sub.s.deliverTopicShared(sub, st, shared, from) {
			st.out.Add(1)
			b.stats.topicOut.Add(1)
		} else {
			st.dropped.Add(1)
		}
	}
	for _, sub := range exact {
		deliver(sub)
	}
	for _, sub := range wild {
		if MatchTopic(sub.name, name) {
			deliver(sub)
		}
	}
	if kept {
		b.hist.mu.Unlock()
	} else if pubLock != nil {
		pubLock.Unlock()
	}
	for _, sink := range b.sinks {
		if sink.Matches(name) {
			var err error
			if bs, ok := sink.(TopicSinkBatcher); ok && from != nil {
				at := from.frameAt
				if !b.realClock || at.IsZero() {
					at = time.Now()
				}
				more := from.holdsNext()
				err = bs.PublishFrom(at, name, userHeaders, body, more)
				if more {
					from.corkedSink(bs)
				}
			} else {
				err = sink.Publish(name, userHeaders, body)
			}
			if err != nil {
				b.log.Warn("topic sink publish failed", "sink", sink.Name(), "topic", name, "err", err)
			}
		}
	}
}

// anyMatches reports whether a wildcard subscription of subs matches topic.
func anyMatches(subs []*subscription, topic string) bool {
	for _, sub := range subs {
		if MatchTopic(sub.name, topic) {
			return true
		}
	}
	return false
}

// topicMessageID is the message-id of topic message seq: "t" and seq, in
// one allocation.
func topicMessageID(seq uint64) string {
	var buf [24]byte
	return string(strconv.AppendUint(append(buf[:0], 't'), seq, 10))
}

// topicShared is a topic message as every subscriber gets it, less the
// headers of its own (subscription, ack, dropped-before): f holds the rest,
// and the writers encode it once per protocol version (tail). One
// allocation holds the frame and room for its first headers.
type topicShared struct {
	f     stomp.Frame
	id    string // message-id, and the ack header's value
	tails [3]atomic.Pointer[[]byte]
	room  [8]stomp.Header
}

// newTopicShared builds the MESSAGE for dest: message-id (empty until
// setID), destination, the publisher's headers less those the broker sets
// (a publisher's would fake or hide drops, history or a timestamp), and
// the broker's timestamp (ms).
func newTopicShared(dest string, headers stomp.Headers, body []byte, now int64) *topicShared {
	t := &topicShared{}
	t.f.Command, t.f.Body = stomp.CmdMessage, body
	h := t.room[:0]
	if len(headers)+3 > len(t.room) {
		h = make(stomp.Headers, 0, len(headers)+3)
	}
	h = append(h, stomp.Header{Key: "message-id"}, stomp.Header{Key: "destination", Value: dest})
	for _, kv := range headers {
		if kv.Key != hdrTimestampT && !brokersOwn(kv.Key) {
			h = append(h, kv)
		}
	}
	t.f.Headers = append(h, stomp.Header{Key: hdrTimestampT, Value: strconv.FormatInt(now, 10)})
	return t
}

// brokersOwn reports whether key is a MESSAGE header only the broker sets
// (per subscription or per delivery): a publisher's would fake or hide
// drops, history or a last value, so it is never passed on.
func brokersOwn(key string) bool {
	switch key {
	case "dropped-before", hdrHistory, hdrHistoryGap, "last-value":
		return true
	}
	return false
}

// setID sets the message's id, before any subscriber sees it.
func (t *topicShared) setID(id string) {
	t.id = id
	t.f.Headers[0].Value = id
}

// tail is the encoded rest of the frame for version v (built by the first
// writer that needs it; concurrent writers may both build it, alike).
func (t *topicShared) tail(v string) []byte {
	i := -1
	switch v {
	case stomp.V10:
		i = 0
	case stomp.V11:
		i = 1
	case stomp.V12:
		i = 2
	}
	if i >= 0 {
		if p := t.tails[i].Load(); p != nil {
			return *p
		}
	}
	n := len(t.f.Body) + 32
	for _, h := range t.f.Headers {
		n += len(h.Key) + len(h.Value) + 2
	}
	b := stomp.AppendFrameRest(make([]byte, 0, n+n/8), &t.f, v) // room for escapes
	if i >= 0 {
		t.tails[i].Store(&b)
	}
	return b
}

// appendHead appends the command line and sub's own headers of a shared
// topic message (drops: the dropped-before count, 0 for none).
func (t *topicShared) appendHead(dst []byte, sub *subscription, drops int, v string) []byte {
	dst = append(dst, stomp.CmdMessage...)
	dst = append(dst, '\n')
	dst = stomp.AppendHeader(dst, stomp.CmdMessage, v, stomp.Header{Key: "subscription", Value: sub.id})
	if sub.ack != ackAuto {
		dst = stomp.AppendHeader(dst, stomp.CmdMessage, v, stomp.Header{Key: "ack", Value: t.id})
	}
	if drops > 0 {
		dst = append(dst, "dropped-before:"...)
		dst = strconv.AppendInt(dst, int64(drops), 10)
		dst = append(dst, '\n')
	}
	return dst
}

func topicFrame(sub *subscription, dest, id string, headers stomp.Headers, body []byte, extra ...stomp.Header) *stomp.Frame {
	f := &stomp.Frame{Command: stomp.CmdMessage, Body: body}
	f.Headers = make(stomp.Headers, 0, len(headers)+len(extra)+4)
	f.Headers = append(f.Headers,
		stomp.Header{Key: "subscription", Value: sub.id},
		stomp.Header{Key: "message-id", Value: id},
		stomp.Header{Key: "destination", Value: dest})
	if sub.ack != ackAuto {
		f.Headers = append(f.Headers, stomp.Header{Key: "ack", Value: id})
	}
	f.Headers = append(f.Headers, extra...)
	for _, h := range headers {
		if !brokersOwn(h.Key) {
			f.Headers = append(f.Headers, h)
		}
	}
	return f
}

// sendLastValues gives a new topic subscriber the last message of every
// topic it matches (topics.last_value), before anything newer.
func (b *Broker) sendLastValues(sub *subscription) {
	if !b.cfg().Topics.LastValue {
		return
	}
	b.topics.stats.Range(func(k, v any) bool {
		name := k.(string)
		if name != sub.name && !MatchTopic(sub.name, name) {
			return true
		}
		if _, kept := b.historyRule(name); kept && sub.hist != nil {
			return true // its history comes instead
		}
		if lv := v.(*topicStats).last.Load(); lv != nil {
			sub.s.deliverTopic(sub, v.(*topicStats), topicFrame(sub, prefixTopic+name, lv.id, lv.headers, lv.body, stomp.Header{Key: "last-value", Value: "true"}))
		}
		return true
	})
}
