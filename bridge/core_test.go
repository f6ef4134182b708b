package bridge

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// simWorld is a seeded model of a bridge's surroundings: a source queue
// that delivers in order with client acks and redelivers what its session
// had unacked when that session ends; a link that carries forwards in
// order and can break (the forwards before the break stored, possibly
// with their confirmations lost, those after it not stored); a sink that
// keeps one copy per dedup id and checks a forward's AfterSeq against its
// last sequence (Nats-Expected-Last-Sequence); leader
// changes of that sink, which fail one forward while the ones sent behind
// it still reach the new leader and are stored (answered to a link that
// has failed since); another writer storing into the same sink; and
// crashes of the bridge itself (a new core, a new source session). Time
// is simulated.
type simWorld struct {
	t      *testing.T
	rng    *rand.Rand
	core   *Core
	cfg    CoreConfig
	now    int64
	n      int            // messages in the source
	acked  []bool         // acknowledged at the source
	deliv  []bool         // delivered to the current source session, unacked
	handle map[uint64]int // the current session's ack handles
	keyIdx map[uint64]int // every key the current core gave, to its message
	// sink
	stored  []int
	seen    map[string]bool
	seqOf   map[string]uint64
	lastID  string // the last message the sink stored (another writer's too)
	lastSeq uint64 // the sink's sequence of it
	// foreignOn: another writer stores into the sink now and then
	foreignOn  bool
	foreignSeq map[uint64]bool // the sink's sequences of its messages
	checks     int
	transit    []simFwd // forwards on the wire, in order
	orphans    []simFwd // forwards of a failed link still on their way to the sink
	confirm    []simFwd // confirmations on the wire, in order
	refused    []simFwd // refusals on the wire, in order
	gen        int      // of the link: refusals of an older one are dropped (as the shell does)
	// noCond: the sink ignores After (a sink without the check); the
	// simulation must then find the reorder a leader change makes.
	noCond   bool
	foreign  int // messages another writer stored
	refusals int // refusals given to the core
	up       bool
	connDue  int64 // a pending connection attempt answers at this time (0: none)
	maxSent  int
	crashes  int
	// dropOn: now and then the shell cannot forward a message at its
	// first forward (a topic message NATS refuses for its subject or
	// size) and drops it (Drop); dropped messages are not stored.
	dropOn  bool
	everFwd []bool // forwarded at least once, by any core
	dropped []bool
	// rejectOn: the sink refuses some messages for good when they reach
	// it (larger than the stream's max_msg_size: rejects), answering
	// forGood, while the forwards behind them are on the wire; the shell
	// dead-letters the message at its source, fails the link and lets it
	// go (SinkFailed, then Drop).
	rejectOn bool
	forGood  []simFwd // refusals for good on the wire, in order
	rejected int      // refusals for good the shell acted on
}

// simFwd is one forward on the wire.
type simFwd struct {
	key      uint64
	i        int // the message
	afterSeq uint64
	gen      int
	seq      uint64 // the sink's sequence, once stored
	core     *Core  // whose key it is (answers to an earlier core are lost)
}

func newSim(t *testing.T, seed uint64, n, window int) *simWorld {
	w := &simWorld{t: t, rng: rand.New(rand.NewPCG(seed, 7)), n: n, acked: make([]bool, n), deliv: make([]bool, n), seen: map[string]bool{}, seqOf: map[string]uint64{}, foreignSeq: map[uint64]bool{},
		everFwd: make([]bool, n), dropped: make([]bool, n)}
	w.cfg = CoreConfig{Window: window, BackoffMin: 10, BackoffMax: 1000, AckTimeout: 5000, SeqOrder: true}
	w.restart()
	return w
}

// restart: a new bridge process (a crash, kill -9): the source session
// ends, its unacked messages are redelivered to the next one.
func (w *simWorld) restart() {
	w.core = NewCore(w.cfg, w.rng.Uint64())
	w.handle = map[uint64]int{}
	w.keyIdx = map[uint64]int{}
	w.deliv = make([]bool, w.n)
	w.transit, w.confirm, w.refused, w.forGood = nil, nil, nil, nil
	w.gen++
	w.up = false
	w.connDue = 0
}

