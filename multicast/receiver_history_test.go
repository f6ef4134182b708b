package multicast

import (
	"fmt"
	"testing"
	"time"
)

// Section 4.10 bounds what a forged HISTORY (no key) can do: "make a late joiner NAK datagrams
// it does not need or report history as gaps". A forged answer names a start F (60) above the
// stream's live records (a#50..a#55 held, a#56..a#59 to come): the stream must not start above
// the lowest record received after the join point, and every live message is delivered or
// reported. Before, the receiver deleted the live records held below F without a Gap and dropped
// those arriving later as duplicates: real messages lost silently. (The receiver id is in every
// HISTORY answer to it, multicast; the request counter is small and can be swept: a forged
// answer is only checked for request in [first request, last NAK counter].)
func TestReceiverCore_ForgedHistoryStartNeverAboveLiveRecords(t *testing.T) {
	g := dgb{session: uint64(t0.Unix())<<32 | 7}
	r := mustReceiverCore(t, ReceiverCoreConfig{Profile: ProfileLowLatency, ID: 77, LateJoin: 10})
	var evs []Event
	take := func() {
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	r.Handle(at(0), sndAddr, g.data(100, 1, rec(1, 50, "50")))
	r.Handle(at(0), sndAddr, g.cat(101, 1, CatalogEntry{Stream: 1, First: 10, Topic: "a"}))
	r.Tick(at(0)) // history request, counter 1
	for q := uint64(102); q <= 106; q++ {
		r.Handle(at(time.Millisecond), sndAddr, g.data(q, 1, rec(1, q-51, fmt.Sprint(q-51)))) // a#51..a#55
	}
	take()
	forged := g.enc(&Packet{PacketHeader: PacketHeader{Type: TypeHistory, Seq: 106, Trailing: 1},
		Receiver: 77, Request: 1, Streams: []StreamSeq{{Stream: 1, Seq: 60}}})
	r.Handle(at(2*time.Millisecond), sndAddr, forged)
	take()
	for q := uint64(107); q <= 110; q++ {
		r.Handle(at(3*time.Millisecond), sndAddr, g.data(q, 1, rec(1, q-51, fmt.Sprint(q-51)))) // a#56..a#59
	}
	take()
	for d := 4 * time.Millisecond; d < 500*time.Millisecond; d += time.Millisecond {
		r.Tick(at(d))
		take()
	}
	delivered := map[uint64]bool{}
	for _, e := range evs {
		switch e := e.(type) {
		case Message:
			delivered[e.StreamSeq] = true
		case Gap:
			for q := e.From; q <= e.To && q < 100; q++ {
				delivered[q] = true
			}
		}
	}
	var silent []uint64
	for q := uint64(50); q <= 59; q++ {
		if !delivered[q] {
			silent = append(silent, q)
		}
	}
	if len(silent) > 0 {
		t.Errorf("real messages a#%v neither delivered nor reported; events: %s; duplicates %d",
			silent, eventLine(evs), r.Counters().Duplicates)
	}
}

// The same forged start F (60), heard before any live record of the stream: the stream starts at
// F. The live records below it that come after the start cannot be delivered in order; they
// must be reported (one gap from the first of them up to F), never dropped as duplicates.
func TestReceiverCore_ForgedHistoryStartReportsLaterLiveRecords(t *testing.T) {
	g := dgb{session: uint64(t0.Unix())<<32 | 7}
	r := mustReceiverCore(t, ReceiverCoreConfig{Profile: ProfileLowLatency, ID: 77, LateJoin: 10})
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	r.Handle(at(0), sndAddr, g.cat(100, 1, CatalogEntry{Stream: 1, First: 10, Topic: "a"}))
	r.Tick(at(0)) // history request, counter 1
	forged := g.enc(&Packet{PacketHeader: PacketHeader{Type: TypeHistory, Seq: 100, Trailing: 1},
		Receiver: 77, Request: 1, Streams: []StreamSeq{{Stream: 1, Seq: 60}}})
	r.Handle(at(time.Millisecond), sndAddr, forged)
	for q := uint64(101); q <= 111; q++ {
		r.Handle(at(2*time.Millisecond), sndAddr, g.data(q, 1, rec(1, q-51, fmt.Sprint(q-51)))) // a#50..a#60
	}
	evs, _ := r.Ready()
	want := "session, gap a#50-59(expired), msg a#60"
	if got := eventLine(evs); got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
}

// Section 4.10: a history hole is "retried and given up exactly as a missing datagram (4.4)";
// 4.4: an NCF delayed "moves its give-up to at least the NCF's time + budget (the sender
// promised it)". A history hole the sender has promised (delayed: queued behind other
// receivers' repairs) must wait for its repair. Before, the core applied NCFs to live holes
// only: the history hole was given up 200 ms after its first NAK anyway, and the repair that then
// came was dropped as a duplicate.
func TestReceiverCore_HistoryHoleHonoursNCFDelayed(t *testing.T) {
	g := dgb{session: uint64(t0.Unix())<<32 | 7}
	r := mustReceiverCore(t, ReceiverCoreConfig{Profile: ProfileLowLatency, ID: 77, LateJoin: 4})
	var evs []Event
	take := func() {
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	r.Handle(at(0), sndAddr, g.data(100, 1, rec(1, 50, "50")))
	r.Handle(at(0), sndAddr, g.cat(101, 1, CatalogEntry{Stream: 1, First: 10, Topic: "a"}))
	r.Tick(at(0)) // the history request, NAK counter 1
	take()
	ans := g.enc(&Packet{PacketHeader: PacketHeader{Type: TypeHistory, Seq: 101, Trailing: 1},
		Receiver: 77, Request: 1, Streams: []StreamSeq{{Stream: 1, Seq: 46}}, Ranges: []Range{{96, 99}}})
	r.Handle(at(time.Millisecond), sndAddr, ans)
	r.Tick(at(time.Millisecond)) // first NAK of 96-99
	for q := uint64(96); q <= 98; q++ {
		r.Handle(at(2*time.Millisecond), sndAddr, g.rdata(q, 1, rec(1, q-50, fmt.Sprint(q-50))))
	}
	take()
	for d := 3 * time.Millisecond; d <= 300*time.Millisecond; d += time.Millisecond {
		if d == 150*time.Millisecond { // the sender: 99 is queued, it will come
			r.Handle(at(d), sndAddr, g.ncf(101, 1, NCFDelayed, Range{99, 99}))
		}
		r.Tick(at(d))
		take()
	}
	r.Handle(at(310*time.Millisecond), sndAddr, g.rdata(99, 1, rec(1, 49, "49")))
	take()
	want := "session, msg a#46, msg a#47, msg a#48, msg a#49, msg a#50"
	if got := eventLine(evs); got != want {
		t.Errorf("events:\n got %s\nwant %s\n(budget-expired %d, duplicates %d)", got, want, r.Counters().BudgetExpired, r.Counters().Duplicates)
	}
}
