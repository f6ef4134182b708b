package appliance

// Topic history (topics.history): the recent messages of the topics that
// match a [[topics.history]] rule are kept in memory (package histcore, the
// deterministic core), and a subscriber asks for them with history:N on
// SUBSCRIBE (or history=N and Last-Event-ID on /events).
//
// The hand-over, with no gap and no duplicate: a publish to a topic with
// history takes histMu, appends to the topic's ring, reads the
// subscriptions and hands the message to each of them, in that order,
// before it lets go (so a topic's messages reach every subscriber in the
// order of their message-ids). A SUBSCRIBE with history registers the
// subscription with a histcore.Handover first (every live message for it
// is held back from then on), then reads the rings under histMu, then
// sends the history and the held messages the history does not hold, and
// only then lets live messages through (handMu). One lock for all rings
// keeps the byte bound exact; the work under it is an append and a queue
// push per subscriber, never a network write.

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/herald-mq/herald/appliance/histcore"
	"github.com/herald-mq/herald/appliance/stomp"
)

// TopicHistoryRule is one [[topics.history]] block.
type TopicHistoryRule struct {
	// Match is a topic name or pattern ("*" one segment, ">" the rest);
	// the first matching rule wins.
	Match string `toml:"match" json:"match"`
	// Keep is how many of each topic's latest messages are kept.
	Keep int `toml:"keep" json:"keep"`
	// MaxAge drops messages older than this ("0s": no age bound).
	MaxAge Duration `toml:"max_age" json:"max_age"`
}

// maxHistoryKeep bounds keep: a subscriber gets at most
// topics.subscriber_buffer messages at once anyway.
const maxHistoryKeep = 1 << 20

// validateHistory checks topics.history and topics.history_max_bytes.
func (c *Config) validateHistory() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if n := c.Topics.HistoryMaxBytes; n < 1<<10 || n > 1<<40 {
		bad("topics.history_max_bytes: %d: want 1024 (1 KiB) to 1099511627776 (1 TiB)", n)
	}
	for i, r := range c.Topics.History {
		where := fmt.Sprintf("topics.history[%d]", i)
		if r.Match == "" {
			bad("%s.match: must not be empty (example: \"metrics.>\")", where)
		} else if _, _, err := parseDest(prefixTopic+r.Match, true); err != nil {
			bad("%s.match: %q: %v", where, r.Match, err)
		}
		if r.Keep < 1 || r.Keep > maxHistoryKeep {
			bad("%s.keep: %d: want 1 to %d messages per topic", where, r.Keep, maxHistoryKeep)
		}
		if d := r.MaxAge.Duration; d < 0 || (d > 0 && d.Milliseconds() < 1) {
			bad("%s.max_age: %s: want 0s (no age bound) or at least 1ms", where, r.MaxAge)
		}
	}
	return errs
}

// topicHistory is the broker's history state.
type topicHistory struct {
	mu    sync.Mutex
	store *histcore.Store // under mu; nil until the first message kept
}

// histMsg is a message kept in history (the Value of its entries).
type histMsg struct {
	id      string
	headers stomp.Headers // with the broker's timestamp
	body    []byte
}

// historyRule returns the rule for topic name, if one matches.
func (b *Broker) historyRule(name string) (TopicHistoryRule, bool) {
	for _, r := range b.cfg().Topics.History {
		if r.Match == name || MatchTopic(r.Match, name) {
			return r, true
		}
	}
	return TopicHistoryRule{}, false
}

// historyMax is the byte bound of all history: topics.history_max_bytes and
// at most an eighth of the memory budget, like last values (history never
// drains by itself while messages arrive).
func (b *Broker) historyMax() int64 {
	return min(b.cfg().Topics.HistoryMaxBytes, b.mem.limit/8)
}

// historyMarkMax bounds what the marks of emptied rings weigh (the highest
// sequence each topic lost, so that a reader resuming after it is told):
// a 64th of the history's bound, at least 64 KiB; older marks fold into
// one mark for all topics the store no longer knows.
func historyMarkMax(historyMax int64) int64 {
	return max(64<<10, historyMax/64)
}