func (w *simWorld) id(i int) string { return fmt.Sprintf("site-a:%d", i) }

func (w *simWorld) apply(acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case ActForward:
			if !w.up {
				w.t.Fatalf("forward of %d while the link is down", a.Key)
			}
			i := w.keyIdx[a.Key]
			if w.dropOn && !w.everFwd[i] && w.rng.IntN(20) == 0 {
				// The sink's client refuses it before sending: the
				// shell drops it and abandons the rest of acts (the
				// forwards behind it).
				if _, ok := w.handle[a.Key]; ok {
					delete(w.handle, a.Key)
					w.acked[i] = true // best effort: not delivered again
					w.deliv[i] = false
				}
				w.dropped[i] = true
				w.apply(w.core.Drop(a.Key, w.now))
				return
			}
			w.everFwd[i] = true
			w.transit = append(w.transit, simFwd{key: a.Key, i: i, afterSeq: a.AfterSeq, gen: w.gen, core: w.core})
		case ActAckSource:
			i, ok := w.handle[a.Key]
			if !ok {
				continue // a handle of an ended session
			}
			delete(w.handle, a.Key)
			if !w.seen[w.id(i)] && !w.isSkip(i) {
				w.t.Fatalf("message %d acknowledged at the source before the sink stored it", i)
			}
			w.acked[i] = true
			w.deliv[i] = false
		case ActConnect:
			w.connDue = w.now + 1 + w.rng.Int64N(50)
		case ActCheck:
			foreign := false
			for q := a.From; q <= a.To; q++ {
				foreign = foreign || w.foreignSeq[q] || q > w.lastSeq
			}
			w.checks++
			w.apply(w.core.Checked(foreign, w.now))
		}
	}
	if s := w.core.Stats().InFlight; s > w.cfg.Window {
		w.t.Fatalf("%d in flight, window %d", s, w.cfg.Window)
	} else if s > w.maxSent {
		w.maxSent = s
	}
}

func (w *simWorld) isSkip(i int) bool { return i%97 == 13 } // "loops"

// rejects reports whether the sink refuses message i for good (rejectOn).
func (w *simWorld) rejects(i int) bool { return w.rejectOn && i%23 == 5 }

// deliverOne gives the source session its next message if its prefetch
// (the window) allows.
func (w *simWorld) deliverOne() bool {
	held := 0
	for i := range w.n {
		if w.deliv[i] {
			held++
		}
	}
	if held >= w.cfg.Window {
		return false
	}
	for i := range w.n {
		if !w.acked[i] && !w.deliv[i] {
			w.deliv[i] = true
			key, _, acts := w.core.Offer(Item{ID: w.id(i), Bytes: 100, Skip: w.isSkip(i)}, w.now)
			w.handle[key] = i
			w.keyIdx[key] = i
			w.apply(acts)
			return true
		}
	}
	return false
}

// store is the sink taking forward f: a duplicate is confirmed without
// storing; a forward whose AfterSeq is not the last sequence is refused
// (unless noCond); anything else stored and confirmed. It reports whether
// f was confirmed (f.seq set).
func (w *simWorld) store(f *simFwd) bool {
	i := f.i
	id := w.id(i)
	if w.seen[id] {
		f.seq = w.seqOf[id]
		return true
	}
	if w.rejects(i) {
		w.forGood = append(w.forGood, *f)
		return false
	}
	if !w.noCond && f.afterSeq != 0 && f.afterSeq != w.lastSeq {
		w.refused = append(w.refused, *f)
		return false
	}
	w.seen[id] = true
	w.stored = append(w.stored, i)
	w.lastID = id
	w.lastSeq++
	w.seqOf[id] = w.lastSeq
	f.seq = w.lastSeq
	return true
}

