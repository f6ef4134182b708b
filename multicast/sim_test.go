package multicast

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// sim drives one SenderCore and many ReceiverCores over a simulated LAN: fixed one-way latency,
// per-receiver loss on the receive side, a simulated clock. Everything is seeded: a failure
// reproduces exactly.
type sim struct {
	t       *testing.T
	now     time.Time
	rng     *rand.Rand
	latency time.Duration
	snd     *SenderCore
	sndCfg  SenderCoreConfig
	rcv     []*ReceiverCore
	loss    []lossModel
	q       []flight
	events  [][]Event
	lost    map[uint64]bool // original DATA sequences some receiver lost
	naks    int             // NAK datagrams that reached the sender
	onNAK   func(b []byte)
	dropNAK func(b []byte) bool // true: the datagram never reaches the sender (an older sender ignoring it)
	onSend  func(b []byte)      // sees every datagram the sender multicasts
	shared  lossModel           // loss on the sender's side: every receiver loses the datagram
	losses  int                 // DATA datagrams lost, counted per receiver
}

type flight struct {
	at   time.Time
	to   int // -1: the sender; -2: every receiver; else one receiver
	from int
	b    []byte
}

// lossModel drops a share of datagrams at random plus bursts.
type lossModel struct {
	p, burstP float64
	burstLen  int
	left      int
	off       bool // drop everything (a cut cable)
}

func (l *lossModel) drop(rng *rand.Rand) bool {
	if l.off {
		return true
	}
	if l.left > 0 {
		l.left--
		return true
	}
	if l.burstP > 0 && rng.Float64() < l.burstP {
		l.left = l.burstLen - 1
		return true
	}
	return rng.Float64() < l.p
}

var simSenderAddr = netip.MustParseAddrPort("198.18.0.1:7400")

func newSim(t *testing.T, seed uint64, n int, scfg SenderCoreConfig, rcfg ReceiverCoreConfig) *sim {
	s := &sim{t: t, now: time.Unix(1_700_000_000, 0), rng: rand.New(rand.NewPCG(seed, 1)),
		latency: 25 * time.Microsecond, lost: map[uint64]bool{}}
	scfg.Rand = rand.New(rand.NewPCG(seed, 2))
	scfg.Start = s.now
	s.sndCfg = scfg
	var err error
	if s.snd, err = NewSenderCore(scfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		c := rcfg
		c.Rand = rand.New(rand.NewPCG(seed, uint64(100+i)))
		r, err := NewReceiverCore(c)
		if err != nil {
			t.Fatal(err)
		}
		s.rcv = append(s.rcv, r)
	}
	s.loss = make([]lossModel, n)
	s.events = make([][]Event, n)
	return s
}

// restartSender replaces the sender with a new one (new session), as a daemon restart would.
func (s *sim) restartSender(seed uint64) {
	cfg := s.sndCfg
	cfg.Rand = rand.New(rand.NewPCG(seed, 3))
	cfg.Start = s.now.Add(time.Second) // the session id carries the start second
	var err error
	if s.snd, err = NewSenderCore(cfg); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sim) fromSender() {
	for _, b := range s.snd.Ready() {
		if s.onSend != nil {
			s.onSend(b)
		}
		s.q = append(s.q, flight{at: s.now.Add(s.latency), to: -2, b: append([]byte(nil), b...)})
	}
}

func (s *sim) fromReceiver(i int) {
	ev, out := s.rcv[i].Ready()
	s.events[i] = append(s.events[i], ev...)
	for _, o := range out {
		if o.To != simSenderAddr {
			s.t.Fatalf("receiver %d NAKs %v, want %v", i, o.To, simSenderAddr)
		}
		s.q = append(s.q, flight{at: s.now.Add(s.latency), to: -1, from: i, b: append([]byte(nil), o.B...)})
	}
}

