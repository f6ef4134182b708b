package bridge

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// seqSim is a seeded model of direction in from JetStream: a stream that
// fills over time with the consumer's messages among other subjects'; a
// durable pull consumer (max ack pending, ack wait, redelivery of what
// its wait passed, first deliveries in stream order); connections that
// die with deliveries and acknowledgements on the wire, and whose pull
// requests the server goes on serving after the bridge reconnected (those
// deliveries go nowhere, but take consumer sequences); retention that
// removes messages still pending; crashes of the bridge (a new
// sequencer). The bridge passes messages on to the local side and
// acknowledges them once "committed" there. Time is simulated.
type seqSim struct {
	t   *testing.T
	rng *rand.Rand
	seq *Sequencer
	now int64
	// bypass: the shell passes every message on as it comes (no
	// sequencer): the simulation must then find the reorder.
	bypass bool

	// stream
	ours     []bool // by stream sequence (index 0 unused)
	appended uint64 // last sequence in the stream
	deleted  map[uint64]bool
	first    uint64 // the stream's first sequence (retention moves it)
	// blind: messages removed while no sequencer that had started was
	// running (a new one starts at the ack floor and cannot see them).
	blind   map[uint64]bool
	started bool // the current sequencer had a session
	// consumer (server side)
	window   int
	ackWait  int64
	sseq     uint64           // next stream sequence to deliver for the first time
	pending  map[uint64]int64 // delivered, unacked: redelivery due
	acked    map[uint64]bool
	lastDlv  uint64 // last stream sequence delivered for the first time
	sessions int
	// the current connection
	wire  []uint64 // deliveries on their way to the bridge
	wireD []simDlv // their consumer sequence and first flag
	// the server's consumer sequence, deliveries per message, and what
	// the lost connections' pull requests may still take
	dseq    uint64
	ndeliv  map[uint64]int
	deadReq int
	acks    []uint64 // acknowledgements on their way to the server
	live    bool
	probe   []simProbe // probes on their way (answered in order)
	held    map[uint64]bool
	// local side
	passed []uint64 // first passes, in order
	got    map[uint64]bool
	gaps   [][2]uint64
	// counters of the sequencers that crashed
	heldTotal, probes, dropped uint64
	// chaosSteps: steps with faults before the calm (0: 15000, by when
	// the stream is long complete); crashLast: the faults end with a
	// crash of the bridge.
	chaosSteps int
	crashLast  bool
}

type simProbe struct{ after uint64 }

type simDlv struct {
	dseq  uint64
	first bool
}

func newSeqSim(t *testing.T, seed uint64, n, window int) *seqSim {
	s := &seqSim{t: t, rng: rand.New(rand.NewPCG(seed, 11)), window: window, ackWait: 400,
		ndeliv: map[uint64]int{}, deleted: map[uint64]bool{}, blind: map[uint64]bool{}, first: 1, pending: map[uint64]int64{}, acked: map[uint64]bool{}, got: map[uint64]bool{}}
	s.ours = []bool{false}
	for range n {
		// About half the stream is other subjects, in runs.
		s.ours = append(s.ours, s.rng.IntN(5) < 3)
	}
	s.sseq = 1
	s.crash()
	return s
}

func (s *seqSim) total() uint64 { return uint64(len(s.ours) - 1) }

// crash: a new bridge process; its connection and what it held are gone.
func (s *seqSim) crash() {
	if s.seq != nil {
		st := s.seq.Stats()
		s.heldTotal += st.HeldTotal
		s.probes += st.Probes
		s.dropped += st.Dropped
	}
	// What was removed and not yet reported dies with this process.
	for q := range s.deleted {
		if s.ours[q] && !s.got[q] && !s.inGap(q) {
			s.blind[q] = true
		}
	}
	s.seq = NewSequencer(SequencerConfig{MaxBytes: int64(s.window) * 100, RegapAfter: 3 * s.ackWait})
	s.held = map[uint64]bool{}
	s.started = false
	s.drop()
}

// drop: the connection dies; what is on the wire is lost.
func (s *seqSim) drop() {
	s.wire, s.wireD, s.acks, s.probe = nil, nil, nil, nil
	if s.live {
		s.deadReq += s.rng.IntN(s.window + 1)
	}
	s.live = false
}