func (w *simWorld) step(chaos bool) {
	w.now += 1 + w.rng.Int64N(5)
	switch r := w.rng.IntN(100); {
	case r < 30:
		w.deliverOne()
	case r < 50 && len(w.transit) > 0 && w.up:
		f := w.transit[0]
		w.transit = w.transit[1:]
		if w.store(&f) {
			w.confirm = append(w.confirm, f)
		}
	case r < 55 && len(w.orphans) > 0:
		// A forward of a failed link reaches the (new) leader.
		f := w.orphans[0]
		w.orphans = w.orphans[1:]
		if w.store(&f) {
			w.confirm = append(w.confirm, f)
		}
	case r < 75 && len(w.confirm) > 0:
		f := w.confirm[0]
		w.confirm = w.confirm[1:]
		if f.core == w.core {
			w.apply(w.core.Confirmed(f.key, f.seq, w.now))
		}
	case r < 80 && len(w.refused) > 0:
		f := w.refused[0]
		w.refused = w.refused[1:]
		if f.gen == w.gen && f.core == w.core {
			w.refusals++
			w.apply(w.core.Refused(f.key, w.now))
		}
	case r < 82 && len(w.forGood) > 0:
		f := w.forGood[0]
		w.forGood = w.forGood[1:]
		if f.gen != w.gen || f.core != w.core || !w.core.Holds(f.key) {
			break // an answer of a failed link: the core forwards it again
		}
		// The shell: the message goes to its dead-letter queue at the
		// source; the link fails, what is on the wire behind it reaching
		// the sink later (it must store none of it: each names the
		// refused one's predicted sequence, or one after it); the core
		// lets it go.
		if _, ok := w.handle[f.key]; ok {
			delete(w.handle, f.key)
			w.acked[f.i] = true
			w.deliv[f.i] = false
		}
		w.dropped[f.i] = true
		w.rejected++
		w.orphans = append(w.orphans, w.transit...)
		w.transit = nil
		w.up = false
		w.gen++
		w.apply(w.core.SinkFailed(w.now))
		w.apply(w.core.Drop(f.key, w.now))
		w.checkBackoff()
	case r < 83 && chaos && w.up:
		// The link breaks: a random prefix of what is on the wire is
		// stored, its confirmations lost; the rest is lost.
		cut := w.rng.IntN(len(w.transit) + 1)
		for _, f := range w.transit[:cut] {
			w.store(&f)
		}
		w.transit = nil
		if w.rng.IntN(2) == 0 {
			w.confirm = nil
		}
		w.up = false
		w.gen++
		w.apply(w.core.SinkFailed(w.now))
		w.checkBackoff()
	case r < 85 && chaos && w.up && len(w.transit) > 1:
		// A stream leader change: the first forward on the wire is
		// answered "no responders" (not stored), which fails the link;
		// the ones sent behind it reach the new leader later.
		w.orphans = append(w.orphans, w.transit[1:]...)
		w.transit = nil
		w.up = false
		w.gen++
		w.apply(w.core.SinkFailed(w.now))
		w.checkBackoff()
	case r == 85 && chaos && w.foreignOn:
		// Another writer stores into the same stream.
		w.foreign++
		w.lastID = fmt.Sprintf("other:%d", w.foreign)
		w.lastSeq++
		w.foreignSeq[w.lastSeq] = true
	case r < 87 && chaos:
		w.crashes++
		// Stored on the wire before the crash or not, at random.
		cut := w.rng.IntN(len(w.transit) + 1)
		for _, f := range w.transit[:cut] {
			w.store(&f)
		}
		w.restart()
	case r < 88 && chaos:
		// The source's session ends: its unacked messages go back.
		w.deliv = make([]bool, w.n)
		w.core.SourceLost(w.now)
	}
	if w.connDue != 0 && w.now >= w.connDue {
		w.connDue = 0
		if chaos && w.rng.IntN(3) == 0 {
			w.core.ConnectFailed(w.now)
			w.checkBackoff()
		} else {
			w.up = true
			w.apply(w.core.LinkUp(w.now, w.lastSeq))
		}
	}
	w.apply(w.core.Tick(w.now))
}

// checkBackoff: after a failure, the next attempt is due within the
// back-off's bounds.
func (w *simWorld) checkBackoff() {
	if w.core.State() != LinkDown {
		return
	}
	if d := w.core.RetryAt() - w.now; d < w.cfg.BackoffMin/2 || d > w.cfg.BackoffMax {
		w.t.Fatalf("back-off %d outside [%d, %d]", d, w.cfg.BackoffMin/2, w.cfg.BackoffMax)
	}
}

