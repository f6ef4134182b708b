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
