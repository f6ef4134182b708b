package multicast

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A sender crashes while sending a fragmented message: the receiver heard three of its four
// fragments (so it knows stream 1 sequence 2 exists) and then the sender restarts. The new
// session must be preceded by a session-restart Gap for a#2: the message is lost and the
// receiver says so (section 4.7). Before, flushSession reported only held records and HEARTBEAT
// tails: the half-received message vanished without a Gap.
func TestReceiverCore_SessionChangeReportsPartialFragments(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("key=%v", keyed), func(t *testing.T) {
			var auth *Auth
			if keyed {
				auth = NewAuth([]byte("k"), 1)
			}
			s1 := newSeededSender(t, 10, t0, SenderCoreConfig{Auth: auth})
			r := mustReceiverCore(t, ReceiverCoreConfig{Auth: auth})
			s1.Publish(t0, "a", msg("1"))
			s1.Publish(t0, "a", make([]byte, 5000)) // 4 fragments
			s1.Flush(t0)
			out := s1.Ready()
			var evs []Event
			// catalog, data(1), then 4 fragments: deliver all but the last fragment (crash).
			for _, d := range out[:len(out)-1] {
				if err := r.Handle(t0, sndAddr, d); err != nil {
					t.Fatal(err)
				}
			}
			e, _ := r.Ready()
			evs = append(evs, e...)
			now := t0.Add(5 * time.Second)
			s2 := newSeededSender(t, 20, now, SenderCoreConfig{Auth: auth})
			s2.Publish(now, "a", msg("new"))
			s2.Flush(now)
			for _, d := range s2.Ready() {
				r.Handle(now, sndAddr, d)
			}
			e, _ = r.Ready()
			evs = append(evs, e...)
			got := eventLine(evs)
			want := "session, msg a#1, gap a#2-2(session-restart), session, msg a#1"
			if got != want {
				t.Errorf("events:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// A record dropped for MaxBytes (counted overflow, "a hole of its stream reported as a Gap
// (never silent)", section 4.8) above everything held, with no HEARTBEAT tail yet, when the
// sender restarts: the session change must report it. Before, flushSession reported held holes
// and announced tails only, and the dropped record vanished.
func TestReceiverCore_SessionChangeReportsOverflowDrop(t *testing.T) {
	auth := NewAuth([]byte("k"), 1)
	g := dgb{session: uint64(t0.Unix())<<32 | 7, auth: auth}
	r := mustReceiverCore(t, ReceiverCoreConfig{Auth: auth, MaxBytes: 2000})
	r.Handle(t0, sndAddr, g.cat(1, 1, CatalogEntry{Stream: 1, First: 1, Topic: "a"}))
	// a#1 (datagram 2) is missing; a#2.. are held behind it until MaxBytes is full.
	big := strings.Repeat("x", 300)
	q := uint64(3)
	for ; r.Counters().Overflow == 0; q++ {
		r.Handle(t0, sndAddr, g.data(q, 1, rec(1, q-1, big)))
	}
	evs, _ := r.Ready()
	evs = append([]Event(nil), evs...)
	t.Logf("a#2..a#%d held, a#%d dropped for room", q-3, q-2)
	g2 := dgb{session: uint64(t0.Unix()+5)<<32 | 9, auth: auth} // the sender restarted
	r.Handle(t0.Add(5*time.Second), sndAddr, g2.cat(1, 1, CatalogEntry{Stream: 1, First: 1, Topic: "a"}))
	e, _ := r.Ready()
	evs = append(evs, e...)
	reported := map[uint64]bool{}
	for _, e := range evs {
		switch e := e.(type) {
		case Message:
			reported[e.StreamSeq] = true
		case Gap:
			for s := e.From; s <= e.To; s++ {
				reported[s] = true
			}
		}
	}
	if !reported[q-2] {
		t.Errorf("a#%d (dropped for MaxBytes, overflow %d) neither delivered nor reported: %s", q-2, r.Counters().Overflow, eventLine(evs))
	}
}