func (w *simWorld) done() bool {
	for i := range w.n {
		if !w.acked[i] {
			return false
		}
	}
	return true
}

func TestCoreSimulation(t *testing.T) {
	refused, shared := 0, 0
	for seed := uint64(1); seed <= 160; seed++ {
		window := []int{1, 2, 8, 64}[seed%4]
		w := newSim(t, seed, 200, window)
		if err := w.run(); err != "" {
			t.Fatalf("seed %d (window %d): %s", seed, window, err)
		}
		if st := w.core.Stats(); st.PendingItems != 0 || st.PendingBytes != 0 || st.InFlight != 0 {
			t.Fatalf("seed %d: core still holds %+v after all were acknowledged", seed, st)
		}
		if w.core.Stats().Shared {
			t.Fatalf("seed %d: the core took a sink it writes alone for shared", seed)
		}
		shared += w.checks
		refused += w.refusals
	}
	// The faults the order rule exists for did happen.
	if refused == 0 {
		t.Fatal("no forward was refused: the simulation does not exercise the condition")
	}
	t.Logf("%d refusals; %d checks for another writer (each found none)", refused, shared)
}

// TestCoreSimulationDrops: the shell drops now and then a message it
// cannot forward (at its first forward, in the middle of a window whose
// later forwards name it in their conditions); with the faults of
// TestCoreSimulation, the sink still gets every other message once, in
// source order, and the core ends holding nothing.
func TestCoreSimulationDrops(t *testing.T) {
	drops := 0
	for seed := uint64(1); seed <= 80; seed++ {
		window := []int{1, 2, 8, 64}[seed%4]
		w := newSim(t, seed, 200, window)
		w.dropOn = true
		if err := w.run(); err != "" {
			t.Fatalf("seed %d (window %d): %s", seed, window, err)
		}
		if st := w.core.Stats(); st.PendingItems != 0 || st.PendingBytes != 0 || st.InFlight != 0 {
			t.Fatalf("seed %d: core still holds %+v after all were acknowledged", seed, st)
		}
		if w.core.Stats().Shared {
			t.Fatalf("seed %d: the core took a sink it writes alone for shared", seed)
		}
		drops += countTrue(w.dropped)
	}
	if drops == 0 {
		t.Fatal("nothing dropped: the simulation does not exercise Drop")
	}
	t.Logf("%d messages dropped", drops)
}

// TestCoreSimulationRejects: the sink refuses some messages for good as
// they reach it (larger than the stream takes), with the forwards behind
// them on the wire; the shell fails the link and lets the refused one go
// (SinkFailed, Drop: bridge.go's onResult, forGood). With the faults of
// TestCoreSimulation, the sink gets every other message once, in source
// order, and the core ends holding nothing.
func TestCoreSimulationRejects(t *testing.T) {
	rejected := 0
	for seed := uint64(1); seed <= 80; seed++ {
		window := []int{1, 2, 8, 64}[seed%4]
		w := newSim(t, seed, 200, window)
		w.rejectOn = true
		if err := w.run(); err != "" {
			t.Fatalf("seed %d (window %d): %s", seed, window, err)
		}
		if st := w.core.Stats(); st.PendingItems != 0 || st.PendingBytes != 0 || st.InFlight != 0 {
			t.Fatalf("seed %d: core still holds %+v after all were acknowledged", seed, st)
		}
		for i := range w.n {
			if w.rejects(i) && !w.isSkip(i) && !w.dropped[i] {
				t.Fatalf("seed %d: message %d, refused for good, was not let go", seed, i)
			}
		}
		rejected += w.rejected
	}
	if rejected == 0 {
		t.Fatal("nothing refused for good: the simulation does not exercise it")
	}
	t.Logf("%d refusals for good acted on", rejected)
}

