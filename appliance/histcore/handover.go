package histcore

import "sort"

// Handover is one new subscriber's passage from history to live messages.
//
// The shell registers the subscription with a Handover before it reads the
// history; from then on every live message for it goes through Live, which
// holds it back while the history is being read. Finish then takes the
// history read (per topic, under the lock publishing holds while it
// appends to a ring and picks the subscriptions) and returns what to send:
// the history, then the held-back live messages that the history does not
// already hold. From then on Live lets every message through.
//
// No gap: a message appended before the subscription was registered is in
// the history read after it (or older than the last N asked for); one
// appended after reaches Live. No duplicate: a live message whose Seq is at
// most the highest Seq of its topic's history read is in that history (or
// older than its first message) and is not sent again.
type Handover struct {
	done bool
	held []Item
}

// Item is a message for the subscriber: a topic's entry, and whether it
// comes from the history.
type Item struct {
	Topic   string
	Entry   Entry
	History bool
	// Gap is set on the first history item of a topic when messages after
	// the reader's resume point were evicted before it could read them.
	Gap bool
}

// Live is called with each live message for the subscriber, in the order
// of its topic's sequence. True: send it now; false: it is held until
// Finish (which must then be called).
func (h *Handover) Live(topic string, e Entry) bool {
	if h.done {
		return true
	}
	h.held = append(h.held, Item{Topic: topic, Entry: e})
	return false
}

// Held is the number of messages held back.
func (h *Handover) Held() int { return len(h.held) }

// Done reports whether Finish has run.
func (h *Handover) Done() bool { return h.done }

// TopicHistory is one topic's history as read for the subscriber: its
// entries oldest first, and Gap when some after the resume point were lost.
type TopicHistory struct {
	Topic   string
	Entries []Entry
	Gap     bool
	// Upto is the highest Seq the ring had seen when read (its last
	// entry's, or its evicted mark): live messages up to it are not sent.
	Upto uint64
}

// Finish returns the history (all topics merged in Seq order, the first of
// each topic marked Gap when its TopicHistory says so) followed by the
// held-back live messages above each topic's Upto, and lets every later
// message through Live.
func (h *Handover) Finish(hist []TopicHistory) []Item {
	upto := make(map[string]uint64, len(hist))
	var out []Item
	for _, th := range hist {
		upto[th.Topic] = max(upto[th.Topic], th.Upto)
		for i, e := range th.Entries {
			out = append(out, Item{Topic: th.Topic, Entry: e, History: true, Gap: i == 0 && th.Gap})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Entry.Seq < out[j].Entry.Seq })
	for _, it := range h.held {
		if it.Entry.Seq > upto[it.Topic] {
			out = append(out, it)
		}
	}
	h.held, h.done = nil, true
	return out
}