func (s *sim) publish(topic string, body string) {
	p, _ := AppendMessage(nil, []Header{{"n", body}}, []byte(body))
	if err := s.snd.Publish(s.now, topic, p); err != nil {
		s.t.Fatal(err)
	}
}

// run advances the clock to until, calling pub at each step (it may publish and must Flush).
func (s *sim) run(until time.Time, every time.Duration, pub func(now time.Time)) {
	nextPub := s.now
	for iter := 0; ; iter++ {
		if iter > 1000000 {
			for i, r := range s.rcv {
				s.t.Logf("rcv %d deadline %v now %v miss %d catDue %v", i, r.Deadline(), s.now, len(r.miss), r.catDue)
			}
			s.t.Fatalf("stuck: q %d snd %v", len(s.q), s.snd.Deadline())
		}
		t := until
		if len(s.q) > 0 && s.q[0].at.Before(t) {
			t = s.q[0].at
		}
		if d := s.snd.Deadline(); d.Before(t) {
			t = d
		}
		for _, r := range s.rcv {
			if d := r.Deadline(); !d.IsZero() && d.Before(t) {
				t = d
			}
		}
		if pub != nil && nextPub.Before(t) {
			t = nextPub
		}
		if t.Before(s.now) {
			t = s.now
		}
		if t.After(until) || t.Equal(until) && (len(s.q) == 0 || s.q[0].at.After(until)) {
			s.now = until
			return
		}
		s.now = t
		for len(s.q) > 0 && !s.q[0].at.After(s.now) {
			f := s.q[0]
			s.q = s.q[1:]
			if f.to == -1 {
				s.naks++
				if s.onNAK != nil {
					s.onNAK(f.b)
				}
				if s.dropNAK != nil && s.dropNAK(f.b) {
					continue
				}
				s.snd.Step(s.now, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 1, byte(f.from)}), 7400), f.b)
				s.fromSender()
				continue
			}
			shared := s.shared.drop(s.rng)
			for i, r := range s.rcv {
				if shared || s.loss[i].drop(s.rng) {
					if Type(f.b[3]) == TypeData {
						h, _ := DecodeHeader(f.b)
						s.lost[h.Seq] = true
						s.losses++
					}
					continue
				}
				if err := r.Handle(s.now, simSenderAddr, f.b); err != nil && !errors.Is(err, ErrOtherSession) && !errors.Is(err, ErrStale) {
					s.t.Fatalf("receiver %d: %v", i, err)
				}
				s.fromReceiver(i)
			}
		}
		if pub != nil && !nextPub.After(s.now) {
			pub(s.now)
			s.fromSender()
			nextPub = s.now.Add(every)
		}
		if !s.snd.Deadline().After(s.now) {
			s.snd.Tick(s.now)
			s.fromSender()
		}
		for i, r := range s.rcv {
			if d := r.Deadline(); !d.IsZero() && !d.After(s.now) {
				r.Tick(s.now)
				s.fromReceiver(i)
			}
		}
	}
}

