package multicast

import (
	"context"
	"testing"
	"time"
)

// TestSender_LoneInlineDoesNotWakeWriter: a message Publish sends itself (LoneInline) wakes the
// writer goroutine only when the core's next deadline came before the one the writer waits for.
// A datagram sent moves the heartbeat later, so a steady publisher costs no wake-up per message
// (each one took another thread's time on the latency path). The writer still keeps the timers:
// heartbeats go out after the last message.
func TestSender_LoneInlineDoesNotWakeWriter(t *testing.T) {
	s, err := NewSender(SenderConfig{Group: "239.255.42.5:7495", Interface: "lo", LoneInline: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(context.Background()); err != nil {
		t.Skipf("multicast on lo: %v", err)
	}
	defer s.Close()
	const n = 200
	for i := 0; i < n; i++ {
		time.Sleep(300 * time.Microsecond) // more than inlineGap: every message is lone
		if err := s.Publish("a", nil, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	kicks := s.kicks.Load()
	t.Logf("%d messages, %d sent by Publish itself, %d writer wake-ups asked", n, st.Inline, kicks)
	if st.Inline < n*9/10 {
		t.Fatalf("%d of %d spaced messages sent by Publish itself, want at least 90%%", st.Inline, n)
	}
	if kicks > n/10 {
		t.Errorf("%d writer wake-ups for %d inline messages: want at most %d", kicks, st.Inline, n/10)
	}
	hb := st.Heartbeats
	deadline := time.Now().Add(2 * time.Second)
	for s.Stats().Heartbeats == hb {
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat within 2 s of the last message: the writer's timer was not kept")
		}
		time.Sleep(time.Millisecond)
	}
}
