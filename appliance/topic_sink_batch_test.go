package appliance_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// batchSink records how the broker calls a TopicSinkBatcher (a multicast channel).
type batchSink struct {
	mu  sync.Mutex
	got []string
}

func (s *batchSink) Name() string              { return "batching" }
func (s *batchSink) Matches(topic string) bool { return strings.HasPrefix(topic, "m.") }
func (s *batchSink) note(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, e)
}
func (s *batchSink) Publish(_ string, _ stomp.Headers, body []byte) error {
	s.note("publish " + string(body))
	return nil
}
func (s *batchSink) PublishFrom(now time.Time, _ string, _ stomp.Headers, body []byte, more bool) error {
	if d := time.Since(now); d < 0 || d > time.Second {
		s.note("a frame time " + d.String() + " ago")
	}
	if more {
		s.note("more " + string(body))
	} else {
		s.note("publish " + string(body))
	}
	return nil
}
func (s *batchSink) Flush() { s.note("flush") }
func (s *batchSink) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.got
	s.got = nil
	return g
}

// TestTopicSinkBatcher: while the publisher's next frame is already read, a batching sink gets
// the message with more set (to hold it for the next: one datagram for both), and Flush
// before that reader waits for the network or handles a frame that may wait; the last message
// of what was read goes with Publish. A lone SEND goes with Publish, nothing held.
func TestTopicSinkBatcher(t *testing.T) {
	sink := &batchSink{}
	tb := startWrapped(t, nil, nil, sink)
	p := dialRaw(t, tb)
	p.connect("1.2")
	send := func(body string) string { return "SEND\ndestination:/topic/m.x\n\n" + body + "\x00" }
	want := func(what string, w ...string) {
		t.Helper()
		var got []string
		deadline := time.Now().Add(5 * time.Second)
		for len(got) < len(w) && time.Now().Before(deadline) {
			got = append(got, sink.take()...)
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // not synchronisation: nothing more may come
		got = append(got, sink.take()...)
		if !slices.Equal(got, w) {
			t.Errorf("%s: the sink got %q, want %q", what, got, w)
		}
	}

	// Three SENDs in one write: the first two held, the last published, then one flush.
	p.write(send("a1") + send("a2") + send("a3"))
	want("three SENDs read together", "more a1", "more a2", "publish a3", "flush")

	// A lone SEND: published, nothing to flush.
	p.write(send("b1"))
	want("a lone SEND", "publish b1")

	// A SEND read together with a SUBSCRIBE (which may wait): flushed before the SUBSCRIBE is
	// handled, so before its RECEIPT.
	p.write(send("c1") + "SUBSCRIBE\nid:1\ndestination:/queue/q\nreceipt:s\n\n\x00")
	if f := p.frame(); f.Command != stomp.CmdReceipt {
		t.Fatalf("got %s, want RECEIPT", f.Command)
	}
	if got := sink.take(); !slices.Equal(got, []string{"more c1", "flush"}) {
		t.Errorf("at the SUBSCRIBE's RECEIPT the sink got %q, want [more c1 flush]", got)
	}

	// A SEND read with only the start of the next frame: nothing whole to hold it for.
	p.write(send("d1") + "SEND\ndestination:/topic/m.x\n")
	want("a SEND before a partial frame", "publish d1")
	p.write("\nd2\x00")
	want("the rest of that frame", "publish d2")
}
