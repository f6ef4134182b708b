package appliance_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// headerStreamSink is a StreamSink carrying every stream; it records the
// headers of what it was given.
type headerStreamSink struct {
	mu  sync.Mutex
	got []stomp.Headers
}

func (s *headerStreamSink) Name() string                { return "headers" }
func (s *headerStreamSink) Matches(string) bool         { return false }
func (s *headerStreamSink) MatchesStream(n string) bool { return strings.HasPrefix(n, "mc.") }
func (s *headerStreamSink) Publish(topic string, h stomp.Headers, _ []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, append(stomp.Headers(nil), h...))
	return nil
}

// TestStreamMulticast_OwnOffsetHeaders: a stream SEND that carries x-stream-offset / timestamp headers of its own
// (e.g. a consumer forwarding a MESSAGE it read from another stream) must
// not make the multicast copy announce a wrong offset: STOMP readers (and
// herald listen's catch-up, cmd/herald/listen_stream.go) take the first
// occurrence of a header. The STOMP delivery path (streamFrame) drops them;
// the multicast path must too.
func TestStreamMulticast_OwnOffsetHeaders(t *testing.T) {
	sink := &headerStreamSink{}
	tb := startWrapped(t, nil, nil, sink)
	c := tb.Dial(t)
	r, err := c.SendReceipt(ctxT(t), "/stream/mc.a", []byte("m0"), hdr("x-stream-offset", "999"), hdr("timestamp", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Get("x-stream-offset") != "0" {
		t.Fatalf("receipt offset %q, want 0", r.Get("x-stream-offset"))
	}
	waitFor(t, 5*time.Second, "the multicast copy", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return len(sink.got) == 1
	})
	sink.mu.Lock()
	h := sink.got[0]
	sink.mu.Unlock()
	if v, _ := h.Lookup("x-stream-offset"); v != "0" {
		t.Errorf("multicast copy of offset 0: first x-stream-offset header is %q (headers %v), want \"0\"", v, h)
	}
	for _, k := range []string{"x-stream-offset", "timestamp"} {
		n := 0
		for _, x := range h {
			if x.Key == k {
				n++
			}
		}
		if n != 1 {
			t.Errorf("multicast copy carries %d %s headers (%v), want the stream's one", n, k, h)
		}
	}
	if v, _ := h.Lookup("timestamp"); v == "1" {
		t.Errorf("multicast copy: first timestamp header is the sender's %q (headers %v), want the append time", v, h)
	}
	// The STOMP delivery of the same message is right (for contrast).
	sub, _ := c.SubscribeReceipt(ctxT(t), "/stream/mc.a", "auto", hdr("x-stream-offset", "first"))
	m := recv(t, sub)
	if m.Get("x-stream-offset") != "0" {
		t.Errorf("STOMP delivery: x-stream-offset %q", m.Get("x-stream-offset"))
	}
}