// checkStreams verifies the delivery contract for receiver i: per session and stream, messages and
// gaps in order, together covering 1..want[topic] exactly. It returns the gaps seen.
func (s *sim) checkStreams(i int, want map[string]uint64, mode Mode) []Gap {
	s.t.Helper()
	next := map[string]uint64{}
	var gaps []Gap
	seen := map[string]map[uint64]bool{}
	for _, e := range s.events[i] {
		switch e := e.(type) {
		case SessionChange:
			next = map[string]uint64{}
			seen = map[string]map[uint64]bool{}
		case Message:
			if seen[e.Topic] == nil {
				seen[e.Topic] = map[uint64]bool{}
			}
			if seen[e.Topic][e.StreamSeq] {
				s.t.Fatalf("receiver %d: %s seq %d delivered twice", i, e.Topic, e.StreamSeq)
			}
			seen[e.Topic][e.StreamSeq] = true
			if string(e.Body) != fmt.Sprint(e.StreamSeq) || len(e.Headers) != 1 || e.Headers[0].Value != string(e.Body) {
				s.t.Fatalf("receiver %d: %s seq %d body %q headers %v", i, e.Topic, e.StreamSeq, e.Body, e.Headers)
			}
			if mode == Ordered && e.StreamSeq != next[e.Topic]+1 {
				s.t.Fatalf("receiver %d: %s got seq %d, want %d", i, e.Topic, e.StreamSeq, next[e.Topic]+1)
			}
			next[e.Topic] = max(next[e.Topic], e.StreamSeq)
		case Gap:
			gaps = append(gaps, e)
			if mode == Ordered && e.From != next[e.Topic]+1 {
				s.t.Fatalf("receiver %d: %v, want it to start at %d", i, e, next[e.Topic]+1)
			}
			if seen[e.Topic] == nil {
				seen[e.Topic] = map[uint64]bool{}
			}
			for q := e.From; q <= e.To; q++ {
				if seen[e.Topic][q] {
					s.t.Fatalf("receiver %d: %v covers delivered seq %d", i, e, q)
				}
				seen[e.Topic][q] = true
			}
			next[e.Topic] = max(next[e.Topic], e.To)
		}
	}
	for topic, n := range want {
		for q := uint64(1); q <= n; q++ {
			if !seen[topic][q] {
				s.t.Fatalf("receiver %d: %s seq %d neither delivered nor reported as a gap (silent hole)", i, topic, q)
			}
		}
	}
	return gaps
}

var simTopics = []string{"metrics.cpu", "metrics.mem", "orders.eu", "orders.us", "news"}

// steady returns a publisher sending one to three messages per step round-robin over simTopics.
func (s *sim) steady(count map[string]uint64, total int) func(time.Time) {
	sent := 0
	return func(now time.Time) {
		for k := 0; k < 1+s.rng.IntN(3) && sent < total; k++ {
			topic := simTopics[sent%len(simTopics)]
			count[topic]++
			s.publish(topic, fmt.Sprint(count[topic]))
			sent++
		}
		s.snd.Flush(now)
	}
}

func TestSim_LossyHundredReceivers(t *testing.T) {
	for _, mode := range []Mode{Ordered, Skip} {
		t.Run(fmt.Sprintf("mode=%d", mode), func(t *testing.T) {
			s := newSim(t, 1, 100, SenderCoreConfig{Profile: ProfileLowLatency}, ReceiverCoreConfig{Profile: ProfileLowLatency, Mode: mode})
			for i := range s.loss {
				s.loss[i] = lossModel{p: 0.05, burstP: 0.002, burstLen: 20}
			}
			count := map[string]uint64{}
			s.run(s.now.Add(300*time.Millisecond), 100*time.Microsecond, s.steady(count, 4000))
			s.run(s.now.Add(time.Second), 0, nil) // let repairs and heartbeats settle
			for i := range s.rcv {
				if gaps := s.checkStreams(i, count, mode); len(gaps) > 0 {
					t.Fatalf("receiver %d: %d gaps, first %v; want none (all losses repairable)", i, len(gaps), gaps[0])
				}
			}
			c := s.snd.Counters()
			ratio := float64(s.naks) / float64(len(s.lost))
			t.Logf("%d data datagrams, %d lost by at least one receiver (%d losses in all), %d NAKs at the sender: %.2f per lost datagram, %.3f per loss; %d NCFs, %d repairs",
				c.DataDatagrams, len(s.lost), s.losses, s.naks, ratio, float64(s.naks)/float64(s.losses), c.NCFs, c.Repairs)
			if ratio >= 2 {
				t.Errorf("got %.2f NAKs per lost datagram, want < 2 (suppression)", ratio)
			}
			if c.NAKsDropped > 0 {
				t.Errorf("got %d NAKs dropped by the rate limit, want 0 for well-behaved receivers", c.NAKsDropped)
			}
		})
	}
}

