package multicast

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// A reader slower than a burst loses nothing: delivery waits for room in Events instead of
// dropping (issue 11, found 10: a resumed `herald listen` reported 46k slow-consumer gaps while a
// slower steady reader lost none). A reader that takes nothing for SlowConsumerWait is a slow
// consumer: what is dropped is reported as one gap, before the stream's next message.
func TestReceiver_SlowReaderLosesNothing(t *testing.T) {
	r, err := NewReceiver(ReceiverConfig{Group: DefaultGroup, EventsLen: 16, SlowConsumerWait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got := make(chan []Event)
	pause := make(chan struct{})
	go func() { // a reader much slower than the burst, then paused
		var evs []Event
		for len(evs) < 2000 {
			evs = append(evs, <-r.events)
			time.Sleep(20 * time.Microsecond) // not synchronisation: the reader's pace
		}
		got <- evs
		<-pause
		for e := range r.events {
			evs = append(evs, e)
			if m, ok := e.(Message); ok && m.StreamSeq == 3000 {
				break
			}
		}
		got <- evs
	}()
	for q := uint64(1); q <= 2000; q++ { // a burst: the socket backlog after a stop
		r.emit(ctx, Message{Topic: "a", Stream: 1, StreamSeq: q})
	}
	evs := <-got
	if st := r.Stats(); r.slowDrops.Load() != 0 || st.Gaps != 0 {
		t.Fatalf("slow reader: %d messages dropped, want 0", r.slowDrops.Load())
	}
	for i, e := range evs {
		if m, ok := e.(Message); !ok || m.StreamSeq != uint64(i+1) {
			t.Fatalf("slow reader: event %d is %v, want message %d", i, e, i+1)
		}
	}
	// Paused: the channel fills, delivery waits SlowConsumerWait, then drops.
	for q := uint64(2001); q <= 2999; q++ {
		r.emit(ctx, Message{Topic: "a", Stream: 1, StreamSeq: q})
	}
	close(pause)
	for len(r.events) > 0 { // the reader is back and drains what was kept
		time.Sleep(time.Millisecond)
	}
	r.emit(ctx, Message{Topic: "a", Stream: 1, StreamSeq: 3000})
	evs = <-got
	var gap *Gap
	next := uint64(2001)
	for _, e := range evs[2000:] {
		switch e := e.(type) {
		case Message:
			if e.StreamSeq != next {
				t.Fatalf("paused reader: message %d, want %d", e.StreamSeq, next)
			}
			next++
		case Gap:
			if gap != nil || e.From != next || e.Reason != ReasonSlowConsumer {
				t.Fatalf("paused reader: %v after message %d, want one slow-consumer gap from %d", e, next-1, next)
			}
			gap, next = &e, e.To+1
		}
	}
	if gap == nil || next != 3001 || r.slowDrops.Load() != gap.To-gap.From+1 {
		t.Errorf("paused reader: gap %v, next %d, %d dropped; want one gap, then 3000", gap, next, r.slowDrops.Load())
	}
}

// Rejected datagrams are logged at most once per WarnInterval per kind, with their count.
func TestReceiver_RejectWarningsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	r, err := NewReceiver(ReceiverConfig{Group: DefaultGroup, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	from := netip.MustParseAddrPort("198.18.0.66:7400")
	now := t0
	for i := 0; i < 25000; i++ { // 25 s of one forged datagram per millisecond
		r.rejected(now, from, ErrAuth)
		if i%1000 == 0 {
			r.rejected(now, from, ErrAhead)
		}
		r.rejected(now, from, ErrMalformed) // counted only
		now = now.Add(time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var auth, ahead []string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "failed authentication"):
			auth = append(auth, l)
		case strings.Contains(l, "ahead of the receive window"):
			ahead = append(ahead, l)
		default:
			t.Errorf("unexpected log line %q", l)
		}
	}
	if len(auth) != 3 || !strings.Contains(auth[0], "count=1 ") || !strings.Contains(auth[1], "count=10000 ") {
		t.Errorf("got %d authentication warnings %q, want 3 (at 0, 10 and 20 s) with counts 1 and 10000", len(auth), auth)
	}
	if len(ahead) != 3 {
		t.Errorf("got %d ahead warnings, want 3", len(ahead))
	}
}
