package appliance

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/herald-mq/herald/appliance/stomp"
)

// topicRegistry maps topic names to subscriptions. Publishing reads an
// immutable snapshot (no lock on the hot path); subscribing copies it.
type topicRegistry struct {
	mu   sync.Mutex
	snap atomic.Pointer[topicSnapshot]
	seq  atomic.Uint64
	// stats per topic name, for admin
	stats sync.Map // name -> *topicStats
}

type topicSnapshot struct {
	exact map[string][]*subscription
	wild  []*subscription
}

type topicStats struct {
	in, out, dropped atomic.Uint64
	last             atomic.Pointer[lastValue] // with topics.last_value
}

type lastValue struct {
	id      string
	headers stomp.Headers
	body    []byte
}

func newTopicRegistry() *topicRegistry {
	r := &topicRegistry{}
	r.snap.Store(&topicSnapshot{exact: map[string][]*subscription{}})
	return r
}

// add registers sub; with topics.last_value it first queues the last
// message of every topic sub matches, under the lock publish takes to
// record last values, so that the subscriber sees each message once and in
// order.
func (r *topicRegistry) add(b *Broker, sub *subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b.sendLastValues(sub)
	old := r.snap.Load()
	n := &topicSnapshot{exact: make(map[string][]*subscription, len(old.exact)+1), wild: old.wild}
	for k, v := range old.exact {
		n.exact[k] = v
	}
	if hasWildcard(sub.name) {
		n.wild = append(append([]*subscription(nil), old.wild...), sub)
	} else {
		n.exact[sub.name] = append(append([]*subscription(nil), old.exact[sub.name]...), sub)
	}
	r.snap.Store(n)
}

func (r *topicRegistry) remove(sub *subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.snap.Load()
	n := &topicSnapshot{exact: make(map[string][]*subscription, len(old.exact))}
	without := func(list []*subscription) []*subscription {
		var out []*subscription
		for _, s := range list {
			if s != sub {
				out = append(out, s)
			}
		}
		return out
	}
	for k, v := range old.exact {
		if k == sub.name {
			v = without(v)
			if len(v) == 0 {
				continue
			}
		}
		n.exact[k] = v
	}
	n.wild = without(old.wild)
	r.snap.Store(n)
}

func (r *topicRegistry) statsFor(name string) *topicStats {
	if v, ok := r.stats.Load(name); ok {
		return v.(*topicStats)
	}
	v, _ := r.stats.LoadOrStore(name, &topicStats{})
	return v.(*topicStats)
}

// publish fans a message out to every matching subscriber and sink. Nothing
// is stored: with no subscriber the message is gone.
func (b *Broker) publish(name string, headers stomp.Headers, body []byte) {
	st := b.topics.statsFor(name)
	st.in.Add(1)
	b.stats.topicIn.Add(1)
	id := "t" + strconv.FormatUint(b.topics.seq.Add(1), 10)
	dest := prefixTopic + name
	var snap *topicSnapshot
	if b.cfg.Topics.LastValue {
		b.topics.mu.Lock()
		st.last.Store(&lastValue{id: id, headers: headers, body: body})
		snap = b.topics.snap.Load()
		b.topics.mu.Unlock()
	} else {
		snap = b.topics.snap.Load()
	}
	deliver := func(sub *subscription) {
		f := topicFrame(sub, dest, id, headers, body)
		if sub.s.deliverTopic(sub, st, f) {
			st.out.Add(1)
			b.stats.topicOut.Add(1)
		} else {
			st.dropped.Add(1)
		}
	}
	for _, sub := range snap.exact[name] {
		deliver(sub)
	}
	for _, sub := range snap.wild {
		if MatchTopic(sub.name, name) {
			deliver(sub)
		}
	}
	for _, sink := range b.sinks {
		if sink.Matches(name) {
			if err := sink.Publish(name, headers, body); err != nil {
				b.log.Warn("topic sink publish failed", "sink", sink.Name(), "topic", name, "err", err)
			}
		}
	}
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
		// The broker's own: a publisher's would fake (or hide) drops.
		if h.Key != "dropped-before" {
			f.Headers = append(f.Headers, h)
		}
	}
	return f
}

// sendLastValues gives a new topic subscriber the last message of every
// topic it matches (topics.last_value), before anything newer.
func (b *Broker) sendLastValues(sub *subscription) {
	if !b.cfg.Topics.LastValue {
		return
	}
	b.topics.stats.Range(func(k, v any) bool {
		name := k.(string)
		if name != sub.name && !MatchTopic(sub.name, name) {
			return true
		}
		if lv := v.(*topicStats).last.Load(); lv != nil {
			sub.s.deliverTopic(sub, v.(*topicStats), topicFrame(sub, prefixTopic+name, lv.id, lv.headers, lv.body, stomp.Header{Key: "last-value", Value: "true"}))
		}
		return true
	})
}
