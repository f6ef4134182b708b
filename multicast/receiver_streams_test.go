package multicast

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Without a key, a host forges 14 HEARTBEATs of the live session from the sender's address,
// each announcing 5,000 made-up stream ids (no sequence consumed, nothing real displaced): more
// than MaxStreams. A topic the sender starts afterwards must be delivered (or reported). Before,
// HEARTBEAT entries created streams: the receiver's stream table filled and stayed full for the
// session, and every later topic was dropped, counted [overflow], with no Gap ever. Now a
// HEARTBEAT after the join point creates no stream (and a full table evicts).
func TestReceiverCore_ForgedHeartbeatStreamsNeverSilenceNewTopics(t *testing.T) {
	s := newSeededSender(t, 10, t0, SenderCoreConfig{})
	r := mustReceiverCore(t, ReceiverCoreConfig{})
	var evs []Event
	pub := func(now time.Time, topic, body string) {
		s.Publish(now, topic, msg(body))
		s.Flush(now)
		for _, d := range s.Ready() {
			r.Handle(now, sndAddr, d)
		}
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	pub(t0, "a", "1")
	now := t0.Add(time.Millisecond)
	leading := s.Counters().Leading
	id := uint32(1000)
	for n := 0; n < 14; n++ { // 70,000 made-up ids: more than MaxStreams
		p := Packet{PacketHeader: PacketHeader{Type: TypeHeartbeat, Session: s.Session(), Seq: leading, Trailing: 1}, Leading: leading}
		for i := 0; i < 5000; i++ {
			p.Streams = append(p.Streams, StreamSeq{Stream: id, Seq: 1})
			id++
		}
		b, err := AppendPacket(nil, &p)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Handle(now, sndAddr, b); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d forged stream ids announced, %d streams tracked", id-1000, r.State().Streams)
	for i := 1; i <= 3; i++ {
		pub(now.Add(time.Duration(i)*time.Millisecond), "b", fmt.Sprint(i))
	}
	for i := 0; i < 400; i++ { // let timers run: give-ups, catalog requests
		now = now.Add(5 * time.Millisecond)
		r.Tick(now)
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	got := eventLine(evs)
	if !strings.Contains(got, "b#") {
		t.Errorf("topic b: no message and no gap; events: %s; overflow %d", got, r.Counters().Overflow)
	}
}

// No hostile host: a sender whose topics churn (each topic's next message after StreamIdle, or
// past its MaxStreams, is a new stream id) uses more than MaxStreams stream ids over one long
// session while holding only a few. Every message must be delivered or reported. Before, the
// receiver never forgot a stream within a session: once 65,536 ids had been seen, every later
// topic's messages were dropped [overflow] with no Gap. Now a full table evicts the stream idle
// the longest that holds nothing.
func TestReceiverCore_StreamChurnPastMaxStreamsLosesNothing(t *testing.T) {
	s := newSeededSender(t, 10, t0, SenderCoreConfig{MaxStreams: 1000, Window: 1 << 20})
	r := mustReceiverCore(t, ReceiverCoreConfig{})
	now := t0
	delivered, gaps := 0, 0
	const n = MaxStreams + 100
	for i := 0; i < n; i++ {
		now = now.Add(10 * time.Microsecond)
		s.Publish(now, fmt.Sprintf("order.%d", i), msg("x"))
		s.Flush(now)
		for _, d := range s.Ready() {
			r.Handle(now, sndAddr, d)
		}
		e, _ := r.Ready()
		for _, ev := range e {
			switch ev.(type) {
			case Message:
				delivered++
			case Gap:
				gaps++
			}
		}
	}
	c := s.Counters()
	t.Logf("sender: %d streams listed now, %d evicted; receiver tracks %d", c.Streams, c.StreamsEvicted, r.State().Streams)
	if delivered+gaps != n {
		t.Errorf("%d messages published on %d topics: %d delivered, %d gaps; %d lost silently (overflow %d)",
			n, n, delivered, gaps, n-delivered-gaps, r.Counters().Overflow)
	}
}

// A stream evicted from a full table (here MaxBytes: four streams fit) that comes back goes on
// where it was: its next message is delivered, with no gap covering what it delivered before
// (its CATALOG entry's first datagram is after the join, which would otherwise start it at 1).
func TestReceiverCore_EvictedStreamResumes(t *testing.T) {
	g := dgb{session: uint64(t0.Unix())<<32 | 7}
	r := mustReceiverCore(t, ReceiverCoreConfig{MaxBytes: 800})
	now := t0
	var dgs [][]byte
	for i := uint32(1); i <= 5; i++ {
		q := uint64(2*i - 1)
		dgs = append(dgs, g.cat(q, 1, CatalogEntry{i, q, fmt.Sprintf("t%d", i)}), g.data(q+1, 1, rec(i, 1, "1")))
	}
	dgs = append(dgs, g.data(11, 1, rec(1, 2, "2")), g.cat(12, 1, CatalogEntry{1, 1, "t1"}))
	got := script(r, &now, time.Millisecond, dgs...)
	want := []string{"session 0 7", "msg t1 1 1", "msg t2 1 1", "msg t3 1 1", "msg t4 1 1", "msg t5 1 1", "msg t1 2 2"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if c := r.Counters(); c.StreamsEvicted < 2 || c.Overflow != 0 {
		t.Errorf("evicted %d (want 2 or more), overflow %d (want 0)", c.StreamsEvicted, c.Overflow)
	}
}

// A table full of streams that all hold records (70,000 stream ids no CATALOG names, one record
// each, waiting for a catalog that never comes: a forger without a key, or a lost catalog) still
// takes a new topic: the stream idle the longest is evicted, its records remembered as a ghost.
func TestReceiverCore_FullTableOfHeldRecordsTakesNewTopic(t *testing.T) {
	g := dgb{session: uint64(t0.Unix())<<32 | 7}
	r := mustReceiverCore(t, ReceiverCoreConfig{})
	id, q := uint32(1000), uint64(1)
	for ; id < 1000+70000; q++ {
		var rs []Record
		for k := 0; k < 50; k++ {
			rs = append(rs, rec(id, 1, "x"))
			id++
		}
		if err := r.Handle(t0, sndAddr, g.data(q, 1, rs...)); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.State(); st.Streams != MaxStreams {
		t.Fatalf("%d streams tracked, want the table full (%d)", st.Streams, MaxStreams)
	}
	r.Ready()
	r.Handle(t0, sndAddr, g.cat(q, 1, CatalogEntry{1, q, "b"}))
	r.Handle(t0, sndAddr, g.data(q+1, 1, rec(1, 1, "b1")))
	evs, _ := r.Ready()
	if got := eventLine(evs); got != "msg b#1" {
		t.Errorf("events %q, want msg b#1 (evicted %d, overflow %d)", got, r.Counters().StreamsEvicted, r.Counters().Overflow)
	}
}

// Streams no CATALOG named lose nothing silently (revision 7): 140,000 stream ids, one record
// each, waiting for a catalog that never comes (a lost CATALOG, or a forger without a key),
// more than the stream table and the ghost list hold together; then the sender restarts. Every
// one of those records is reported exactly once, as a Gap with an empty topic: when its ghost is
// forgotten (reason expired), or at the session change (session-restart) from the table or from
// the ghosts. Before, both dropped them with no Gap.
func TestReceiverCore_UnnamedStreamsReportedAtSessionChange(t *testing.T) {
	g, g2 := dgb{session: uint64(t0.Unix())<<32 | 7}, dgb{session: uint64(t0.Unix()+1)<<32 | 8}
	r := mustReceiverCore(t, ReceiverCoreConfig{})
	const n = 140000
	id, q := uint32(1000), uint64(1)
	var evs []Event
	for ; id < 1000+n; q++ {
		var rs []Record
		for k := 0; k < 50; k++ {
			rs = append(rs, rec(id, 1, "x"))
			id++
		}
		if err := r.Handle(t0, sndAddr, g.data(q, 1, rs...)); err != nil {
			t.Fatal(err)
		}
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	later := t0.Add(3500 * time.Millisecond)
	r.Handle(later, sndAddr, g2.cat(1, 1, CatalogEntry{1, 1, "b"}))
	r.Handle(later, sndAddr, g2.data(2, 1, rec(1, 1, "b1")))
	e, _ := r.Ready()
	evs = append(evs, e...)
	reported := map[uint32]int{}
	reasons := map[Reason]int{}
	var tail []string
	for _, e := range evs {
		switch e := e.(type) {
		case Gap:
			if e.Topic != "" || e.From != 1 || e.To != 1 {
				t.Fatalf("gap %+v, want stream sequence 1-1 of a stream with no topic", e)
			}
			reported[e.Stream]++
			reasons[e.Reason]++
		default:
			tail = append(tail, eventLine([]Event{e}))
		}
	}
	for s := uint32(1000); s < 1000+n; s++ {
		if reported[s] != 1 {
			t.Fatalf("stream %d reported %d times, want once (%d streams reported, reasons %v, evicted %d)", s, reported[s], len(reported), reasons, r.Counters().StreamsEvicted)
		}
	}
	if len(reported) != n || reasons[ReasonExpired] == 0 || reasons[ReasonSessionRestart] == 0 {
		t.Errorf("%d streams reported, reasons %v: want %d, both forgotten ghosts (expired) and the session change (session-restart)", len(reported), reasons, n)
	}
	if got := strings.Join(tail, " "); !strings.HasSuffix(got, "msg b#1") {
		t.Errorf("other events %q, want the new session's b#1 last", got)
	}
	t.Logf("%d streams: %v", n, reasons)
}