// connect: a new consume session; the sequencer learns the consumer's
// ack floor and last delivered sequence.
func (s *seqSim) connect() {
	s.live = true
	s.sessions++
	s.started = true
	s.apply(s.seq.Start(s.ackFloor(), s.first, s.now))
}

// ackFloor is the consumer's ack floor: the last delivered stream
// sequence below which every message of the consumer is acknowledged or
// removed.
func (s *seqSim) ackFloor() uint64 {
	floor := uint64(0)
	for q := uint64(1); q <= s.lastDlv; q++ {
		if s.ours[q] && !s.acked[q] && !s.deleted[q] {
			break
		}
		floor = q
	}
	return floor
}

func (s *seqSim) apply(acts []SeqAction) {
	for _, a := range acts {
		switch a.Kind {
		case ActSeqPass:
			if !s.held[a.Seq] {
				s.t.Fatalf("pass of %d, which the bridge does not hold", a.Seq)
			}
			delete(s.held, a.Seq)
			if !s.got[a.Seq] {
				s.got[a.Seq] = true
				s.passed = append(s.passed, a.Seq)
			}
			// Committed locally, then acknowledged on the wire.
			s.acks = append(s.acks, a.Seq)
		case ActSeqDrop:
			delete(s.held, a.Seq)
		case ActSeqProbe:
			s.probe = append(s.probe, simProbe{a.Seq})
		case ActSeqGap:
			s.gaps = append(s.gaps, [2]uint64{a.From, a.To})
		}
	}
	if st := s.seq.Stats(); st.HeldBytes > int64(s.window)*100 {
		s.t.Fatalf("%d bytes held, bound %d", st.HeldBytes, s.window*100)
	}
}

// arrive: a delivery reaches the bridge.
func (s *seqSim) arrive(q uint64, d simDlv) {
	s.held[q] = true
	if s.bypass {
		s.apply([]SeqAction{{Kind: ActSeqPass, Seq: q}})
		return
	}
	s.apply(s.seq.Arrive(q, d.dseq, d.first, 100, s.now))
}

// send is the server delivering q: to a lost connection's request that
// is still open (nothing arrives), or on the wire.
func (s *seqSim) send(q uint64, void bool) {
	s.dseq++
	d := simDlv{s.dseq, s.ndeliv[q] == 0}
	s.ndeliv[q]++
	s.pending[q] = s.now + s.ackWait
	if void {
		s.deadReq--
		return
	}
	s.wire = append(s.wire, q)
	s.wireD = append(s.wireD, d)
}

// deliver: the server sends the consumer's next message on the wire, if
// its max ack pending allows: a redelivery whose wait passed first, else
// the next first delivery.
func (s *seqSim) deliver() {
	// The oldest requests first: a lost connection's, while it lasts.
	void := s.deadReq > 0 && s.rng.IntN(2) == 0
	if !void && !s.live {
		return
	}
	var due []uint64
	for q, at := range s.pending {
		if at <= s.now {
			due = append(due, q)
		}
	}
	if len(due) > 0 {
		slices.Sort(due)
		s.send(due[0], void)
		return
	}
	if len(s.pending) >= s.window {
		return
	}
	for ; s.sseq <= s.appended; s.sseq++ {
		if s.ours[s.sseq] && !s.deleted[s.sseq] {
			q := s.sseq
			s.sseq++
			s.lastDlv = q
			s.send(q, void)
			return
		}
	}
}

// pendingSeqs are the pending messages in order (a map's order is random;
// the simulation must be reproducible from its seed).
func (s *seqSim) pendingSeqs() []uint64 {
	var qs []uint64
	for q := range s.pending {
		qs = append(qs, q)
	}
	slices.Sort(qs)
	return qs
}

func (s *seqSim) firstAfter(after uint64) (uint64, bool) {
	for q := max(after+1, s.first); q <= s.appended; q++ {
		if s.ours[q] && !s.deleted[q] {
			return q, true
		}
	}
	return 0, false
}

