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

// A receiver following a channel (with a key: a new session is taken at once) sees the sender
// restart and loses the new session's first 81 datagrams (a burst well under a millisecond at
// the rates the protocol is tuned for); the sender still holds them (trailing edge 1). The
// receiver was listening when the session began: it must recover it from sequence 1 (section
// 4.3). Before, the first datagram heard was above youngSession (64), the receiver "joined late"
// at 82 and never NAKed 1..81: a#1..a#80, sent while it was listening, were neither delivered nor
// reported.
func TestReceiverCore_RestartAfterBurstLossRecoveredFromStart(t *testing.T) {
	auth := NewAuth([]byte("k"), 1)
	a := newSeededSender(t, 10, t0, SenderCoreConfig{Auth: auth})
	r := mustReceiverCore(t, ReceiverCoreConfig{Auth: auth, Profile: ProfileLowLatency})
	now := t0
	a.Publish(now, "a", msg("old"))
	a.Flush(now)
	evs := pumpPair(a, r, &now, 5*time.Millisecond, nil)

	now = now.Add(2 * time.Second) // the sender restarts
	b := newSeededSender(t, 20, now, SenderCoreConfig{Auth: auth})
	for i := 1; i <= 100; i++ {
		b.Publish(now, "a", msg(fmt.Sprint(i)))
		b.Flush(now) // one datagram each
	}
	lost := func(p *Packet) bool { return p.Type.Sequenced() && p.Seq <= 81 && p.Flags&FlagRepair == 0 }
	evs = append(evs, pumpPair(b, r, &now, time.Second, lost)...)
	delivered, gapped := map[uint64]bool{}, map[uint64]bool{}
	for _, e := range evs {
		switch e := e.(type) {
		case Message:
			if e.Session == b.Session() {
				delivered[e.StreamSeq] = true
			}
		case Gap:
			for q := e.From; q <= e.To && e.Session == b.Session(); q++ {
				gapped[q] = true
			}
		}
	}
	var silent []uint64
	for q := uint64(1); q <= 100; q++ {
		if !delivered[q] && !gapped[q] {
			silent = append(silent, q)
		}
	}
	if len(silent) > 0 {
		t.Errorf("new session: %d of 100 messages neither delivered nor reported (a#%d..a#%d); events: %s",
			len(silent), silent[0], silent[len(silent)-1], eventLine(evs[:min(len(evs), 6)]))
	}
}

// The same restart, heard first beyond the receive window (MaxHole + 100, trailing edge 1: the
// receiver was cut off while the sender restarted and sent on): recovered from 1, what the
// window cannot hold is given up and reported with the rest, a#1 up to the first record heard.
func TestReceiverCore_RestartHeardBeyondWindowReportsStart(t *testing.T) {
	auth := NewAuth([]byte("k"), 1)
	ga := dgb{session: uint64(t0.Unix())<<32 | 7, auth: auth}
	gb := dgb{session: uint64(t0.Unix()+5)<<32 | 9, auth: auth}
	r := mustReceiverCore(t, ReceiverCoreConfig{Auth: auth, Profile: ProfileLowLatency})
	r.Handle(t0, sndAddr, ga.cat(1, 1, CatalogEntry{Stream: 1, First: 1, Topic: "a"}))
	r.Handle(t0, sndAddr, ga.data(2, 1, rec(1, 1, "old")))
	now := t0.Add(5 * time.Second)
	x := uint64(MaxHole + 100)
	if err := r.Handle(now, sndAddr, gb.cat(x, 1, CatalogEntry{Stream: 1, First: 1, Topic: "a"})); err != nil {
		t.Fatal(err)
	}
	if err := r.Handle(now, sndAddr, gb.data(x+1, 1, rec(1, x-1, "x"))); err != nil {
		t.Fatal(err)
	}
	evs, _ := r.Ready()
	evs = append([]Event(nil), evs...)
	for i := 0; i < 1000; i++ {
		now = now.Add(time.Millisecond)
		r.Tick(now)
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	want := fmt.Sprintf("session, msg a#1, session, gap a#1-%d(expired), msg a#%d", x-2, x-1)
	if got := eventLine(evs); got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
	if c := r.Counters(); c.WindowExpired != 101 {
		t.Errorf("window-expired %d, want 101 (datagrams 1-101 outside the window)", c.WindowExpired)
	}
}
