package multicast

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSim_LateJoinHistory: receivers with LateJoin N join a busy session late behind loss.
// Each must deliver, per topic, exactly the last N messages sent before its join point, in
// order, then every live message, with no gap (all repairable) and no duplicate; the history
// datagrams are NAKed and repaired like any loss (section 4.10).
func TestSim_LateJoinHistory(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int
		loss  float64
		mode  Mode
		prof  Profile
		seeds int
	}{
		{"last5/loss10/ordered", 5, 0.10, Ordered, ProfileLowLatency, 8},
		{"last40/loss10/skip", 40, 0.10, Skip, ProfileLowLatency, 4},
		{"last3/loss5/dashboard", 3, 0.05, Ordered, ProfileDashboard, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(40); seed < 40+uint64(c.seeds); seed++ {
				s := newSim(t, seed, 3, SenderCoreConfig{Profile: c.prof}, ReceiverCoreConfig{Profile: c.prof})
				records := s.recordLog()
				for i := range s.loss {
					s.loss[i].off = true
				}
				count := map[string]uint64{}
				pub := s.steady(count, 6000)
				s.run(s.now.Add(80*time.Millisecond), 100*time.Microsecond, pub)
				for i := range s.rcv {
					s.rcv[i], _ = NewReceiverCore(ReceiverCoreConfig{Profile: c.prof, Mode: c.mode, LateJoin: c.n,
						Rand: rand.New(rand.NewPCG(seed, uint64(300+i)))})
					s.loss[i] = lossModel{p: c.loss}
				}
				s.run(s.now.Add(400*time.Millisecond), 100*time.Microsecond, pub)
				s.run(s.now.Add(5*time.Second), 0, nil)
				for i, r := range s.rcv {
					if r.Counters().HistoryAnswers == 0 {
						t.Fatalf("seed %d receiver %d: no history answer (requests %d)", seed, i, r.Counters().HistoryRequests)
					}
					last := records.lastBefore(r.join)
					got := s.deliveredPerTopic(t, i, c.mode)
					for _, tp := range simTopics {
						seqs := got[tp]
						if len(seqs) == 0 {
							t.Fatalf("seed %d receiver %d: nothing on %s", seed, i, tp)
						}
						want := max(last[tp]+1, uint64(c.n)+1) - uint64(c.n)
						if seqs[0] != want {
							t.Errorf("seed %d receiver %d (joined at %d): %s starts at %d, want %d (the last %d before %d)",
								seed, i, r.join, tp, seqs[0], want, c.n, last[tp])
						}
						if seqs[len(seqs)-1] != count[tp] || uint64(len(seqs)) != count[tp]-seqs[0]+1 {
							t.Errorf("seed %d receiver %d: %s has %d messages from %d to %d, want every one to %d",
								seed, i, tp, len(seqs), seqs[0], seqs[len(seqs)-1], count[tp])
						}
					}
				}
			}
		})
	}
}

// TestSim_LateJoinHistoryLost: the history's datagrams are lost for good (the receiver's NAKs
// never reach the sender after the answer): every missing history message is reported as an
// exact Gap, before the live messages, and nothing is delivered twice.
func TestSim_LateJoinHistoryLost(t *testing.T) {
	for seed := uint64(60); seed < 64; seed++ {
		s := newSim(t, seed, 1, SenderCoreConfig{Profile: ProfileLowLatency}, ReceiverCoreConfig{Profile: ProfileLowLatency})
		records := s.recordLog()
		s.loss[0].off = true
		count := map[string]uint64{}
		pub := s.steady(count, 3000)
		s.run(s.now.Add(60*time.Millisecond), 100*time.Microsecond, pub)
		s.rcv[0], _ = NewReceiverCore(ReceiverCoreConfig{Profile: ProfileLowLatency, LateJoin: 10,
			Rand: rand.New(rand.NewPCG(seed, 9))})
		s.loss[0] = lossModel{}
		s.dropNAK = func(b []byte) bool {
			if s.rcv[0].Counters().HistoryAnswers > 0 && Type(b[3]) == TypeNAK {
				var p Packet
				if Decode(b, &p) == nil && p.Ranges[0].From < s.rcv[0].join {
					return true // the history's NAKs are lost: its datagrams never come
				}
			}
			return false
		}
		s.run(s.now.Add(300*time.Millisecond), 100*time.Microsecond, pub)
		s.run(s.now.Add(3*time.Second), 0, nil)
		r := s.rcv[0]
		last := records.lastBefore(r.join)
		next := map[string]uint64{}
		for _, e := range s.events[0] {
			switch e := e.(type) {
			case Message:
				if next[e.Topic] == 0 {
					t.Fatalf("seed %d: %s starts with message %d, want the history's gap first", seed, e.Topic, e.StreamSeq)
				}
				if e.StreamSeq != next[e.Topic] {
					t.Fatalf("seed %d: %s message %d after %d", seed, e.Topic, e.StreamSeq, next[e.Topic]-1)
				}
				next[e.Topic]++
			case Gap:
				want := max(last[e.Topic]+1, 11) - 10
				if next[e.Topic] == 0 && (e.From != want || e.To != last[e.Topic]) {
					t.Errorf("seed %d: %v, want %d-%d (the last 10 before the join, lost)", seed, e, want, last[e.Topic])
				}
				if next[e.Topic] != 0 && e.From != next[e.Topic] {
					t.Fatalf("seed %d: %v after %d", seed, e, next[e.Topic]-1)
				}
				next[e.Topic] = e.To + 1
			}
		}
		for _, tp := range simTopics {
			if next[tp] != count[tp]+1 {
				t.Errorf("seed %d: %s ends at %d, want %d", seed, tp, next[tp]-1, count[tp])
			}
		}
	}
}