func (s *seqSim) step(chaos bool) {
	s.now += 1 + s.rng.Int64N(5)
	switch r := s.rng.IntN(100); {
	case r < 15:
		if s.appended < s.total() {
			s.appended++ // the stream fills slowly
		}
	case r < 40:
		s.deliver()
	case r < 65 && s.live && len(s.wire) > 0:
		q, d := s.wire[0], s.wireD[0]
		s.wire, s.wireD = s.wire[1:], s.wireD[1:]
		s.arrive(q, d)
	case r < 80 && s.live && len(s.acks) > 0:
		q := s.acks[0]
		s.acks = s.acks[1:]
		if chaos && s.rng.IntN(20) == 0 {
			// This acknowledgement alone is lost (published while the
			// connection was reconnecting, or the consumer's leader died
			// with it); those behind it arrive. The message is
			// redelivered after its ack wait, unless the bridge crashes
			// first: the next run's sequencer starts at an ack floor
			// below messages that are acknowledged.
			break
		}
		if _, ok := s.pending[q]; ok {
			delete(s.pending, q)
			s.acked[q] = true
		}
	case r < 90 && s.live && len(s.probe) > 0:
		p := s.probe[0]
		s.probe = s.probe[1:]
		q, ok := s.firstAfter(p.after)
		s.apply(s.seq.ProbeResult(p.after, q, s.first, s.ackFloor(), ok, false, s.now))
	case r >= 90 && r < 93 && chaos && s.live:
		s.drop()
	case r == 93 && chaos && s.rng.IntN(4) == 0:
		s.crash()
	case r == 94 && chaos && len(s.pending) > 0:
		// Retention removes the head of the stream up to a pending
		// message (pending ones are not redelivered then). Only what was
		// delivered: the server's consumer passes over the rest unseen.
		x := slices.Max(s.pendingSeqs())
		x = s.first + uint64(s.rng.Int64N(int64(x-s.first+1)))
		for _, q := range s.wire {
			if q <= x {
				return // on its way: see Sequencer's Late
			}
		}
		for q := s.first; q <= x; q++ {
			if s.ours[q] && !s.acked[q] && !s.deleted[q] && !s.started {
				s.blind[q] = true
			}
			s.deleted[q] = true
			delete(s.pending, q)
		}
		s.first = x + 1
	case r == 95 && chaos:
		// A message delivered to a lost connection is deleted from the
		// middle of the stream.
		for _, q := range s.pendingSeqs() {
			if s.rng.IntN(2) == 0 || slices.Contains(s.wire, q) {
				continue // on its way: see Sequencer's Late
			}
			if !s.started {
				s.blind[q] = true
			}
			s.deleted[q] = true
			delete(s.pending, q)
			break
		}
	case r >= 96 && !s.live:
		s.connect()
	}
	if !s.bypass {
		s.apply(s.seq.Tick(s.now))
	}
	// A probe lost with its connection is asked again.
	if !s.live && len(s.probe) == 0 && !s.bypass {
		if st := s.seq; st.probing {
			s.apply(st.ProbeResult(st.probeAfter, 0, 0, 0, false, true, s.now))
		}
	}
}

func (s *seqSim) inGap(q uint64) bool {
	for _, g := range s.gaps {
		if q >= g[0] && q <= g[1] {
			return true
		}
	}
	return false
}

func (s *seqSim) done() bool {
	if s.appended < s.total() {
		return false
	}
	for q := uint64(1); q <= s.total(); q++ {
		if s.ours[q] && !s.deleted[q] && !s.got[q] {
			return false
		}
	}
	return true
}