// TestCoreDrop: a dropped item is forgotten without an ack at its source;
// the items behind it (whose forwards the shell abandoned) are forwarded
// again, the one after the dropped one following the one before it (its
// condition names that one's predicted sequence); those before it stay in
// flight.
func TestCoreDrop(t *testing.T) {
	c := NewCore(CoreConfig{Window: 8, BackoffMin: 10, BackoffMax: 10, SeqOrder: true}, 1)
	c.Tick(0)
	c.LinkUp(0, 10)
	var keys []uint64
	for i := range 4 {
		k, _, _ := c.Offer(Item{ID: fmt.Sprint("a:", i), Bytes: 1}, 1)
		keys = append(keys, k)
	}
	acts := c.Drop(keys[1], 2)
	want := []Action{{Kind: ActForward, Key: keys[2], AfterSeq: 11}, {Kind: ActForward, Key: keys[3], AfterSeq: 12}}
	if fmt.Sprint(acts) != fmt.Sprint(want) {
		t.Fatalf("after dropping the second: got %v, want %v", acts, want)
	}
	if st := c.Stats(); st.PendingItems != 3 || st.Dropped != 1 || st.InFlight != 3 || st.Forwarded != 4 || st.Resent != 0 || c.State() != LinkUp || st.Failures != 0 {
		t.Fatalf("stats %+v, state %s", st, c.State())
	}
	keys = append(keys[:1], keys[2:]...)
	c.Confirmed(keys[1], 12, 3) // before its predecessor: the stream keeps the order
	if acts := c.Confirmed(keys[0], 11, 3); len(acts) != 1 || acts[0] != (Action{Kind: ActAckSource, Key: keys[0]}) {
		t.Fatalf("got %v", acts)
	}
	if acts := c.Confirmed(keys[2], 13, 3); len(acts) != 1 || acts[0] != (Action{Kind: ActAckSource, Key: keys[2]}) {
		t.Fatalf("got %v (confirmed where predicted: no check)", acts)
	}
	// The next offered follows the last one, with a condition.
	k, _, _ := c.Offer(Item{ID: "a:4"}, 4)
	k2, _, acts := c.Offer(Item{ID: "a:5"}, 4)
	if len(acts) != 1 || acts[0] != (Action{Kind: ActForward, Key: k2, AfterSeq: 14}) {
		t.Fatalf("got %v", acts)
	}
	// Dropping the tail: the next offered follows the one before it.
	if acts := c.Drop(k2, 5); len(acts) != 0 {
		t.Fatalf("dropping the tail: got %v, want nothing", acts)
	}
	k3, _, acts := c.Offer(Item{ID: "a:6"}, 5)
	if len(acts) != 1 || acts[0] != (Action{Kind: ActForward, Key: k3, AfterSeq: 14}) {
		t.Fatalf("after dropping the tail: got %v, want a:6 behind a:4 (key %d)", acts, k)
	}
	if c.Drop(999, 6) != nil {
		t.Fatal("dropping an item not held")
	}
}