// TestSim_SharedBursts: bursts of 20 on the sender's side (every receiver loses the same datagrams,
// and the first NCF with them) on top of 5% random loss per receiver.
func TestSim_SharedBursts(t *testing.T) {
	s := newSim(t, 6, 100, SenderCoreConfig{Profile: ProfileLowLatency}, ReceiverCoreConfig{Profile: ProfileLowLatency})
	for i := range s.loss {
		s.loss[i] = lossModel{p: 0.05}
	}
	s.shared = lossModel{burstP: 0.003, burstLen: 20}
	count := map[string]uint64{}
	s.run(s.now.Add(300*time.Millisecond), 100*time.Microsecond, s.steady(count, 4000))
	s.run(s.now.Add(time.Second), 0, nil)
	for i := range s.rcv {
		if gaps := s.checkStreams(i, count, Ordered); len(gaps) > 0 {
			t.Fatalf("receiver %d: %d gaps, first %v; want none", i, len(gaps), gaps[0])
		}
	}
	c := s.snd.Counters()
	t.Logf("%d lost datagrams, %d NAKs at the sender (%.2f per lost datagram), %d dropped by the per-source limit, %d repairs",
		len(s.lost), s.naks, float64(s.naks)/float64(len(s.lost)), c.NAKsDropped, c.Repairs)
}

func TestSim_FallBehindWindow(t *testing.T) {
	s := newSim(t, 2, 3, SenderCoreConfig{Profile: ProfileLowLatency, Window: 64 << 10}, ReceiverCoreConfig{Profile: ProfileLowLatency})
	count := map[string]uint64{}
	pub := s.steady(count, 6000)
	s.run(s.now.Add(100*time.Millisecond), 100*time.Microsecond, pub)
	s.loss[1].off = true // receiver 1 is cut off while far more than the window goes by
	before := map[string]uint64{}
	for k, v := range count {
		before[k] = v
	}
	s.run(s.now.Add(200*time.Millisecond), 100*time.Microsecond, pub)
	s.loss[1].off = false
	s.run(s.now.Add(200*time.Millisecond), 100*time.Microsecond, pub)
	s.run(s.now.Add(time.Second), 0, nil)
	for _, i := range []int{0, 2} {
		if gaps := s.checkStreams(i, count, Ordered); len(gaps) > 0 {
			t.Fatalf("receiver %d: got gap %v, want none", i, gaps[0])
		}
	}
	gaps := s.checkStreams(1, count, Ordered)
	if len(gaps) != len(simTopics) {
		t.Fatalf("receiver 1: got %d gaps %v, want one per topic", len(gaps), gaps)
	}
	for _, g := range gaps {
		if g.From != before[g.Topic]+1 && g.From != before[g.Topic]+2 && g.From != before[g.Topic] {
			t.Errorf("got %v, want it to start near %d", g, before[g.Topic]+1)
		}
		if g.Reason != ReasonGone {
			t.Errorf("got %v, want reason gone", g)
		}
	}
	t.Logf("receiver 1 gaps: %v", gaps)
}

func TestSim_TailLossSeenByHeartbeat(t *testing.T) {
	s := newSim(t, 3, 2, SenderCoreConfig{Profile: ProfileLowLatency}, ReceiverCoreConfig{Profile: ProfileLowLatency})
	count := map[string]uint64{}
	s.run(s.now.Add(10*time.Millisecond), 100*time.Microsecond, s.steady(count, 20))
	s.loss[1].off = true
	s.publish("news", "x") // the last message, lost by receiver 1: only a heartbeat reveals it
	s.snd.Flush(s.now)
	s.fromSender()
	s.run(s.now.Add(time.Millisecond), 0, nil)
	s.loss[1].off = false
	start := s.now
	var got time.Duration
	for i := 0; i < 100 && got == 0; i++ {
		s.run(s.now.Add(time.Millisecond), 0, nil)
		for _, e := range s.events[1] {
			if m, ok := e.(Message); ok && string(m.Body) == "x" {
				got = s.now.Sub(start)
			}
		}
	}
	if got == 0 {
		t.Fatal("receiver 1 never got the last message")
	}
	t.Logf("tail loss repaired %v after the link came back", got)
}