// run: faults, then none until every message of the consumer is passed
// on; then checks. It returns what is wrong, or "".
func (s *seqSim) run() string {
	chaos := s.chaosSteps
	if chaos == 0 {
		chaos = 15000
	}
	for range chaos {
		s.step(true)
	}
	if s.crashLast {
		s.crash()
	}
	for steps := 0; !s.done(); steps++ {
		s.step(false)
		if s.seq.Stats().Late != 0 {
			return "a late arrival in a simulation without any"
		}
		if steps > 2000000 {
			s.t.Fatalf("no progress without faults: %d passed, held %v, next %d, stats %+v", len(s.passed), s.held, s.seq.Next(), s.seq.Stats())
		}
	}
	if !slices.IsSorted(s.passed) {
		for i := 1; i < len(s.passed); i++ {
			if s.passed[i] < s.passed[i-1] {
				return fmt.Sprintf("passed on %d after %d", s.passed[i], s.passed[i-1])
			}
		}
	}
	// Nothing skipped silently: a message never passed on is gone from
	// the stream and inside a reported gap; a gap holds no message that
	// is still there.
	for q := uint64(1); q <= s.total(); q++ {
		if !s.ours[q] || s.got[q] {
			continue
		}
		if !s.deleted[q] {
			return fmt.Sprintf("message %d never passed on", q)
		}
		if !s.inGap(q) && !s.blind[q] && q < s.passed[len(s.passed)-1] {
			return fmt.Sprintf("message %d removed from the stream and skipped without a gap reported", q)
		}
	}
	for _, g := range s.gaps {
		for q := g[0]; q <= g[1]; q++ {
			if s.ours[q] && !s.deleted[q] && !s.got[q] {
				return fmt.Sprintf("gap %d..%d reported, but %d is in the stream", g[0], g[1], q)
			}
		}
	}
	return ""
}

// TestSequencerSimulation: whatever the connections, crashes and
// retention do, the local side gets the consumer's messages in stream
// order, each once, and every message it does not get is gone from the
// stream and reported in a gap.
func TestSequencerSimulation(t *testing.T) {
	var held, probes, gaps, dropped uint64
	for seed := uint64(1); seed <= 150; seed++ {
		window := []int{1, 4, 32}[seed%3]
		s := newSeqSim(t, seed, 300, window)
		if err := s.run(); err != "" {
			t.Fatalf("seed %d (window %d): %s", seed, window, err)
		}
		st := s.seq.Stats()
		held += st.HeldTotal + s.heldTotal
		probes += st.Probes + s.probes
		dropped += st.Dropped + s.dropped
		gaps += uint64(len(s.gaps))
	}
	if held == 0 || probes == 0 || gaps == 0 || dropped == 0 {
		t.Fatalf("held %d, probes %d, gaps %d, dropped %d: the simulation does not exercise the hold-back", held, probes, gaps, dropped)
	}
	t.Logf("held back %d messages, %d probes, %d gaps reported, %d dropped over the byte bound", held, probes, gaps, dropped)
}

// TestSequencerSimulationCrashThenCalm: the faults stop while the stream
// still fills, with a crash of the bridge (TestBridgeKillNine's kill -9
// of site B), and nothing fails after: the next run starts at the
// consumer's ack floor, above which the last run may have left messages
// acknowledged (an acknowledgement lost on its own, those after it not),
// and must bring in every other message, in order, without another fault
// to start a session anew.
func TestSequencerSimulationCrashThenCalm(t *testing.T) {
	for seed := uint64(1); seed <= 150; seed++ {
		window := []int{1, 4, 32}[seed%3]
		s := newSeqSim(t, seed, 300, window)
		s.chaosSteps, s.crashLast = 1000+int(seed%7)*100, true
		if err := s.run(); err != "" {
			t.Fatalf("seed %d (window %d): %s", seed, window, err)
		}
	}
}

// TestSequencerSimulationFindsReorder: passing messages on as they come
// (no hold-back), the same world reorders: the simulation can see it.
func TestSequencerSimulationFindsReorder(t *testing.T) {
	found := 0
	for seed := uint64(1); seed <= 40; seed++ {
		s := newSeqSim(t, seed, 300, 32)
		s.bypass = true
		if err := s.run(); err != "" {
			found++
		}
	}
	if found == 0 {
		t.Fatal("no seed reordered without the sequencer: the simulation cannot find the reorder")
	}
	t.Logf("%d of 40 seeds reordered without the sequencer", found)
}

