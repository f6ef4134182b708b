package appliance

import (
	"strconv"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// Streams on multicast channels: a channel whose streams patterns match a
// stream carries each of its appends, in offset order, as a message of
// the wire topic "/stream/NAME" with the headers x-stream-offset and
// timestamp. A receiver that lost some (a #GAP it could not repair) reads
// them over STOMP from the stream at the first offset lost: the stream
// keeps what multicast's retransmit window no longer does.

// StreamSink is a TopicSink that also carries streams.
type StreamSink interface {
	TopicSink
	// MatchesStream reports whether the sink carries stream name.
	MatchesStream(name string) bool
}

// StreamWireTopic is the multicast topic of stream name's messages.
func StreamWireTopic(name string) string { return prefixStream + name }

// streamSinks returns the sinks carrying stream name.
func (b *Broker) streamSinks(name string) []TopicSink {
	var out []TopicSink
	for _, s := range b.sinks {
		if ss, ok := s.(StreamSink); ok && ss.MatchesStream(name) {
			out = append(out, s)
		}
	}
	return out
}

// checkStreamSinks asks the sinks carrying stream name whether they take
// a message of these headers and body (with the offset and time headers
// they would carry), before it is appended: a message too large for a
// channel is refused with the channel's error, not missing on the LAN.
func (b *Broker) checkStreamSinks(name string, headers stomp.Headers, body []byte) error {
	sinks := b.streamSinks(name)
	if len(sinks) == 0 {
		return nil
	}
	h := append(append(stomp.Headers(nil), headers...),
		stomp.Header{Key: hdrStreamOffset, Value: "18446744073709551615"},
		stomp.Header{Key: hdrTimestamp, Value: "9999999999999"})
	for _, s := range sinks {
		if c, ok := s.(TopicSinkChecker); ok {
			if err := c.Check(StreamWireTopic(name), h, body); err != nil {
				return err
			}
		}
	}
	return nil
}

// streamPub publishes a stream's appends to its sinks, in offset order,
// on its own goroutine (a channel's rate limit may block it; the journal's
// completions never wait for it). It reads from the tail cache, or the
// journal when it fell behind the tail, one page at a time: it holds no
// more than a page.
type streamPub struct {
	sinks []TopicSink
	next  uint64 // first offset not published
	wake  chan struct{}
}

// startPub starts st's publisher at offset from if a sink carries the
// stream (under st.mu; once).
func (st *stream) startPubLocked(from uint64) {
	if st.pubChecked {
		return
	}
	st.pubChecked = true
	sinks := st.b.streamSinks(st.name)
	if len(sinks) == 0 {
		return
	}
	p := &streamPub{sinks: sinks, next: from, wake: make(chan struct{}, 1)}
	st.pub = p
	st.b.goBackground(func() { st.publishLoop(p) })
}

// notifyPubLocked wakes the publisher (under st.mu).
func (st *stream) notifyPubLocked() {
	if st.pub != nil {
		select {
		case st.pub.wake <- struct{}{}:
		default:
		}
	}
}

func (st *stream) publishLoop(p *streamPub) {
	wire := StreamWireTopic(st.name)
	for {
		c := st.b.cfg().Streams
		st.mu.Lock()
		first, next, deleting := st.core.First(), st.core.Next(), st.deleting
		if p.next < first {
			p.next = first // removed by retention before it was published
		}
		from := p.next
		var msgs []*Message
		cached := false
		if from < next {
			msgs, cached = st.tail.page(from, c.PageMessages, c.PageBytes)
		}
		st.mu.Unlock()
		if deleting {
			return
		}
		if from >= next {
			select {
			case <-p.wake:
				continue
			case <-st.b.ctx.Done():
				return
			}
		}
		if !cached {
			var err error
			msgs, err = st.b.streams.j.StreamRead(st.b.ctx, st.name, from, c.PageMessages, c.PageBytes)
			if err != nil {
				if st.b.ctx.Err() != nil {
					return
				}
				st.b.log.Warn("stream multicast: read failed; retrying", "stream", st.name, "offset", from, "err", err)
				select {
				case <-time.After(time.Second):
				case <-st.b.ctx.Done():
					return
				}
				continue
			}
			if len(msgs) == 0 { // retention ran ahead of the core: look again
				select {
				case <-p.wake:
				case <-time.After(100 * time.Millisecond):
				case <-st.b.ctx.Done():
					return
				}
				continue
			}
		}
		for _, m := range msgs {
			// The stream's own offset and time, first; a sender's headers
			// of those names (a MESSAGE forwarded from another stream) are
			// dropped, as streamFrame drops them for STOMP subscribers.
			h := make(stomp.Headers, 0, len(m.Headers)+2)
			h = append(h, stomp.Header{Key: hdrStreamOffset, Value: strconv.FormatUint(m.ID, 10)},
				stomp.Header{Key: hdrTimestamp, Value: strconv.FormatInt(m.Enqueued, 10)})
			for _, x := range m.Headers {
				switch x.Key {
				case hdrStreamOffset, hdrTimestamp, hdrStreamGap:
					continue
				}
				h = append(h, x)
			}
			for _, s := range p.sinks {
				if err := s.Publish(wire, h, m.Body); err != nil {
					st.b.log.Warn("stream multicast publish failed", "sink", s.Name(), "stream", st.name, "offset", m.ID, "err", err)
				}
			}
			p.next = m.ID + 1
		}
	}
}