func TestSim_SenderRestart(t *testing.T) {
	s := newSim(t, 4, 5, SenderCoreConfig{Profile: ProfileLowLatency}, ReceiverCoreConfig{Profile: ProfileLowLatency})
	for i := range s.loss {
		s.loss[i] = lossModel{p: 0.05}
	}
	count := map[string]uint64{}
	s.run(s.now.Add(50*time.Millisecond), 100*time.Microsecond, s.steady(count, 300))
	s.run(s.now.Add(500*time.Millisecond), 0, nil)
	old := s.snd.Session()
	s.restartSender(99)
	count2 := map[string]uint64{}
	s.run(s.now.Add(50*time.Millisecond), 100*time.Microsecond, s.steady(count2, 300))
	// Without a key, receivers leave the old session only once it has been silent for the session
	// timeout; the new one was young when first heard, so they recover it from its start.
	s.run(s.now.Add(500*time.Millisecond), 0, nil)
	for i, r := range s.rcv {
		if r.Session() != old || r.Counters().OtherSession == 0 {
			t.Fatalf("receiver %d: session %x after 0.5 s (%d datagrams of the new one); want still %x", i, r.Session(), r.Counters().OtherSession, old)
		}
	}
	s.run(s.now.Add(DefaultSessionTimeout+time.Second), 0, nil)
	for i := range s.rcv {
		var changes []SessionChange
		split := 0
		for k, e := range s.events[i] {
			if c, ok := e.(SessionChange); ok {
				changes = append(changes, c)
				split = k
			}
		}
		if len(changes) != 2 || changes[0].Old != 0 || changes[1].Old != old || changes[1].New != s.snd.Session() {
			t.Fatalf("receiver %d: got session changes %+v, want first then %x -> %x", i, changes, old, s.snd.Session())
		}
		all := s.events[i]
		s.events[i] = all[:split]
		if gaps := s.checkStreams(i, count, Ordered); len(gaps) > 0 {
			t.Errorf("receiver %d, first session: gaps %v", i, gaps)
		}
		s.events[i] = all[split:]
		if gaps := s.checkStreams(i, count2, Ordered); len(gaps) > 0 {
			t.Errorf("receiver %d, second session: gaps %v", i, gaps)
		}
	}
}

func TestSim_LateJoin(t *testing.T) {
	s := newSim(t, 5, 2, SenderCoreConfig{Profile: ProfileDashboard}, ReceiverCoreConfig{Profile: ProfileDashboard})
	s.loss[1].off = true
	count := map[string]uint64{}
	pub := s.steady(count, 3000)
	s.run(s.now.Add(100*time.Millisecond), 100*time.Microsecond, pub)
	s.loss[1].off = false // receiver 1 "starts" now: it has heard nothing before
	s.rcv[1], _ = NewReceiverCore(ReceiverCoreConfig{Profile: ProfileDashboard, Rand: rand.New(rand.NewPCG(5, 7))})
	s.run(s.now.Add(1500*time.Millisecond), 100*time.Microsecond, pub)
	s.run(s.now.Add(time.Second), 0, nil)
	if s.rcv[1].Counters().NAKs != 0 {
		t.Errorf("late joiner sent %d NAKs, want 0 (no history before it joined)", s.rcv[1].Counters().NAKs)
	}
	first := map[string]uint64{}
	for _, e := range s.events[1] {
		switch e := e.(type) {
		case Gap:
			t.Fatalf("late joiner got %v, want no gap", e)
		case Message:
			if first[e.Topic] == 0 {
				first[e.Topic] = e.StreamSeq
			} else if e.StreamSeq != first[e.Topic]+1 {
				t.Fatalf("late joiner: %s seq %d after %d", e.Topic, e.StreamSeq, first[e.Topic])
			} else {
				first[e.Topic] = e.StreamSeq
			}
		}
	}
	for _, topic := range simTopics {
		if first[topic] != count[topic] {
			t.Errorf("late joiner: %s last seq %d, want %d", topic, first[topic], count[topic])
		}
	}
}