// TestSim_LateJoinOlderSender: a sender that ignores history requests (an older revision):
// the receiver joins without history after historyWait, as without LateJoin: from the first
// record after its join point, with no gap.
func TestSim_LateJoinOlderSender(t *testing.T) {
	s := newSim(t, 70, 1, SenderCoreConfig{Profile: ProfileLowLatency}, ReceiverCoreConfig{Profile: ProfileLowLatency})
	records := s.recordLog()
	s.dropNAK = func(b []byte) bool { return Type(b[3]) == TypeHistoryRequest }
	s.loss[0].off = true
	count := map[string]uint64{}
	pub := s.steady(count, 8000)
	s.run(s.now.Add(60*time.Millisecond), 100*time.Microsecond, pub)
	s.rcv[0], _ = NewReceiverCore(ReceiverCoreConfig{Profile: ProfileLowLatency, LateJoin: 10,
		Rand: rand.New(rand.NewPCG(70, 9))})
	s.loss[0] = lossModel{}
	s.run(s.now.Add(1500*time.Millisecond), 100*time.Microsecond, pub)
	s.run(s.now.Add(2*time.Second), 0, nil)
	r := s.rcv[0]
	if c := r.Counters(); c.HistoryUnanswered != 1 || c.HistoryRequests < 5 {
		t.Fatalf("history requests %d, unanswered %d; want about 10 requests and 1 unanswered", c.HistoryRequests, c.HistoryUnanswered)
	}
	first := records.firstFrom(r.join)
	got := s.deliveredPerTopic(t, 0, Ordered)
	for _, tp := range simTopics {
		if len(got[tp]) == 0 || got[tp][0] != first[tp] || got[tp][len(got[tp])-1] != count[tp] {
			t.Errorf("%s: got %d messages starting at %d, want %d to %d", tp, len(got[tp]), got[tp][0], first[tp], count[tp])
		}
	}
}

// recordLog notes every original DATA datagram's records and the catalog, as sent.
type recordLog struct {
	records map[uint64][]Record
	topic   map[uint32]string
}

func (s *sim) recordLog() *recordLog {
	l := &recordLog{records: map[uint64][]Record{}, topic: map[uint32]string{}}
	s.onSend = func(b []byte) {
		var p Packet
		if Decode(b, &p) != nil {
			return
		}
		switch p.Type {
		case TypeData:
			l.records[p.Seq] = slices.Clone(p.Records)
		case TypeCatalog:
			for _, e := range p.Catalog {
				l.topic[e.Stream] = e.Topic
			}
		}
	}
	return l
}

// lastBefore is each topic's last stream sequence in the datagrams below dg.
func (l *recordLog) lastBefore(dg uint64) map[string]uint64 {
	m := map[string]uint64{}
	for q, rs := range l.records {
		if q >= dg {
			continue
		}
		for _, r := range rs {
			m[l.topic[r.Stream]] = max(m[l.topic[r.Stream]], r.Seq)
		}
	}
	return m
}

// firstFrom is each topic's first stream sequence in the datagrams from dg on.
func (l *recordLog) firstFrom(dg uint64) map[string]uint64 {
	m := map[string]uint64{}
	for q, rs := range l.records {
		if q < dg {
			continue
		}
		for _, r := range rs {
			if tp := l.topic[r.Stream]; m[tp] == 0 || r.Seq < m[tp] {
				m[tp] = r.Seq
			}
		}
	}
	return m
}

// deliveredPerTopic returns receiver i's delivered stream sequences per topic, sorted, after
// checking it got no gap, no duplicate and (ordered) everything in order.
func (s *sim) deliveredPerTopic(t *testing.T, i int, mode Mode) map[string][]uint64 {
	t.Helper()
	got := map[string][]uint64{}
	seen := map[string]map[uint64]bool{}
	for _, e := range s.events[i] {
		switch e := e.(type) {
		case Gap:
			t.Fatalf("receiver %d: %v, want none (all repairable)", i, e)
		case Message:
			if seen[e.Topic] == nil {
				seen[e.Topic] = map[uint64]bool{}
			}
			if seen[e.Topic][e.StreamSeq] {
				t.Fatalf("receiver %d: %s %d twice", i, e.Topic, e.StreamSeq)
			}
			seen[e.Topic][e.StreamSeq] = true
			if string(e.Body) != fmt.Sprint(e.StreamSeq) {
				t.Fatalf("receiver %d: %s %d body %q", i, e.Topic, e.StreamSeq, e.Body)
			}
			if g := got[e.Topic]; mode == Ordered && len(g) > 0 && e.StreamSeq != g[len(g)-1]+1 {
				t.Fatalf("receiver %d: %s %d after %d", i, e.Topic, e.StreamSeq, g[len(g)-1])
			}
			got[e.Topic] = append(got[e.Topic], e.StreamSeq)
		}
	}
	for _, g := range got {
		slices.Sort(g)
	}
	return got
}