// histWeight is the weight of a kept message: name, headers, body and the
// core's structures.
func histWeight(name string, m *histMsg) int64 {
	n := len(name) + len(m.id) + len(m.body) + lastValueOverhead
	for _, h := range m.headers {
		n += len(h.Key) + len(h.Value) + 32
	}
	return int64(n)
}

// appendHistory keeps m in name's ring. b.hist.mu is held.
func (b *Broker) appendHistory(name string, rule TopicHistoryRule, seq uint64, now int64, m *histMsg) {
	h := &b.hist
	if h.store == nil {
		h.store = histcore.New(b.historyMax())
		h.store.SetMarkMax(historyMarkMax(b.historyMax()))
	}
	w := histWeight(name, m)
	b.mem.charge(w)
	released, _ := h.store.Append(name, rule.Keep, rule.MaxAge.Milliseconds(),
		histcore.Entry{Seq: seq, At: now, Size: w, Value: m}, now)
	b.mem.release(released)
}

// expireHistory drops messages past their max_age.
func (b *Broker) expireHistory(now int64) {
	h := &b.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.store != nil {
		b.mem.release(h.store.Expire(now))
	}
}

// reloadHistory applies reloaded history settings: the new byte bound, and
// each ring's new rule (or none: the ring goes).
func (b *Broker) reloadHistory(now int64) {
	h := &b.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.store == nil {
		return
	}
	released := h.store.SetMax(b.historyMax())
	h.store.SetMarkMax(historyMarkMax(b.historyMax()))
	var topics []string
	h.store.Range(func(t string) bool { topics = append(topics, t); return true })
	for _, t := range topics {
		if r, ok := b.historyRule(t); ok {
			released += h.store.Limit(t, r.Keep, r.MaxAge.Milliseconds(), now)
		} else {
			released += h.store.Forget(t)
		}
	}
	b.mem.release(released)
}

// historyMayKeep reports whether some topic pattern matches may have
// history: a rule matches it, or could match one of its topics.
func (b *Broker) historyMayKeep(pattern string) bool {
	for _, r := range b.cfg().Topics.History {
		if r.Match == pattern || MatchTopic(r.Match, pattern) || MatchTopic(pattern, r.Match) || hasWildcard(pattern) && hasWildcard(r.Match) {
			return true
		}
	}
	return false
}

// HistoryStats are the history's figures for admin views.
type HistoryStats struct {
	Bytes    int64
	Messages int
	Topics   int
	Dropped  uint64 // for the byte bound
	Expired  uint64 // for keep and max_age
}

func (b *Broker) historyStats() HistoryStats {
	h := &b.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.store == nil {
		return HistoryStats{}
	}
	return HistoryStats{Bytes: h.store.Bytes(), Messages: h.store.Len(), Topics: h.store.Topics(), Dropped: h.store.Dropped, Expired: h.store.Expired}
}

// subHistory is a topic subscription's request for history and its
// hand-over while it is being served.
type subHistory struct {
	n     int    // the last n messages of each topic
	after uint64 // only those after this sequence (history-after)

	done       atomic.Bool // the hand-over is finished and marks no more gaps: live messages go straight through
	mu         sync.Mutex
	h          *histcore.Handover // nil once done; under mu
	heldBytes  int64
	overflowed bool
}

// Header names of SUBSCRIBE and MESSAGE.
const (
	hdrHistory      = "history"       // SUBSCRIBE: the last N; MESSAGE: true on a message from history
	hdrHistoryAfter = "history-after" // SUBSCRIBE: only history after this message-id (t<N>)
	hdrHistoryGap   = "history-gap"   // MESSAGE: true when messages after history-after were lost
	hdrTimestampT   = "timestamp"     // MESSAGE: ms since the epoch the SEND was accepted
)

var gapHeader = stomp.Header{Key: hdrHistoryGap, Value: "true"}

