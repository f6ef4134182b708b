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
//
// No silent gap: a topic whose history says messages after the reader's
// resume point were lost marks its first message for the reader (Gap),
// whether that is a history item, a held-back live one or the first live
// message after Finish (TakeGap); when the store cannot tell which topic
// lost them (ReadMatching's unknown), the first message for the reader is
// marked, whatever its topic.
type Handover struct {
	done bool
	held []Item
	// After Finish: topics whose gap is still to be marked on their next
	// message, and whether the next message of any topic is.
	gaps     map[string]bool
	gapFirst bool
}

// Item is a message for the subscriber: a topic's entry, and whether it
// comes from the history.
type Item struct {
	Topic   string
	Entry   Entry
	History bool
	// Gap is set on the first item of a topic when messages after the
	// reader's resume point were evicted before it could read them.
	Gap bool
}

// Live is called with each live message for the subscriber, in the order
// of its topic's sequence. Send: send it now, marked when gap; otherwise it
// is held until Finish (which must then be called).
func (h *Handover) Live(topic string, e Entry) (send, gap bool) {
	if h.done {
		return true, h.takeGap(topic)
	}
	h.held = append(h.held, Item{Topic: topic, Entry: e})
	return false, false
}

// Pending reports whether, after Finish, a gap is still to be marked on a
// later message (so the shell must pass live messages through Live).
func (h *Handover) Pending() bool { return h.gapFirst || len(h.gaps) > 0 }

// takeGap reports whether topic's next message is to be marked, and
// forgets that it was.
func (h *Handover) takeGap(topic string) bool {
	g := h.gapFirst || h.gaps[topic]
	h.gapFirst = false
	delete(h.gaps, topic)
	return g
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

// Finish returns the history (all topics merged in Seq order) followed by
// the held-back live messages above each topic's Upto, the first of each
// topic marked Gap when its TopicHistory says so (and the first of all when
// unknown), and lets every later message through Live, marking there the
// gaps no item returned could carry.
func (h *Handover) Finish(hist []TopicHistory, unknown bool) []Item {
	upto := make(map[string]uint64, len(hist))
	var gaps map[string]bool
	var out []Item
	for _, th := range hist {
		upto[th.Topic] = max(upto[th.Topic], th.Upto)
		if th.Gap {
			if gaps == nil {
				gaps = map[string]bool{}
			}
			gaps[th.Topic] = true
		}
		for _, e := range th.Entries {
			out = append(out, Item{Topic: th.Topic, Entry: e, History: true})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Entry.Seq < out[j].Entry.Seq })
	for _, it := range h.held {
		if it.Entry.Seq > upto[it.Topic] {
			out = append(out, it)
		}
	}
	for i := range out {
		if gaps[out[i].Topic] {
			out[i].Gap = true
			delete(gaps, out[i].Topic)
		}
	}
	if unknown && len(out) > 0 {
		out[0].Gap, unknown = true, false
	}
	h.held, h.done = nil, true
	h.gaps, h.gapFirst = gaps, unknown
	return out
}