// TestSequencerWaitsForTheLost is the link cut of TestBridgeLinkCut in
// miniature: 32..41 went to the lost connection (consumer sequences
// 32..41), the new session gets 42 first; 42 waits for them. Then the
// server serves the lost connection's request once more (consumer sequence
// 56 goes nowhere) between deliveries of the new session.
func TestSequencerWaitsForTheLost(t *testing.T) {
	s := NewSequencer(SequencerConfig{MaxBytes: 1 << 20, RegapAfter: 1000})
	s.Start(0, 1, 0)
	pass := func(q uint64) []SeqAction { return []SeqAction{{Kind: ActSeqPass, Seq: q}} }
	for q := uint64(1); q <= 31; q++ {
		if acts := s.Arrive(q, q, true, 10, 0); !slices.Equal(acts, pass(q)) {
			t.Fatalf("%d: want pass, got %v", q, acts)
		}
	}
	s.Start(31, 1, 10) // reconnected: 32..41 pending at the server
	acts := s.Arrive(42, 42, true, 10, 11)
	if !slices.Equal(acts, []SeqAction{{Kind: ActSeqProbe, Seq: 31}}) {
		t.Fatalf("42 before 32: want a probe after 31, got %v", acts)
	}
	// 43 follows 42 without a hole: its predecessor is 42, still held.
	if acts := s.Arrive(43, 43, true, 10, 11); len(acts) != 0 {
		t.Fatalf("43: want it held, got %v", acts)
	}
	if acts := s.ProbeResult(31, 32, 1, 0, true, false, 12); len(acts) != 0 {
		t.Fatalf("32 is missing: want nothing passed, got %v", acts)
	}
	// The redeliveries, after the ack wait (consumer sequences 44..53).
	for q := uint64(32); q <= 41; q++ {
		acts := s.Arrive(q, q+12, false, 10, 20)
		want := pass(q)
		if q == 32 {
			// The next one may be another subject's: ask (once; 33..41
			// come meanwhile and pass in turn).
			want = append(want, SeqAction{Kind: ActSeqProbe, Seq: 32})
		}
		if q == 41 {
			want = append(want, pass(42)...)
			want = append(want, pass(43)...)
		}
		if !slices.Equal(acts, want) {
			t.Fatalf("%d: want %v, got %v", q, want, acts)
		}
	}
	if acts := s.ProbeResult(32, 33, 1, 0, true, false, 21); len(acts) != 0 {
		t.Fatalf("a late answer: want nothing, got %v", acts)
	}
	// Stream sequences 44, 45 are another subject's; 46 follows 43 (54
	// after 53, no hole): its predecessor is 43.
	if acts := s.Arrive(46, 54, true, 10, 22); !slices.Equal(acts, pass(46)) {
		t.Fatalf("46 right after 43: want pass, got %v", acts)
	}
	// 47 goes to the lost connection's request (consumer sequence 55),
	// 48 arrives (56): a hole, so 48 proves nothing and waits.
	acts = s.Arrive(48, 56, true, 10, 23)
	if !slices.Equal(acts, []SeqAction{{Kind: ActSeqProbe, Seq: 46}}) {
		t.Fatalf("48 after a hole: want a probe after 46, got %v", acts)
	}
	s.ProbeResult(46, 47, 1, 0, true, false, 24)
	if acts := s.Arrive(47, 57, false, 10, 25); !slices.Equal(acts, append(pass(47), pass(48)...)) {
		t.Fatalf("47 again: want 47 and 48 passed, got %v", acts)
	}
	if st := s.Stats(); st.Held != 0 || st.HeldBytes != 0 {
		t.Fatalf("still held: %+v", st)
	}
}