// TestCoreSequences: forwards behind an unconfirmed item carry the
// predicted sequence of the one before; a confirmation at another
// sequence (another writer) makes the core forward one at a time.
func TestCoreSequences(t *testing.T) {
	c := NewCore(CoreConfig{Window: 8, BackoffMin: 10, BackoffMax: 10, SeqOrder: true}, 1)
	c.Tick(0)
	c.LinkUp(0, 10)
	var keys []uint64
	for i := range 4 {
		k, _, acts := c.Offer(Item{ID: fmt.Sprint("a:", i)}, 1)
		want := Action{Kind: ActForward, Key: k}
		if i > 0 {
			want.AfterSeq = uint64(10 + i)
		}
		if len(acts) != 1 || acts[0] != want {
			t.Fatalf("item %d: want %+v, got %v", i, want, acts)
		}
		keys = append(keys, k)
	}
	for i, k := range keys {
		c.Confirmed(k, uint64(11+i), 2)
	}
	if c.Stats().Shared {
		t.Fatal("shared after exact predictions")
	}
	// Another writer stored one: the next head lands at 16, not 15.
	k, _, acts := c.Offer(Item{ID: "a:4"}, 3)
	if len(acts) != 1 || acts[0] != (Action{Kind: ActForward, Key: k}) {
		t.Fatalf("head: got %v", acts)
	}
	k2, _, acts := c.Offer(Item{ID: "a:5"}, 3)
	if len(acts) != 1 || acts[0] != (Action{Kind: ActForward, Key: k2, AfterSeq: 15}) {
		t.Fatalf("behind the head: got %v", acts)
	}
	acts = c.Confirmed(k, 16, 4)
	if len(acts) != 2 || acts[0] != (Action{Kind: ActCheck, From: 15, To: 15}) {
		t.Fatalf("a confirmation at 16 where 15 was predicted: want sequence 15 checked, got %v", acts)
	}
	if _, _, acts := c.Offer(Item{ID: "a:5b"}, 4); len(acts) != 0 {
		t.Fatalf("while checking: want nothing behind an unconfirmed item, got %v", acts)
	}
	c.Checked(true, 4)
	if !c.Stats().Shared {
		t.Fatal("another writer's message at 15: want shared")
	}
	if acts := c.Refused(k2, 5); len(acts) != 1 || acts[0] != (Action{Kind: ActForward, Key: k2}) {
		t.Fatalf("refused, now the head: want it again without a condition, got %v", acts)
	}
	if _, _, acts := c.Offer(Item{ID: "a:6"}, 6); len(acts) != 0 {
		t.Fatalf("shared: want nothing behind an unconfirmed item, got %v", acts)
	}

	// Its own message stored late (a failed link's forward): back to the
	// window once checked.
	c2 := NewCore(CoreConfig{Window: 8, BackoffMin: 10, BackoffMax: 10, SeqOrder: true}, 1)
	c2.Tick(0)
	c2.LinkUp(0, 10)
	k, _, _ = c2.Offer(Item{ID: "b:0"}, 1)
	acts = c2.Confirmed(k, 12, 2)
	if len(acts) != 2 || acts[0] != (Action{Kind: ActCheck, From: 11, To: 11}) {
		t.Fatalf("want sequence 11 checked, got %v", acts)
	}
	c2.Checked(false, 3)
	k, _, _ = c2.Offer(Item{ID: "b:1"}, 4)
	if _, _, acts := c2.Offer(Item{ID: "b:2"}, 4); len(acts) != 1 || acts[0].AfterSeq != 13 {
		t.Fatalf("checked, its own: want the window again (after 13), got %v", acts)
	}
	if c2.Stats().Shared {
		t.Fatal("its own message taken for another writer's")
	}
}

// TestCoreSimulationSharedSink: another writer stores into the sink now
// and then. The core notices (a confirmation at a sequence it did not
// predict) and forwards one at a time from then on; every message is
// stored once. (Order is promised for a sink the core writes alone; with
// another writer, from the moment the core noticed it.)
func TestCoreSimulationSharedSink(t *testing.T) {
	noticed, foreign, misordered := 0, 0, 0
	for seed := uint64(1); seed <= 80; seed++ {
		w := newSim(t, seed, 200, 8)
		w.foreignOn = true
		err := w.run()
		if err != "" && !strings.HasPrefix(err, "stored") {
			t.Fatalf("seed %d: %s", seed, err)
		}
		if err != "" {
			misordered++
		}
		if w.foreign > 0 && w.core.Stats().Shared {
			noticed++
		}
		foreign += w.foreign
	}
	if noticed == 0 || foreign == 0 {
		t.Fatalf("noticed in %d seeds, %d messages of another writer: not exercised", noticed, foreign)
	}
	t.Logf("another writer noticed in %d of 80 seeds (%d of its messages); %d seeds stored out of order before the core noticed", noticed, foreign, misordered)
}

// TestCoreSimulationFindsReorder: with a sink that ignores After (a
// JetStream publish without Nats-Expected-Last-Sequence), the leader changes
// of the simulation store a later message before an earlier one: the
// simulation can see the fault the condition prevents.
func TestCoreSimulationFindsReorder(t *testing.T) {
	found := 0
	for seed := uint64(1); seed <= 40; seed++ {
		w := newSim(t, seed, 200, 8)
		w.noCond = true
		if err := w.run(); err != "" {
			found++
		}
	}
	if found == 0 {
		t.Fatal("no seed stored out of order without the condition: the simulation cannot find the reorder")
	}
	t.Logf("%d of 40 seeds stored out of order without the condition", found)
}

