package multicast

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// historyAsk sends a history request from src and returns the HISTORY answer (nil: none).
func historyAsk(t *testing.T, s *SenderCore, now time.Time, src string, counter uint64, q Packet) *Packet {
	t.Helper()
	q.Type, q.Session, q.Seq = TypeHistoryRequest, s.Session(), counter
	if q.Receiver == 0 {
		q.Receiver = 77
	}
	b, err := AppendPacket(nil, &q)
	if err != nil {
		t.Fatal(err)
	}
	s.Step(now, netip.MustParseAddrPort(src), b)
	for _, p := range decodeAll(t, s.Ready()) {
		if p.Type == TypeHistory {
			return &p
		}
	}
	return nil
}

// TestSenderCore_History: the answer to a history request names, per stream matching its
// patterns, the first of its last N messages below Before, and exactly the datagrams holding
// them; by age, only those sent within it; fragments of the oldest message are all named; one
// answer per source per historyInterval; at most MaxHistoryStreams streams, ranges merged to fit.
func TestSenderCore_History(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{})
	dgOf := map[string]map[uint64]uint64{} // topic -> stream seq -> datagram
	firstDg := map[uint64]uint64{}         // px.us stream seq -> its first fragment's datagram
	now := t0
	topics := []string{"px.eu", "px.us", "ops.disk"}
	for i := 0; i < 30; i++ {
		now = now.Add(time.Second)
		for _, tp := range topics[:1+i%3] {
			body := fmt.Sprint(i)
			if tp == "px.us" && i == 25 {
				body = string(make([]byte, 5000)) // fragments
			}
			p, _ := AppendMessage(nil, nil, []byte(body))
			if err := s.Publish(now, tp, p); err != nil {
				t.Fatal(err)
			}
		}
		s.Flush(now)
		for _, p := range decodeAll(t, s.Ready()) {
			if p.Type != TypeData {
				continue
			}
			for _, r := range p.Records {
				tp := topics[r.Stream-1]
				if dgOf[tp] == nil {
					dgOf[tp] = map[uint64]uint64{}
				}
				dgOf[tp][r.Seq] = max(dgOf[tp][r.Seq], p.Seq) // the last fragment's datagram
				if r.Frag && firstDg[r.Seq] == 0 {
					firstDg[r.Seq] = p.Seq
				}
			}
		}
	}
	before := s.Counters().Leading + 1
	a := historyAsk(t, s, now, "198.18.0.5:9", 1, Packet{Before: before, Count: 3, Patterns: []string{"px.*"}})
	if a == nil || a.Receiver != 77 || a.Request != 1 {
		t.Fatalf("answer %+v", a)
	}
	starts := map[uint32]uint64{}
	for _, e := range a.Streams {
		starts[e.Stream] = e.Seq
	}
	// px.eu (stream 1) has 30 messages, px.us (2) 20: the last 3 start at 28 and 18; ops.disk
	// does not match.
	if len(starts) != 2 || starts[1] != 28 || starts[2] != 18 {
		t.Fatalf("streams %v, want px.eu from 28 and px.us from 18", a.Streams)
	}
	want := map[uint64]bool{}
	for tp, from := range map[string]uint64{"px.eu": 28, "px.us": 18} {
		for q := from; q <= from+2; q++ {
			want[dgOf[tp][q]] = true
		}
	}
	// px.us has messages at i%3 >= 1 (i = 1, 2, 4, 5, ...): its 18th to 20th are i = 26, 28, 29.
	got := map[uint64]bool{}
	for _, r := range a.Ranges {
		for q := r.From; q <= r.To; q++ {
			got[q] = true
		}
	}
	for q := range want {
		if !got[q] {
			t.Errorf("datagram %d holds one of the last 3 but is not named (ranges %v)", q, a.Ranges)
		}
	}
	if len(got) != len(want) {
		t.Errorf("ranges %v name %d datagrams, want exactly %d", a.Ranges, len(got), len(want))
	}
	// Again from the same source at once: refused (one answer per historyInterval).
	if a := historyAsk(t, s, now.Add(time.Millisecond), "198.18.0.5:9", 2, Packet{Before: before, Count: 3}); a != nil {
		t.Errorf("second request within %v answered", historyInterval)
	}
	if c := s.Counters(); c.HistoryRefused != 1 || c.HistoryAnswers != 1 {
		t.Errorf("refused %d answers %d, want 1 and 1", c.HistoryRefused, c.HistoryAnswers)
	}
	// By age: within 2.5 s, every topic: the messages of the last 2 steps (i = 28, 29).
	a = historyAsk(t, s, now.Add(200*time.Millisecond), "198.18.0.5:9", 3, Packet{Before: before, AgeMs: 1500})
	starts = map[uint32]uint64{}
	for _, e := range a.Streams {
		starts[e.Stream] = e.Seq
	}
	if len(starts) != 3 || starts[1] != 29 || starts[2] != 19 || starts[3] != 10 {
		t.Errorf("by age: streams %v, want px.eu from 29, px.us from 19, ops.disk from 10 (sent at i = 28 and 29)", a.Streams)
	}
	// The fragmented message: px.us's last 4 include it (i = 25 is its 17th).
	a = historyAsk(t, s, now.Add(400*time.Millisecond), "198.18.0.5:9", 4, Packet{Before: before, Count: 4, Patterns: []string{"px.us"}})
	if len(a.Streams) != 1 || a.Streams[0].Seq != 17 {
		t.Fatalf("px.us last 4: %v, want from 17", a.Streams)
	}
	got = map[uint64]bool{}
	for _, r := range a.Ranges {
		for q := r.From; q <= r.To; q++ {
			got[q] = true
		}
	}
	if firstDg[17] == 0 || dgOf["px.us"][17]-firstDg[17] < 2 {
		t.Fatalf("px.us 17 in datagrams %d-%d, want at least 3 fragments", firstDg[17], dgOf["px.us"][17])
	}
	for q := firstDg[17]; q <= dgOf["px.us"][17]; q++ { // every fragment of 17
		if !got[q] {
			t.Errorf("fragment datagram %d of px.us 17 not named (ranges %v)", q, a.Ranges)
		}
	}
}

// TestMergeRanges: merged across the smallest gaps, never dropping a sequence.
func TestMergeRanges(t *testing.T) {
	rs := []Range{{1, 1}, {3, 3}, {10, 10}, {11 + 5, 16}, {40, 41}}
	got := mergeRanges(rs, 3)
	want := []Range{{1, 3}, {10, 16}, {40, 41}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := mergeRanges(rs, 1); fmt.Sprint(got) != fmt.Sprint([]Range{{1, 41}}) {
		t.Errorf("got %v, want one range 1-41", got)
	}
}