// TestSequencerGap: a message waited for is deleted from the stream: a
// second probe after RegapAfter reports the gap and goes on.
func TestSequencerGap(t *testing.T) {
	s := NewSequencer(SequencerConfig{MaxBytes: 1 << 20, RegapAfter: 1000})
	s.Start(42, 1, 30)
	if acts := s.Arrive(45, 1, true, 10, 31); len(acts) != 1 || acts[0].Kind != ActSeqProbe {
		t.Fatalf("want a probe, got %v", acts)
	}
	s.ProbeResult(42, 43, 1, 0, true, false, 32)
	if acts := s.Arrive(43, 2, false, 10, 33); !slices.Equal(acts, []SeqAction{{Kind: ActSeqPass, Seq: 43}, {Kind: ActSeqProbe, Seq: 43}}) {
		t.Fatalf("43: got %v", acts)
	}
	s.ProbeResult(43, 44, 1, 0, true, false, 34)
	if acts := s.Tick(500); len(acts) != 0 {
		t.Fatalf("asked again before RegapAfter: %v", acts)
	}
	if acts := s.Tick(1034); !slices.Equal(acts, []SeqAction{{Kind: ActSeqProbe, Seq: 43}}) {
		t.Fatalf("want a second probe after RegapAfter, got %v", acts)
	}
	acts := s.ProbeResult(43, 45, 1, 0, true, false, 1035)
	if !slices.Equal(acts, []SeqAction{{Kind: ActSeqGap, From: 44, To: 44}, {Kind: ActSeqPass, Seq: 45}}) {
		t.Fatalf("44 gone: want gap 44..44 and 45 passed, got %v", acts)
	}
	if st := s.Stats(); st.Gaps != 1 || st.Next != 45 {
		t.Fatalf("stats %+v", st)
	}
	// Retention: the stream's first sequence moved past next.
	if acts := s.Start(45, 60, 2000); !slices.Equal(acts, []SeqAction{{Kind: ActSeqGap, From: 46, To: 59}}) {
		t.Fatalf("first sequence 60: want gap 46..59, got %v", acts)
	}
}

// TestSequencerAckedByEarlierRun: an earlier run of the bridge passed
// 11..20 on and acknowledged them, but the acknowledgement of 11 was lost,
// and the run ended before 11 came again. The consumer's ack floor is 10;
// 12..20 are acknowledged and never delivered again. This run starts at
// the floor; 11 is redelivered and passes, and the probe finds 12 in the
// stream: once the floor has moved past it (11's acknowledgement), 12 is
// known passed on, and so are 13..20 in turn; 21.. go on, no gap.
//
// Before, the sequencer waited for 12 forever, holding 21.. (the server,
// their max ack pending reached, delivering nothing more), and nothing was
// logged: TestBridgeKillNine's stall at site B.
func TestSequencerAckedByEarlierRun(t *testing.T) {
	s := NewSequencer(SequencerConfig{MaxBytes: 1 << 20, RegapAfter: 1000})
	pass := func(qs ...uint64) []SeqAction {
		var acts []SeqAction
		for _, q := range qs {
			acts = append(acts, SeqAction{Kind: ActSeqPass, Seq: q})
		}
		return acts
	}
	probe := func(q uint64) []SeqAction { return []SeqAction{{Kind: ActSeqProbe, Seq: q}} }
	if acts := s.Start(10, 1, 0); len(acts) != 0 {
		t.Fatalf("start: got %v", acts)
	}
	// First deliveries of 21..23 (consumer sequences 21..23; 1..20 went
	// to the earlier run): held.
	if acts := s.Arrive(21, 21, true, 10, 1); !slices.Equal(acts, probe(10)) {
		t.Fatalf("21: want a probe after 10, got %v", acts)
	}
	for q := uint64(22); q <= 23; q++ {
		if acts := s.Arrive(q, q, true, 10, 1); len(acts) != 0 {
			t.Fatalf("%d: want it held, got %v", q, acts)
		}
	}
	if acts := s.ProbeResult(10, 11, 1, 10, true, false, 2); len(acts) != 0 {
		t.Fatalf("11 pending at the server: want nothing, got %v", acts)
	}
	// 11 again, after its ack wait.
	if acts := s.Arrive(11, 24, false, 10, 3); !slices.Equal(acts, append(pass(11), probe(11)...)) {
		t.Fatalf("11: want it passed and a probe after 11, got %v", acts)
	}
	// Answered before 11's acknowledgement reached the server: the floor
	// is still 10, and 12 may yet come.
	if acts := s.ProbeResult(11, 12, 1, 10, true, false, 4); len(acts) != 0 {
		t.Fatalf("floor 10: want nothing, got %v", acts)
	}
	if acts := s.Tick(1004); !slices.Equal(acts, probe(11)) {
		t.Fatalf("after RegapAfter: want a probe after 11, got %v", acts)
	}
	// 11 acknowledged: the floor is 20. 12..19 are in the stream and
	// acknowledged; each is gone past, and what follows asked about.
	for q := uint64(11); q < 19; q++ {
		if acts := s.ProbeResult(q, q+1, 1, 20, true, false, 1005); !slices.Equal(acts, probe(q+1)) {
			t.Fatalf("%d acknowledged: want a probe after %d, got %v", q+1, q+1, acts)
		}
	}
	if acts := s.ProbeResult(19, 20, 1, 20, true, false, 1006); !slices.Equal(acts, pass(21, 22, 23)) {
		t.Fatalf("20 acknowledged: want 21..23 passed, got %v", acts)
	}
	if st := s.Stats(); st.Held != 0 || st.Gaps != 0 || st.Next != 23 {
		t.Fatalf("stats %+v", st)
	}
	// A message waited for that is gone is still a gap when the one after
	// it is acknowledged: 26 held, 24 awaited, then removed; 25 is in
	// the stream, at the floor.
	if acts := s.Arrive(26, 30, true, 10, 2000); !slices.Equal(acts, probe(23)) {
		t.Fatalf("26: want a probe after 23, got %v", acts)
	}
	s.ProbeResult(23, 24, 1, 23, true, false, 2001)
	s.Tick(3001)
	if acts := s.ProbeResult(23, 25, 1, 25, true, false, 3002); !slices.Equal(acts, append([]SeqAction{{Kind: ActSeqGap, From: 24, To: 24}}, pass(26)...)) {
		t.Fatalf("24 gone, 25 acknowledged: want gap 24..24 and 26 passed, got %v", acts)
	}
}

