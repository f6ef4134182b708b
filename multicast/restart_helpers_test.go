package multicast

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// Helpers of the tests that run a sender core and a receiver core together, a sender restart
// being a new sender core with its own seed and start.

// newSeededSender returns a sender core with its own seed and start (a restart is a new session).
func newSeededSender(t *testing.T, seed uint64, start time.Time, cfg SenderCoreConfig) *SenderCore {
	t.Helper()
	cfg.Rand = rand.New(rand.NewPCG(seed, seed+1))
	cfg.Start = start
	s, err := NewSenderCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// eventLine is evs in short: "session, msg a#1, gap a#2-2(session-restart)".
func eventLine(evs []Event) string {
	var b []string
	for _, e := range evs {
		switch e := e.(type) {
		case Message:
			b = append(b, fmt.Sprintf("msg %s#%d", e.Topic, e.StreamSeq))
		case Gap:
			b = append(b, fmt.Sprintf("gap %s#%d-%d(%v)", e.Topic, e.From, e.To, e.Reason))
		case SessionChange:
			b = append(b, "session")
		}
	}
	return strings.Join(b, ", ")
}

// nakFrom is the address the receiver's NAKs come from in pumpPair.
var nakFrom = netip.MustParseAddrPort("198.18.0.2:5000")

// pumpPair runs sender s and receiver r for d in 1 ms steps: NAKs go to s, everything s sends
// goes to r unless drop says it is lost. It returns r's events.
func pumpPair(s *SenderCore, r *ReceiverCore, now *time.Time, d time.Duration, drop func(p *Packet) bool) []Event {
	var evs []Event
	end := now.Add(d)
	for ; !now.After(end); *now = now.Add(time.Millisecond) {
		s.Tick(*now)
		r.Tick(*now)
		for i := 0; i < 10; i++ {
			_, out := r.Ready()
			for _, o := range out {
				s.Step(*now, nakFrom, o.B)
			}
			e, _ := r.Ready()
			evs = append(evs, e...)
			ds := s.Ready()
			if len(ds) == 0 && len(out) == 0 {
				break
			}
			for _, b := range ds {
				var p Packet
				if Decode(b, &p) == nil && drop != nil && drop(&p) {
					continue
				}
				r.Handle(*now, sndAddr, b)
			}
			e, _ = r.Ready()
			evs = append(evs, e...)
		}
	}
	return evs
}