// run drives the world with faults, then without until every message is
// acknowledged, and checks what the sink stored: every message but the
// loops once, in source order. It returns what is wrong, or "".
func (w *simWorld) run() string {
	for range 20000 {
		w.step(true)
	}
	steps := 0
	for !w.done() {
		w.step(false)
		if steps++; steps > 500000 {
			w.t.Fatalf("no progress without faults: %d of %d acked", countTrue(w.acked), w.n)
		}
	}
	want := 0
	for _, i := range w.stored {
		for want < w.n && (w.isSkip(want) || w.dropped[want]) {
			want++
		}
		if i != want {
			return fmt.Sprintf("stored %d where %d was due (order: %v)", i, want, w.stored)
		}
		want++
	}
	for want < w.n && (w.isSkip(want) || w.dropped[want]) {
		want++
	}
	if want != w.n {
		return fmt.Sprintf("%d messages stored, want all up to %d", len(w.stored), w.n)
	}
	return ""
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

// TestCoreBackoff: consecutive failures double the delay up to the
// maximum, each jittered into its upper half; a success (a confirmation)
// resets it.
func TestCoreBackoff(t *testing.T) {
	c := NewCore(CoreConfig{Window: 1, BackoffMin: 100, BackoffMax: 1600}, 42)
	now := int64(0)
	want := []int64{100, 200, 400, 800, 1600, 1600}
	for i, d := range want {
		acts := c.Tick(now)
		if len(acts) != 1 || acts[0].Kind != ActConnect {
			t.Fatalf("attempt %d: want a connect, got %v", i, acts)
		}
		c.ConnectFailed(now)
		got := c.RetryAt() - now
		if got < d/2 || got > d {
			t.Fatalf("failure %d: delay %d, want %d..%d", i+1, got, d/2, d)
		}
		if acts := c.Tick(c.RetryAt() - 1); len(acts) != 0 {
			t.Fatalf("attempt before its time: %v", acts)
		}
		now = c.RetryAt()
	}
	c.Tick(now)
	c.LinkUp(now, 0)
	k, _, _ := c.Offer(Item{ID: "a:1"}, now)
	c.Confirmed(k, 0, now)
	c.SinkFailed(now)
	if got := c.RetryAt() - now; got < 50 || got > 100 {
		t.Fatalf("after a success the delay starts again from the minimum, got %d", got)
	}
}

// TestCoreBackoffAfterConnect: a link that comes up and fails before the
// sink confirmed anything (a message the sink refuses each time, a
// publish timing out) is a failure of the run: the delay goes on doubling
// up to the maximum, as for failed connections; a confirmation, or the
// link standing for BackoffMax, starts it again from the minimum.
//
// Before, LinkUp reset the count: such a failure was retried every
// BackoffMin forever, each time reconnecting (TestBridge_BackoffAfterConnect).
func TestCoreBackoffAfterConnect(t *testing.T) {
	c := NewCore(CoreConfig{Window: 4, BackoffMin: 100, BackoffMax: 1600}, 42)
	now := int64(0)
	k, _, _ := c.Offer(Item{ID: "a:poison"}, now)
	upAndFail := func(after int64) int64 {
		t.Helper()
		if acts := c.Tick(now); len(acts) != 1 || acts[0].Kind != ActConnect {
			t.Fatalf("want a connect at %d, got %v", now, acts)
		}
		acts := c.LinkUp(now, 0)
		if len(acts) != 1 || acts[0] != (Action{Kind: ActForward, Key: k}) {
			t.Fatalf("want the held item forwarded, got %v", acts)
		}
		now += after
		c.SinkFailed(now)
		d := c.RetryAt() - now
		now = c.RetryAt()
		return d
	}
	for i, d := range []int64{100, 200, 400, 800, 1600, 1600} {
		if got := upAndFail(1); got < d/2 || got > d {
			t.Fatalf("failure %d right after connecting: delay %d, want %d..%d", i+1, got, d/2, d)
		}
	}
	// The link stood for BackoffMax before it failed: a success.
	if got := upAndFail(1600); got < 50 || got > 100 {
		t.Fatalf("a failure after the link stood for BackoffMax: delay %d, want 50..100", got)
	}
	if got := upAndFail(1599); got < 100 || got > 200 {
		t.Fatalf("a failure just before BackoffMax: delay %d, want 100..200 (the second of a run)", got)
	}
	// A confirmation ends the run.
	c.Tick(now)
	c.LinkUp(now, 0)
	c.Confirmed(k, 0, now+1)
	c.SinkFailed(now + 2)
	if got := c.RetryAt() - (now + 2); got < 50 || got > 100 {
		t.Fatalf("a failure after a confirmation: delay %d, want 50..100", got)
	}
	// A confirmation of a forward of a failed link, while down, is not one
	// of this link's: it ends nothing.
	now = c.RetryAt()
	k2, _, _ := c.Offer(Item{ID: "a:2"}, now)
	for range 3 {
		c.Tick(now)
		c.ConnectFailed(now)
		now = c.RetryAt()
	}
	c.Confirmed(k2, 0, now)
	c.Tick(now)
	c.ConnectFailed(now)
	if got := c.RetryAt() - now; got < 800 || got > 1600 {
		t.Fatalf("the fifth failure of a run (a confirmation came while down): delay %d, want 800..1600", got)
	}
}

// TestCoreAckTimeout: a forward unconfirmed for AckTimeout fails the link
// and is forwarded again after reconnecting, with the same key.
func TestCoreAckTimeout(t *testing.T) {
	c := NewCore(CoreConfig{Window: 4, BackoffMin: 10, BackoffMax: 10, AckTimeout: 1000}, 1)
	c.Tick(0)
	c.LinkUp(0, 0)
	k, _, acts := c.Offer(Item{ID: "a:1"}, 1)
	if len(acts) != 1 || acts[0] != (Action{Kind: ActForward, Key: k}) {
		t.Fatalf("want forward, got %v", acts)
	}
	c.Tick(1000)
	if c.State() != LinkUp {
		t.Fatal("failed before the timeout")
	}
	c.Tick(1001)
	if c.State() != LinkDown {
		t.Fatal("not failed after the timeout")
	}
	c.Tick(c.RetryAt())
	acts = c.LinkUp(c.RetryAt(), 0)
	if len(acts) != 1 || acts[0] != (Action{Kind: ActForward, Key: k}) {
		t.Fatalf("want the same item forwarded again, got %v", acts)
	}
	if acts := c.Confirmed(k, 1, 2000); len(acts) != 1 || acts[0] != (Action{Kind: ActAckSource, Key: k}) {
		t.Fatalf("want ack at source, got %v", acts)
	}
}

// TestCoreMarkShared: a sink that may have other writers (a stream taking
// subjects beyond the out maps) gets one forward at a time from the
// start: nothing behind an unconfirmed item, whatever the window.
func TestCoreMarkShared(t *testing.T) {
	c := NewCore(CoreConfig{Window: 8, BackoffMin: 10, BackoffMax: 10, SeqOrder: true}, 1)
	c.Tick(0)
	c.MarkShared()
	c.LinkUp(0, 10)
	var keys []uint64
	for i := range 4 {
		k, _, acts := c.Offer(Item{ID: fmt.Sprint("a:", i)}, 1)
		keys = append(keys, k)
		if i == 0 {
			if len(acts) != 1 || acts[0] != (Action{Kind: ActForward, Key: k}) {
				t.Fatalf("head: got %v", acts)
			}
		} else if len(acts) != 0 {
			t.Fatalf("item %d behind an unconfirmed one: got %v, want nothing", i, acts)
		}
	}
	if !c.Stats().Shared {
		t.Fatal("Shared not reported")
	}
	// Confirmed at a sequence another writer shifted: the next one goes,
	// alone, without a condition and without a check.
	acts := c.Confirmed(keys[0], 13, 2)
	if len(acts) != 2 || acts[0].Kind != ActAckSource || acts[1] != (Action{Kind: ActForward, Key: keys[1]}) {
		t.Fatalf("after the head's confirmation: got %v, want its source ack and the next forward alone", acts)
	}
}