// TestSequencerByteBound: a message that would hold more than MaxBytes is
// dropped unacknowledged (it comes again after its ack wait).
func TestSequencerByteBound(t *testing.T) {
	s := NewSequencer(SequencerConfig{MaxBytes: 250, RegapAfter: 1000})
	s.Start(0, 1, 0)
	s.Arrive(3, 1, true, 100, 0)
	s.Arrive(4, 3, true, 100, 0)
	if acts := s.Arrive(5, 5, true, 100, 0); !slices.Equal(acts, []SeqAction{{Kind: ActSeqDrop, Seq: 5}}) {
		t.Fatalf("over the bound: want drop, got %v", acts)
	}
	if st := s.Stats(); st.HeldBytes != 200 || st.Dropped != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A wait for a missing message shows in Waiting, measured from the Tick
// that first saw it, so that the shell can say so (the stall of
// TestBridgeKillNine logged nothing for minutes); it ends when the message
// comes, and a wait for the next one counts from its own start.
func TestSequencerWaitingReportsAStall(t *testing.T) {
	s := NewSequencer(SequencerConfig{MaxBytes: 1 << 20, RegapAfter: 1000})
	s.Start(10, 1, 0)
	s.Tick(5)
	if w, _, held := s.Waiting(5); w != 0 || held != 0 {
		t.Fatalf("nothing held: waited %d, held %d", w, held)
	}
	s.Arrive(12, 12, true, 10, 10) // 11 missing: held, a probe out
	s.ProbeResult(10, 11, 1, 10, true, false, 11)
	for now := int64(20); now <= 5020; now += 1000 {
		s.Tick(now)
	}
	if w, after, held := s.Waiting(5020); w != 5000 || after != 10 || held != 1 {
		t.Fatalf("waiting for 11 since the tick at 20: waited %d after %d, held %d; want 5000 after 10, 1", w, after, held)
	}
	s.Arrive(11, 13, true, 10, 5030) // passes 11 and 12
	s.Tick(5040)
	if w, after, held := s.Waiting(6000); w != 0 || after != 12 || held != 0 {
		t.Fatalf("after 11 came: waited %d after %d, held %d; want 0 after 12, 0", w, after, held)
	}
	s.Arrive(14, 15, true, 10, 6010) // a delivery missing before it: 13 may be lost
	s.Tick(6020)
	s.Tick(7020)
	if w, after, _ := s.Waiting(7020); w != 1000 || after != 12 {
		t.Fatalf("waiting for 13: waited %d after %d; want 1000 after 12", w, after)
	}
}