// parseHistory reads history and history-after from a topic SUBSCRIBE; false:
// the session was failed.
func (s *session) parseHistory(f *stomp.Frame, sub *subscription) bool {
	v, after := f.Get(hdrHistory), f.Get(hdrHistoryAfter)
	if v == "" && after == "" {
		return true
	}
	lim := s.b.cfg().Topics.SubscriberBuffer
	n := lim
	if v != "" {
		var err error
		n, err = strconv.Atoi(v)
		if err != nil || n < 0 || n > lim {
			s.fail(f, "invalid history", fmt.Sprintf("history is how many of each topic's latest messages to send first, from 0 to %d (topics.subscriber_buffer); got %q.", lim, v))
			return false
		}
	}
	sh := &subHistory{n: n}
	if after != "" {
		seq, ok := parseTopicID(after)
		if !ok {
			s.fail(f, "invalid history-after", fmt.Sprintf("history-after is the message-id of a topic message (t followed by digits, example t1234); got %q.", after))
			return false
		}
		sh.after = seq
	}
	if n == 0 {
		return true
	}
	sh.h = &histcore.Handover{}
	sub.hist = sh
	return true
}

// parseTopicID reads a topic message-id, t<sequence>.
func parseTopicID(s string) (uint64, bool) {
	d, ok := strings.CutPrefix(s, "t")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(d, 10, 64)
	return n, err == nil && n > 0
}

// holdLive holds a live message back while sub's history is being read
// (held); otherwise it is to be sent now, marked history-gap:true when gap
// (the first message of a topic whose lost history no earlier message
// could report).
func (b *Broker) holdLive(sub *subscription, name string, seq uint64, now int64, m *histMsg) (held, gap bool) {
	sh := sub.hist
	if sh.done.Load() {
		return false, false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.h == nil {
		return false, false
	}
	if sh.h.Done() {
		_, gap = sh.h.Live(name, histcore.Entry{Seq: seq, At: now})
		if !sh.h.Pending() {
			sh.h = nil
			sh.done.Store(true)
		}
		return false, gap
	}
	if sh.overflowed {
		return true, false
	}
	w := histWeight(name, m)
	if sh.h.Held() >= b.cfg().Topics.SubscriberBuffer || sh.heldBytes+w > b.cfg().Topics.SubscriberBufferBytes {
		sh.overflowed = true
		return true, false
	}
	sh.heldBytes += w
	sh.h.Live(name, histcore.Entry{Seq: seq, At: now, Size: w, Value: m})
	return true, false
}

// sendHistory serves a new subscription's history request: the rings of
// the topics it matches, then the messages held back meanwhile, then live.
// sub was registered with its Handover before.
func (b *Broker) sendHistory(sub *subscription) {
	sh := sub.hist
	now := b.now().UnixMilli()
	var hist []histcore.TopicHistory
	var unknown bool
	b.hist.mu.Lock()
	if st := b.hist.store; st != nil {
		if hasWildcard(sub.name) {
			hist, unknown = st.ReadMatching(func(t string) bool { return MatchTopic(sub.name, t) }, sh.n, sh.after, now)
		} else {
			hist = append(hist, st.Read(sub.name, sh.n, sh.after, now))
		}
	}
	b.hist.mu.Unlock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	items := sh.h.Finish(hist, unknown)
	if !sh.h.Pending() {
		sh.h = nil
	}
	sh.heldBytes = 0
	for _, it := range items {
		m := it.Entry.Value.(*histMsg)
		st := b.topics.statsFor(it.Topic, now)
		var extra []stomp.Header
		if it.History {
			extra = append(extra, stomp.Header{Key: hdrHistory, Value: "true"})
		}
		if it.Gap {
			extra = append(extra, gapHeader)
		}
		f := topicFrame(sub, prefixTopic+it.Topic, m.id, m.headers, m.body, extra...)
		if sub.s.deliverTopic(sub, st, f) {
			st.out.Add(1)
			b.stats.topicOut.Add(1)
		} else {
			st.dropped.Add(1)
		}
	}
	sh.done.Store(sh.h == nil)
	if sh.overflowed {
		limit, byteLimit := b.cfg().Topics.SubscriberBuffer, b.cfg().Topics.SubscriberBufferBytes
		sub.s.drop("slow consumer", fmt.Sprintf("More than %d topic messages or %d bytes arrived while this subscription's history was being read (topics.subscriber_buffer, topics.subscriber_buffer_bytes); subscribe again.", limit, byteLimit))
	}
}