// TestSim_LateJoinLossy: receivers join a busy session late, behind heavy loss at the join (issue
// 11, found 1). Each stream must start at or before its first record in the datagrams from the
// join point on, and from there every message is delivered or reported: nothing is dropped as a
// duplicate of something never delivered.
func TestSim_LateJoinLossy(t *testing.T) {
	for seed := uint64(20); seed < 30; seed++ {
		s := newSim(t, seed, 4, SenderCoreConfig{Profile: ProfileLowLatency}, ReceiverCoreConfig{Profile: ProfileLowLatency})
		records := map[uint64][]Record{} // original DATA datagram -> its records
		topic := map[uint32]string{}
		s.onSend = func(b []byte) {
			var p Packet
			if Decode(b, &p) != nil {
				return
			}
			switch p.Type {
			case TypeData:
				records[p.Seq] = slices.Clone(p.Records)
			case TypeCatalog:
				for _, e := range p.Catalog {
					topic[e.Stream] = e.Topic
				}
			}
		}
		for i := range s.loss {
			s.loss[i].off = true
		}
		count := map[string]uint64{}
		pub := s.steady(count, 4000)
		s.run(s.now.Add(50*time.Millisecond), 100*time.Microsecond, pub)
		for i := range s.rcv { // they start now, behind 40% loss for the first 5 ms
			s.rcv[i], _ = NewReceiverCore(ReceiverCoreConfig{Profile: ProfileLowLatency, Rand: rand.New(rand.NewPCG(seed, uint64(200+i)))})
			s.loss[i] = lossModel{p: 0.4}
		}
		s.run(s.now.Add(5*time.Millisecond), 100*time.Microsecond, pub)
		for i := range s.loss {
			s.loss[i] = lossModel{p: 0.05}
		}
		s.run(s.now.Add(300*time.Millisecond), 100*time.Microsecond, pub)
		s.run(s.now.Add(time.Second), 0, nil)
		for i, r := range s.rcv {
			first := map[string]uint64{}
			for dg, rs := range records {
				if dg < r.join {
					continue
				}
				for _, rc := range rs {
					if tp := topic[rc.Stream]; first[tp] == 0 || rc.Seq < first[tp] {
						first[tp] = rc.Seq
					}
				}
			}
			next := map[string]uint64{}
			for _, e := range s.events[i] {
				var tp string
				var from, to uint64
				switch e := e.(type) {
				case Message:
					tp, from, to = e.Topic, e.StreamSeq, e.StreamSeq
				case Gap:
					tp, from, to = e.Topic, e.From, e.To
					t.Errorf("seed %d receiver %d: %v, want none (all repairable)", seed, i, e)
				default:
					continue
				}
				if next[tp] == 0 {
					if from > first[tp] {
						t.Fatalf("seed %d receiver %d (joined at %d): %s starts at %d, but %d came after the join: silently lost",
							seed, i, r.join, tp, from, first[tp])
					}
				} else if from != next[tp] {
					t.Fatalf("seed %d receiver %d: %s seq %d after %d", seed, i, tp, from, next[tp]-1)
				}
				next[tp] = to + 1
			}
			for tp, n := range count {
				if next[tp] != n+1 {
					t.Errorf("seed %d receiver %d: %s ends at %d, want %d", seed, i, tp, next[tp]-1, n)
				}
			}
		}
	}
}
