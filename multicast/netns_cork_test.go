package multicast

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestNetns_PublishMoreSharesDatagram: a publisher that holds its next message (PublishMore)
// gets both into one datagram, sent by its own goroutine: a paced STOMP publisher whose frames
// arrive two at a time (a late wake-up) sent the second through the writer goroutine before, a
// wake-up later and in a datagram of its own. Flush sends what a PublishMore left open; every
// message arrives, in order.
func TestNetns_PublishMoreSharesDatagram(t *testing.T) {
	tp := newTopo(t, "h")
	sh(t, "ip", "-n", tp.NS["h"], "link", "set", "lo", "multicast", "on")
	sh(t, "ip", "-n", tp.NS["h"], "route", "add", "239.255.0.0/16", "dev", "lo")
	group := netip.MustParseAddrPort("239.255.9.9:7499")
	r, err := NewReceiver(ReceiverConfig{Group: group.String(), Interface: "lo", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSender(SenderConfig{Group: group.String(), Interface: "lo", LoneInline: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	tp.in("h", func() {
		if err := r.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := s.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { s.Close(); r.Close() })
	dataDgs := func() uint64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.core.Counters().DataDatagrams
	}
	// The first message opens the stream (a catalog entry): send it alone first.
	if err := s.Publish("a", nil, []byte("m0")); err != nil {
		t.Fatal(err)
	}
	// The writer goroutine's timers (a heartbeat) can hold the sender's lock just when a
	// Publish tries it: that message goes through the writer instead. A round where that
	// happened says nothing about datagrams; up to 20 are run for one without.
	const pairs = 20
	n := 1
	for round := 1; ; round++ {
		before, st0 := dataDgs(), s.Stats()
		sent := 0
		for i := 0; i < pairs; i++ {
			time.Sleep(300 * time.Microsecond) // more than inlineGap: the first of a pair is lone
			if err := s.PublishMore("a", nil, []byte(fmt.Sprintf("m%d", n))); err != nil {
				t.Fatal(err)
			}
			n, sent = n+1, sent+1
			if i%2 == 0 {
				if err := s.Publish("a", nil, []byte(fmt.Sprintf("m%d", n))); err != nil {
					t.Fatal(err)
				}
				n, sent = n+1, sent+1
			} else { // the caller found nothing more to publish after all
				s.Flush()
			}
		}
		st := s.Stats()
		dgs, inline, corked := dataDgs()-before, st.Inline-st0.Inline, st.Corked-st0.Corked
		t.Logf("round %d: %d messages: %d DATA datagrams, %d packed by Publish itself, %d left open by PublishMore", round, sent, dgs, inline, corked)
		if inline != uint64(sent) && round < 20 {
			continue
		}
		if corked != pairs {
			t.Errorf("%d messages left open by PublishMore, want %d", corked, pairs)
		}
		if inline != uint64(sent) {
			t.Errorf("%d of %d messages packed by Publish itself, want all (the one after a PublishMore too)", inline, sent)
		}
		// A pair shares a datagram; a PublishMore followed by Flush goes alone.
		if dgs != pairs {
			t.Errorf("%d DATA datagrams for %d pairs and singles, want %d", dgs, pairs, pairs)
		}
		break
	}
	// A PublishMore whose caller then has nothing more: Flush sends it.
	if err := s.PublishMore("a", nil, []byte(fmt.Sprintf("m%d", n))); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	n++
	deadline := time.After(5 * time.Second)
	for want := 0; want < n; want++ {
		select {
		case e := <-r.Events():
			m, ok := e.(Message)
			if !ok {
				want--
				continue
			}
			if string(m.Body) != fmt.Sprintf("m%d", want) {
				t.Fatalf("message %q, want m%d", m.Body, want)
			}
		case <-deadline:
			t.Fatalf("%d of %d messages arrived within 5 s", want, n)
		}
	}
	if st := r.Stats(); st.Gaps != 0 {
		t.Errorf("%d gaps, want none", st.Gaps)
	}
}
