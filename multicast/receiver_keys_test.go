package multicast

import (
	"testing"
	"time"
)

// Key rotation (section 6): a receiver configured with the old and the new key that starts
// after the sender moved to the new key. A host without any key replays one sealed datagram it
// recorded before the rotation (old key, old session): it must be dropped as a replay and
// change nothing, and the live session's datagrams under the new key keep being delivered.
// Before, the keyring made the old key current when it opened the datagram, before the session
// check dropped it: ten seconds later the new key was retired and every datagram of the live
// session refused (counted as auth failures, no Gap) until the receiver restarted.
func TestReceiverCore_ReplayedOldKeyKeepsNewKey(t *testing.T) {
	k1, k2 := Key{ID: 1, Secret: []byte("old key")}, Key{ID: 2, Secret: []byte("new key")}
	old := newSeededSender(t, 10, t0, SenderCoreConfig{Seal: NewSealer(k1), Auth: NewAuth(k1.Secret, 1)})
	old.Publish(t0, "a", msg("old"))
	old.Flush(t0)
	captured := append([]byte(nil), old.Ready()[0]...) // recorded by the hostile host

	start := t0.Add(time.Hour) // the sender restarted with the new key
	s := newSeededSender(t, 20, start, SenderCoreConfig{Seal: NewSealer(k2), Auth: NewAuth(k2.Secret, 2)})
	r := mustReceiverCore(t, ReceiverCoreConfig{Keys: []Key{k1, k2}, Seal: true})
	var evs []Event
	pub := func(now time.Time, body string) {
		s.Publish(now, "a", msg(body))
		s.Flush(now)
		for _, d := range s.Ready() {
			r.Handle(now, sndAddr, d)
		}
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	pub(start, "1")
	r.Handle(start.Add(time.Second), sndAddr, captured) // the replay
	pub(start.Add(2*time.Second), "2")
	pub(start.Add(15*time.Second), "3")
	pub(start.Add(16*time.Second), "4")
	if got, want := eventLine(evs), "session, msg a#1, msg a#2, msg a#3, msg a#4"; got != want {
		t.Errorf("events:\n got %s\nwant %s\ncounters %+v", got, want, r.Counters())
	}
}

// With a key, a session is left at once for one whose start second is later. A sender
// restarted twice within one second (a crash loop) has two sessions with the same start second.
// A receiver that joined the live one (B) and never heard the dead one (A) gets one replayed
// datagram of A: it must stay with B (section 4.2, step 4: the same start second is taken only
// once the current session has been silent for SessionTimeout). Before, it left B for A at once,
// retired B and dropped every datagram of the live session from then on.
func TestReceiverCore_SameSecondReplayKeepsLiveSession(t *testing.T) {
	auth := NewAuth([]byte("k"), 1)
	a := newSeededSender(t, 10, t0, SenderCoreConfig{Auth: auth})
	a.Publish(t0, "a", msg("from A"))
	a.Flush(t0)
	captured := append([]byte(nil), a.Ready()[1]...) // A's DATA, recorded by the hostile host

	now := t0.Add(500 * time.Millisecond) // restarted in the same second
	b := newSeededSender(t, 20, now, SenderCoreConfig{Auth: auth})
	if a.Session()>>32 != b.Session()>>32 || a.Session() == b.Session() {
		t.Fatalf("sessions %x %x", a.Session(), b.Session())
	}
	r := mustReceiverCore(t, ReceiverCoreConfig{Auth: auth})
	var evs []Event
	pub := func(now time.Time, body string) {
		b.Publish(now, "a", msg(body))
		b.Flush(now)
		for _, d := range b.Ready() {
			r.Handle(now, sndAddr, d)
		}
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	pub(now, "1")
	r.Handle(now.Add(time.Second), sndAddr, captured)
	e, _ := r.Ready()
	evs = append(evs, e...)
	pub(now.Add(2*time.Second), "2")
	pub(now.Add(3*time.Second), "3")
	if r.Session() != b.Session() {
		t.Errorf("receiver follows session %x, the live one is %x; events: %s; counters: replays %d",
			r.Session(), b.Session(), eventLine(evs), r.Counters().Replays)
	}
}

// The crash loop itself, sealed: the receiver follows A, the sender restarts within the same
// second as B and A falls silent. B's datagrams are kept while A is live (opened when they came)
// and handled when B takes over, SessionTimeout after A's last datagram: every message of B is
// delivered, none needs a repair.
func TestReceiverCore_SameSecondRestartTakenAfterSilence(t *testing.T) {
	k := Key{ID: 1, Secret: []byte("the channel key")}
	a := newSeededSender(t, 10, t0, SenderCoreConfig{Seal: NewSealer(k), Auth: NewAuth(k.Secret, 1)})
	r := mustReceiverCore(t, ReceiverCoreConfig{Keys: []Key{k}, Seal: true})
	var evs []Event
	send := func(s *SenderCore, now time.Time, body string) {
		s.Publish(now, "a", msg(body))
		s.Flush(now)
		for _, d := range s.Ready() {
			r.Handle(now, sndAddr, d)
		}
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	send(a, t0, "A1")
	now := t0.Add(300 * time.Millisecond)
	b := newSeededSender(t, 20, now, SenderCoreConfig{Seal: NewSealer(k), Auth: NewAuth(k.Secret, 1)})
	if a.Session()>>32 != b.Session()>>32 {
		t.Fatalf("sessions %x %x: not the same second", a.Session(), b.Session())
	}
	send(b, now, "B1")
	send(b, now.Add(time.Second), "B2")
	if r.Session() != a.Session() {
		t.Fatalf("left the live session A at once for B (same second)")
	}
	send(b, t0.Add(DefaultSessionTimeout+time.Millisecond), "B3")
	if got, want := eventLine(evs), "session, msg a#1, session, msg a#1, msg a#2, msg a#3"; got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
	if c := r.Counters(); c.AuthFailures != 0 || c.NAKs != 0 {
		t.Errorf("auth failures %d, NAKs %d: want 0 (the kept datagrams are handled as they came)", c.AuthFailures, c.NAKs)
	}
}
