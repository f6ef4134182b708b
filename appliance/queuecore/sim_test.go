package queuecore

// A seeded deterministic simulation of one queue and its dead-letter queue
// (FoundationDB / TigerBeetle style). The harness plays the shell:
//
//   - a model journal: rows (id, queue, size, group, claim row,
//     not_before, expires, enqueued) and a delivered mark per queue, global
//     IDs assigned at commit, moves like the SQL journal's (new row,
//     not_before and expires cleared), a message's count its claim row or
//     else 1 at or below its queue's mark;
//   - batches applied atomically in submission order at random later
//     steps, failing as a whole sometimes, and their outcomes reported to
//     the cores (Done, Committed, Unreserve) in that order, possibly some
//     steps after the commit, as the shell's completions are;
//   - page-ins read from the journal and answered at once or later (the
//     shell loads them outside the queue's lock: answers may be stale),
//     failing sometimes;
//   - producers (Reserve, enqueue, Committed or Unreserve), consumers in
//     every ack mode with prefetch 1..5 and ack timeouts, acks (by id and
//     attempt, or attempt 0), nacks, stale acks, auto-ack writes, ack and
//     nack batches held before submission, transactions (an enqueue and
//     acks of one or two subscriptions in one batch, or aborted), purges,
//     requeues out of the DLQ, time, and crash-restarts (Recover, page in).
//
// check runs after every step; settle (no failures, past every back-off,
// ticking only at Wake) and checkNoStall every 50 steps and at random; a
// final drain at the end must empty the main queue. The invariants are
// numbered as in the brief the harness was written to:
//
//  1. nothing committed is lost: every journal operation is validated when
//     applied (delete only after the sim acked or wrote that message, drop
//     and dead-letter "expired" only when expired, "nack" only after a
//     NACK with requeue=false, "max-deliveries" only at max_deliveries, no
//     operation on a message that is not in that queue);
//  2. nothing whose ack committed is delivered again (no delivery of a
//     message that is not in the journal);
//  3. at most one message per group outstanding (held by a client, or its
//     ack's commit pending);
//  4. FIFO: a dispatch never overtakes a due message of the queue that was
//     never dispatched (ungrouped, or of the same group), nor a message of
//     its own group that was dispatched and is still in the queue;
//  5. no stall after settle: no consumer with credit while a message is
//     deliverable (however many messages of blocked groups come first);
//  6. attempts grow per message as clients see them, and a client-ack
//     MESSAGE goes out only once its claim is durable;
//  7. no consumer holds more than its prefetch;
//  8. Snapshot().Count and .Bytes equal the journal's, as reported;
//  9. the journal never counts a delivery that did not happen, but for
//     as long as a failed write's repair is outstanding: a raise of the
//     mark covers only messages claimed or given a row of their own
//     before or in its batch (a failed one is written again), and with no
//     batch of a queue outstanding, the count of each message the core
//     holds ready, delayed or parked is at most the core's own.
//
//	go test -run TestSim ./appliance/queuecore                 // 2000 seeds x 300 steps
//	go test -run TestSim -sim.seeds=20000 -sim.steps=500 ...  // more
//	go test -run TestSim -sim.seed=N -sim.trace ...            // one seed, whole trace
//	go test -run '^$' -fuzz '^FuzzSim$' ./appliance/queuecore  // schedules from fuzz bytes

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"
)

var (
	flagSimSeed  = flag.Int64("sim.seed", -1, "run only this simulation seed")
	flagSimSeeds = flag.Int("sim.seeds", 2000, "number of simulation seeds")
	flagSimFrom  = flag.Uint64("sim.from", 1, "first simulation seed")
	flagSimSteps = flag.Int("sim.steps", 300, "steps per simulation seed")
	flagSimTrace = flag.Bool("sim.trace", false, "print the whole trace of a failing run")
)

var errSimJournal = errors.New("sim: injected journal failure")

// simSrc is where the simulation takes its choices from: a seeded PRNG,
// or the bytes of a fuzz input.
type simSrc interface {
	intn(n int) int // in [0, n)
	exhausted() bool
}

type rngSrc struct{ r *rand.Rand }

func (s rngSrc) intn(n int) int {
	if n <= 1 {
		return 0
	}
	return s.r.IntN(n)
}
func (s rngSrc) exhausted() bool { return false }

type byteSrc struct {
	b []byte
	i int
}

func (s *byteSrc) intn(n int) int {
	if n <= 1 {
		return 0
	}
	v := 0
	for k := 0; k == 0 || (k == 1 && n > 256); k++ {
		if s.i < len(s.b) {
			v = v<<8 | int(s.b[s.i])
			s.i++
		}
	}
	return v % n
}
func (s *byteSrc) exhausted() bool { return s.i >= len(s.b) }

const (
	qMain = 0
	qDLQ  = 1
)

var simQName = [2]string{"main", "dlq"}
var simGroups = []string{"", "a", "b", "c"}

// simRow is one row of the model journal.
type simRow struct {
	id        uint64
	q         int
	size      int64
	group     string
	claim     int  // the claim row's count
	claimed   bool // a claim row exists
	notBefore int64
	expires   int64
	enqueued  int64
	prodNB    int64 // the producer's NotBefore (0 for a message moved in)
}

type simEnq struct {
	size  int64
	group string
	nb    int64
	exp   int64
}

// simPart is one piece of a journal batch: a core's batch, or a producer's
// enqueue into the main queue.
type simPart struct {
	q   int
	b   *Batch
	enq *simEnq
}

type simBatch struct {
	parts []simPart
	what  string
}

// simDone is a batch the journal applied (or failed) whose outcome has not
// reached its cores yet: the journal's completion runs after the commit, so
// a page-in may see a commit before the core does.
type simDone struct {
	jb    *simBatch
	res   []any
	err   error
	delta [2]simDelta
}

type simDelta struct {
	n     int
	bytes int64
}

// simPage is a page-in request and, once the journal was read (outside the
// queue's lock, as the shell does), its answer, possibly stale by the time
// it reaches the core.
type simPage struct {
	req  *PageIn
	read bool
	msgs []*Msg
	err  error
}

// simPageFail is the model of a queue's run of failed page-ins
// (PageInFailing): it starts at a failed Paged and ends at the next
// successful one, a page-in answered from the backlog cache, or once the
// queue has nothing left to page in.
type simPageFail struct {
	since int64  // s.now of the run's first failure; 0: no run
	fails int    // failures in the run
	err   string // the last one's
	hits  uint64 // the core's CacheHits at the last failure
	// okRead: a successful Paged was just given to the core during a run,
	// whose EvPageInRecovered must come with its outputs.
	okRead bool
}

type simCon struct {
	c    *Consumer
	q    int
	name string
	out  []*Delivery         // received and unresolved, in receive order
	at   map[*Delivery]int64 // when received
	gone []*Delivery         // resolved: stale tokens
}

type simFailure struct{ msg string }

type simStats struct {
	steps, enqueued, delivered, acked, deadLettered, moved, purges, purgeParts, staleRequeues, crashes, settles, failures, pageIns, parks int
	cacheHits                                                                                                                             int // page-ins answered from the backlog cache (in place of pageIns)
	marks, rows, pins                                                                                                                     int // claims applied: raises of the mark, rows of count >= 1, rows of count 0
	// runs of failed page-ins ended: by a page-in that read the journal,
	// one answered from the cache, nothing left to page in
	pfRead, pfCache, pfIdle int
}

type sim struct {
	r     simSrc
	label string
	now   int64
	step  int

	cfg   [2]Config // as normalised by New
	cores [2]*Core

	// reconfig: SetConfig is one of the actions (TestSimReconfig). Then
	// the checks use the bounds of every config a queue has had: a batch
	// may have been made under an earlier one.
	reconfig  bool
	minMaxDel [2]int   // smallest positive MaxDeliveries a queue has had, 0: never one
	maxRedel  [2]int64 // largest RedeliveryMax a queue has had

	rows     map[uint64]*simRow
	outbox   [2][]*simBatch  // core batches the pump has not submitted yet (in order per queue)
	purging  [2]*simPurge    // the purge running in each queue
	seen     map[uint64]int  // highest client-ack attempt a client received (kept across crashes)
	mark     [2]uint64       // delivered marks
	everDisp map[uint64]bool // a claim of count >= 1 (or an auto-ack delivery) was ever emitted for it
	claimOp  map[uint64]bool // a claim (a row, of any count) was ever emitted for it
	nextID   uint64
	pending  []*simBatch // submitted, completing FIFO
	held     []*simBatch // ack, nack and transaction batches not submitted yet
	applied  []*simDone  // committed (or failed) in the journal, not reported yet
	unseen   [2]simDelta // what applied batches changed that their cores do not know yet
	page     [2]*simPage
	pf       [2]simPageFail
	cons     []*simCon
	conOf    map[*Consumer]*simCon
	nextCon  int
	wake     [2]int64
	settling bool

	failPct, pageFailPct int

	dispatched  map[uint64]bool // an op or an auto-ack delivery was ever emitted for it
	lastClaim   map[uint64]int  // highest OpClaim count emitted (this incarnation)
	lastAttempt map[uint64]int  // highest Attempt delivered (reset to the journal's count at a crash)
	ackIntent   map[uint64]bool // the sim acked (or wrote, auto) a delivery of it
	nackDLQ     map[uint64]bool // the sim nacked it with requeue=false
	ackedDone   map[uint64]bool // its delete committed
	reqCursor   uint64
	// reqLoad: a requeue's journal read whose MoveOut comes at a later
	// step, as the shell's does (it loads outside the queue's lock).
	reqLoad   *simReqLoad
	movedRows map[uint64]simRow // moved messages as committed, for Committed

	trace []string
	st    simStats
}

func (s *sim) failf(format string, a ...any) {
	panic(simFailure{fmt.Sprintf("step %d now %d: ", s.step, s.now) + fmt.Sprintf(format, a...)})
}

func (s *sim) logf(format string, a ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%4d t=%-6d ", s.step, s.now)+fmt.Sprintf(format, a...))
}

func (s *sim) chance(pct int) bool { return s.r.intn(100) < pct }

// runSim runs one simulation; steps <= 0 runs until the source is
// exhausted (fuzzing), capped at maxFuzzSteps.
func runSim(r simSrc, steps int, label string) (st simStats, err error) {
	return runSimWith(r, steps, label, false)
}

func runSimWith(r simSrc, steps int, label string, reconfig bool) (st simStats, err error) {
	s := &sim{r: r, label: label, reconfig: reconfig}
	defer func() {
		st = s.st
		if p := recover(); p != nil {
			msg := ""
			if f, ok := p.(simFailure); ok {
				msg = f.msg
			} else {
				msg = fmt.Sprintf("step %d: panic: %v\n%s", s.step, p, debug.Stack())
			}
			tr := s.trace
			if !*flagSimTrace && len(tr) > 80 {
				tr = tr[len(tr)-80:]
			}
			err = fmt.Errorf("%s: %s\nconfig main=%+v\n       dlq=%+v\ntrace (last %d lines):\n%s", label, msg, s.cfg[qMain], s.cfg[qDLQ], len(tr), strings.Join(tr, "\n"))
		}
	}()
	s.init()
	const maxFuzzSteps = 3000
	for s.step = 1; ; s.step++ {
		if (steps > 0 && s.step > steps) || (steps <= 0 && (r.exhausted() || s.step > maxFuzzSteps)) {
			break
		}
		s.act()
		if s.step%37 == 0 {
			s.capWindow()
		}
		s.check()
		if s.step%50 == 0 {
			s.settle()
			s.checkNoStall()
		}
	}
	s.drain()
	s.st.steps = s.step
	for _, c := range s.cores {
		s.st.cacheHits += int(c.CacheHits)
	}
	return s.st, nil
}

func (s *sim) init() {
	r := s.r
	s.now = 1_000_000
	cfg := Config{
		Window:        1 + r.intn(20),
		GroupOverflow: r.intn(4), // 0: default
		MaxDeliveries: r.intn(5), // 0: never (sometimes)
		RedeliveryMin: int64(r.intn(21)),
		DeadLetter:    true,
		ExpiredToDLQ:  r.intn(2) == 0,
		RetryMin:      1 + int64(r.intn(10)),
	}
	if cfg.Window%2 == 0 {
		// A byte window too, on half the seeds (not drawn from r: the
		// seeds keep their schedules).
		cfg.WindowBytes = int64(cfg.Window) * 40
	}
	// A backlog cache on two seeds in three: a large one, or one of a few
	// messages (not drawn from r either).
	cfg.CacheBytes = []int64{0, 1 << 30, 3*CacheOverhead + 120}[cfg.Window%3]
	cfg.RedeliveryMax = cfg.RedeliveryMin + int64(r.intn(int(51-cfg.RedeliveryMin)))
	cfg.RetryMax = cfg.RetryMin + int64(r.intn(60))
	if r.intn(3) == 0 {
		cfg.MaxMessages = 5 + r.intn(40)
	}
	if r.intn(3) == 0 {
		cfg.MaxBytes = 200 + int64(r.intn(2000))
	}
	dlq := cfg
	dlq.DeadLetter, dlq.ExpiredToDLQ, dlq.MaxMessages, dlq.MaxBytes = false, false, 0, 0
	s.failPct = []int{0, 3, 10, 25}[r.intn(4)]
	s.pageFailPct = []int{0, 10, 30}[r.intn(3)]
	s.rows = map[uint64]*simRow{}
	s.seen = map[uint64]int{}
	s.dispatched = map[uint64]bool{}
	s.everDisp = map[uint64]bool{}
	s.claimOp = map[uint64]bool{}
	s.ackedDone = map[uint64]bool{}
	s.movedRows = map[uint64]simRow{}
	s.cores[qMain] = New(cfg, uint64(r.intn(1<<30)))
	s.cores[qDLQ] = New(dlq, uint64(r.intn(1<<30)))
	s.resetVolatile()
	for q := range s.cores {
		s.cfg[q] = s.cores[q].Config()
		s.minMaxDel[q] = s.cfg[q].MaxDeliveries
		s.maxRedel[q] = s.cfg[q].RedeliveryMax
	}
	s.logf("start fail=%d%% pagefail=%d%%", s.failPct, s.pageFailPct)
}

// resetVolatile drops what does not survive a crash.
func (s *sim) resetVolatile() {
	s.pending, s.held = nil, nil
	s.purging = [2]*simPurge{}
	s.reqLoad = nil // the requeue ended with the broker
	s.applied = nil
	s.unseen = [2]simDelta{}
	s.movedRows = map[uint64]simRow{}
	s.page = [2]*simPage{}
	s.pf = [2]simPageFail{} // a new core has no run
	s.cons = nil
	s.conOf = map[*Consumer]*simCon{}
	s.wake = [2]int64{}
	s.lastClaim = map[uint64]int{}
	s.lastAttempt = map[uint64]int{}
	s.ackIntent = map[uint64]bool{}
	s.nackDLQ = map[uint64]bool{}
	for id, row := range s.rows {
		s.lastClaim[id] = s.count(row)
		s.lastAttempt[id] = s.count(row)
	}
}

// unfinished lists the batches submitted whose outcome the core has not
// heard yet: pending, held back, and applied but not yet reported.
func (s *sim) unfinished() []*simBatch {
	out := append(append([]*simBatch(nil), s.pending...), s.held...)
	out = append(out, s.outbox[0]...)
	out = append(out, s.outbox[1]...)
	for _, d := range s.applied {
		out = append(out, d.jb)
	}
	return out
}

// --- actions ------------------------------------------------------------

const (
	aEnqueue = iota
	aComplete
	aPage
	aSubscribe
	aUnsubscribe
	aAck
	aNack
	aWritten
	aStaleAck
	aTick
	aPurge
	aRequeue
	aTx
	aSubmitHeld
	aCrash
	aSettle
	aReport
	aCount
)

var simWeights = [aCount]int{
	aEnqueue: 22, aComplete: 16, aPage: 8, aSubscribe: 4, aUnsubscribe: 2, aAck: 12, aNack: 4,
	aWritten: 8, aStaleAck: 2, aTick: 10, aPurge: 1, aRequeue: 3, aTx: 3, aSubmitHeld: 4, aCrash: 1, aSettle: 1, aReport: 6,
}

func (s *sim) flushOutbox(q int) {
	for _, jb := range s.outbox[q] {
		s.logf("pump submits %s", jb.what)
		s.submit(jb)
	}
	s.outbox[q] = nil
}

func (s *sim) act() {
	if q := s.r.intn(2); len(s.outbox[q]) > 0 && s.r.intn(3) == 0 {
		s.flushOutbox(q)
		return
	}
	if s.reconfig && s.r.intn(40) == 0 {
		s.setConfig(s.pickQueue())
		return
	}
	total := 0
	for _, w := range simWeights {
		total += w
	}
	k := s.r.intn(total)
	a := 0
	for ; k >= simWeights[a]; a++ {
		k -= simWeights[a]
	}
	switch a {
	case aEnqueue:
		s.enqueue()
	case aComplete:
		if len(s.pending) > 0 {
			s.complete(1 + s.r.intn(len(s.pending)))
		}
	case aPage:
		s.answerPage(s.r.intn(2))
	case aSubscribe:
		s.subscribe(s.pickQueue())
	case aUnsubscribe:
		s.unsubscribe()
	case aAck:
		s.ack(false)
	case aNack:
		s.nack()
	case aWritten:
		s.written()
	case aStaleAck:
		s.staleAck()
	case aTick:
		s.tick()
	case aPurge:
		s.purge(s.pickQueue())
	case aRequeue:
		s.requeue()
	case aTx:
		s.ack(true)
	case aSubmitHeld:
		s.submitHeld()
	case aCrash:
		s.crash()
	case aSettle:
		s.settle()
		s.checkNoStall()
	case aReport:
		if len(s.applied) > 0 {
			s.report(1 + s.r.intn(len(s.applied)))
		}
	}
}

// setConfig reloads queue q's settings: window, limits, max_deliveries,
// back-off and expired_to_dlq drawn again (a dead-letter queue keeps no
// limits and never dead-letters, as the shell configures it).
func (s *sim) setConfig(q int) {
	r := s.r
	cfg := s.cfg[q]
	cfg.Window = 1 + r.intn(20)
	cfg.WindowBytes = 0
	if r.intn(2) == 0 {
		cfg.WindowBytes = int64(cfg.Window) * 40
	}
	cfg.CacheBytes = []int64{0, 1 << 30, 3*CacheOverhead + 120}[cfg.Window%3] // a lower bound evicts
	cfg.MaxDeliveries = r.intn(5)
	cfg.RedeliveryMin = int64(r.intn(21))
	cfg.RedeliveryMax = cfg.RedeliveryMin + int64(r.intn(int(51-cfg.RedeliveryMin)))
	if q == qMain {
		cfg.ExpiredToDLQ = r.intn(2) == 0
		cfg.MaxMessages, cfg.MaxBytes = 0, 0
		if r.intn(3) == 0 {
			cfg.MaxMessages = 5 + r.intn(40)
		}
		if r.intn(3) == 0 {
			cfg.MaxBytes = 200 + int64(r.intn(2000))
		}
	}
	s.logf("setconfig %s %+v", simQName[q], cfg)
	s.cores[q].SetConfig(cfg, s.now)
	// What the sim asked for (with New's defaults), not what the core
	// says it took: the checks hold the core to it.
	s.cfg[q] = normalize(cfg)
	if got := s.cores[q].Config(); got != s.cfg[q] {
		s.failf("%s: Config() after SetConfig is %+v, want %+v", simQName[q], got, s.cfg[q])
	}
	if md := s.cfg[q].MaxDeliveries; md > 0 && (s.minMaxDel[q] == 0 || md < s.minMaxDel[q]) {
		s.minMaxDel[q] = md
	}
	s.maxRedel[q] = max(s.maxRedel[q], s.cfg[q].RedeliveryMax)
	s.collect(q)
}

func (s *sim) pickQueue() int {
	if s.r.intn(5) == 0 {
		return qDLQ
	}
	return qMain
}

func (s *sim) newEnq() *simEnq {
	e := &simEnq{size: 1 + int64(s.r.intn(100)), group: simGroups[s.r.intn(len(simGroups))]}
	if s.r.intn(4) == 0 {
		e.nb = s.now + 1 + int64(s.r.intn(200))
	}
	if s.r.intn(5) == 0 {
		e.exp = s.now + 1 + int64(s.r.intn(300))
	}
	return e
}

// reserve asks the main core for room, checking that a refusal is due.
func (s *sim) reserve(e *simEnq) bool {
	ok, why := s.cores[qMain].Reserve(e.size)
	if ok {
		return true
	}
	// The journal as reported, plus enqueues not reported yet.
	n, bytes := s.recount(qMain)
	n, bytes = n-s.unseen[qMain].n, bytes-s.unseen[qMain].bytes
	for _, jb := range s.unfinished() {
		for _, p := range jb.parts {
			if p.enq != nil {
				n++
				bytes += p.enq.size
			}
		}
	}
	cfg := s.cfg[qMain]
	if !(cfg.MaxMessages > 0 && n >= cfg.MaxMessages) && !(cfg.MaxBytes > 0 && bytes+e.size > cfg.MaxBytes) {
		s.failf("Reserve(%d) refused (%s) with %d messages, %d bytes committed or pending", e.size, why, n, bytes)
	}
	s.logf("enqueue refused: %s", why)
	return false
}

func (s *sim) enqueue() {
	e := s.newEnq()
	if !s.reserve(e) {
		return
	}
	s.logf("enqueue size=%d group=%q nb=%d exp=%d", e.size, e.group, e.nb, e.exp)
	s.submit(&simBatch{parts: []simPart{{q: qMain, enq: e}}, what: "enqueue"})
}

func (s *sim) submit(jb *simBatch) { s.pending = append(s.pending, jb) }

func (s *sim) submitHeld() {
	if len(s.held) == 0 {
		return
	}
	i := s.r.intn(len(s.held))
	jb := s.held[i]
	s.held = append(s.held[:i], s.held[i+1:]...)
	if !s.settling && s.r.intn(5) == 0 {
		// The client aborts (or its connection drops): the batch never
		// reaches the journal and is reported failed.
		s.logf("abort held %s", jb.what)
		s.notify(jb, nil, errSimJournal)
		return
	}
	s.logf("submit held %s", jb.what)
	s.submit(jb)
}

func (s *sim) complete(n int) {
	for i := 0; i < n && len(s.pending) > 0; i++ {
		jb := s.pending[0]
		s.pending = s.pending[1:]
		d := &simDone{jb: jb}
		if !s.settling && s.chance(s.failPct) {
			s.st.failures++
			s.logf("journal FAILS %s", jb.what)
			d.err = errSimJournal
		} else {
			s.logf("journal commits %s", jb.what)
			var before [2]simDelta
			for q := range before {
				before[q].n, before[q].bytes = s.recount(q)
			}
			d.res = s.apply(jb)
			for q := range before {
				n, bytes := s.recount(q)
				d.delta[q] = simDelta{n - before[q].n, bytes - before[q].bytes}
				s.unseen[q].n += d.delta[q].n
				s.unseen[q].bytes += d.delta[q].bytes
			}
		}
		s.applied = append(s.applied, d)
		if s.settling || s.r.intn(3) != 0 {
			s.report(len(s.applied))
		}
	}
}

// report passes the outcomes of the first n applied batches to their cores.
func (s *sim) report(n int) {
	for i := 0; i < n && len(s.applied) > 0; i++ {
		d := s.applied[0]
		s.applied = s.applied[1:]
		for q := range d.delta {
			s.unseen[q].n -= d.delta[q].n
			s.unseen[q].bytes -= d.delta[q].bytes
		}
		s.logf("report %s: %v", d.jb.what, d.err)
		s.notify(d.jb, d.res, d.err)
	}
}

// apply applies a batch to the model journal atomically, validating every
// operation (invariant 1). It returns each part's result.
func (s *sim) apply(jb *simBatch) []any {
	out := make([]any, len(jb.parts))
	for i, p := range jb.parts {
		if p.enq != nil {
			s.nextID++
			row := &simRow{id: s.nextID, q: qMain, size: p.enq.size, group: p.enq.group, notBefore: p.enq.nb,
				expires: p.enq.exp, enqueued: s.now, prodNB: p.enq.nb}
			s.rows[row.id] = row
			s.lastClaim[row.id], s.lastAttempt[row.id] = 0, 0
			out[i] = *row
			s.st.enqueued++
			continue
		}
		out[i] = s.applyCore(p.q, p.b)
	}
	return out
}

func (s *sim) applyCore(q int, b *Batch) Result {
	res := Result{NewIDs: make([]uint64, len(b.Ops))}
	cfg := s.cfg[q]
	for i, op := range b.Ops {
		if op.Kind == OpPurge {
			// Like the SQL journal, a purge batch deletes the next rows of
			// its range in ID order, as many as it takes at once (here 1,
			// 2, 3 or all, from the range: s.r keeps the seeds' schedules),
			// and reports how far it got.
			if op.After > op.UpTo || op.After == op.UpTo && op.UpTo != 0 { // a queue that never held a message: up to 0
				s.failf("purge of %s after %d up to %d: an empty range", simQName[q], op.After, op.UpTo)
			}
			keep := map[uint64]bool{}
			for _, id := range op.Keep {
				if id <= op.After || id > op.UpTo {
					s.failf("purge of %s after %d up to %d keeps %d, outside its range", simQName[q], op.After, op.UpTo, id)
				}
				keep[id] = true
			}
			take := []int{1, 2, 3, 1 << 30}[(op.After+op.UpTo)%4]
			held := s.outstanding(q)
			res.PurgedTo = op.UpTo
			for _, id := range s.sortedIDs(q) {
				if id <= op.After || id > op.UpTo || keep[id] {
					continue
				}
				if res.Affected == take {
					res.PurgedTo = id - 1
					s.st.purgeParts++
					break
				}
				if held[id] != nil {
					s.failf("purge of %s deletes message %d, held by %s", simQName[q], id, s.conOf[held[id].C].name)
				}
				res.Affected++
				res.Bytes += s.rows[id].size
				delete(s.rows, id)
			}
			if p := s.purging[q]; p != nil {
				p.n += res.Affected
				p.bytes += res.Bytes
			}
			s.logf("  purge %s after %d up to %d keep %v: %d messages, to %d", simQName[q], op.After, op.UpTo, op.Keep, res.Affected, res.PurgedTo)
			continue
		}
		if op.Msg == nil {
			s.failf("op %d of batch %d of %s has no message", op.Kind, b.Seq, simQName[q])
		}
		id := op.Msg.ID
		row := s.rows[id]
		if row == nil && (op.Kind == OpRelease || op.Kind == OpClaim && !op.Mark) { // any claim row of a gone message is a no-op in SQL
			// A NACK's back-off only makes memory durable, and memory had
			// it at once: the message may have been redelivered and acked
			// before a held NACK batch commits. Like the SQL journal's
			// UPDATE, a release of a gone row does nothing. So does a row
			// of count 0 (place) for a message a pending purge deleted:
			// the SQL journal's claim joins the message's row.
			s.logf("  %s %d: gone", opName(op), id)
			continue
		}
		if row == nil || row.q != q {
			s.failf("op %s on message %d, which is not in %s (acked: %v)", opName(op), id, simQName[q], s.ackedDone[id])
		}
		if op.NoClaim && row.claimed && (op.Kind == OpDelete || op.Kind == OpDrop) {
			// The journal would skip the claims table and leave the row.
			s.failf("%s of message %d with NoClaim, which has a claim row (count %d)", opName(op), id, row.claim)
		}
		switch op.Kind {
		case OpDelete:
			if !s.ackIntent[id] {
				s.failf("OpDelete of message %d in %s, never acked nor written", id, simQName[q])
			}
			delete(s.rows, id)
			s.ackedDone[id] = true
			s.st.acked++
		case OpDrop:
			if row.expires == 0 || row.expires > s.now {
				s.failf("OpDrop of message %d that is not expired (expires %d)", id, row.expires)
			}
			delete(s.rows, id)
		case OpDeadLetter:
			if !cfg.DeadLetter {
				s.failf("OpDeadLetter of message %d out of %s, which never dead-letters", id, simQName[q])
			}
			switch op.Reason {
			case "nack":
				if !s.nackDLQ[id] {
					s.failf("OpDeadLetter(nack) of message %d never nacked with requeue=false", id)
				}
			case "max-deliveries":
				if n := max(s.count(row), s.lastAttempt[id]); s.minMaxDel[q] == 0 || n < s.minMaxDel[q] {
					s.failf("OpDeadLetter(max-deliveries) of message %d after %d deliveries (max %d, lowest ever %d)", id, n, cfg.MaxDeliveries, s.minMaxDel[q])
				}
			case "expired":
				if row.expires == 0 || row.expires > s.now {
					s.failf("OpDeadLetter(expired) of message %d that is not expired (expires %d)", id, row.expires)
				}
			default:
				s.failf("OpDeadLetter of message %d with reason %q", id, op.Reason)
			}
			res.NewIDs[i] = s.move(row, qDLQ)
			s.st.deadLettered++
		case OpMoveOut:
			if q != qDLQ || op.Target != "main" {
				s.failf("OpMoveOut of message %d from %s to %q", id, simQName[q], op.Target)
			}
			res.NewIDs[i] = s.move(row, qMain)
			s.st.moved++
		case OpClaim:
			if op.Deliveries < 0 {
				s.failf("OpClaim of message %d with count %d", id, op.Deliveries)
			}
			if op.Mark {
				s.raiseMark(q, row, op)
				s.st.marks++
				break
			}
			row.claim, row.claimed = op.Deliveries, true
			if op.Deliveries == 0 {
				s.st.pins++
			} else {
				s.st.rows++
			}
		case OpRelease:
			row.notBefore = op.NotBefore
		default:
			s.failf("unknown op kind %d", op.Kind)
		}
		s.logf("  %s %d -> %v", opName(op), id, res.NewIDs[i])
	}
	return res
}

func opName(op Op) string {
	switch op.Kind {
	case OpDelete:
		return "delete"
	case OpDrop:
		return "drop"
	case OpClaim:
		return fmt.Sprintf("claim(%d)", op.Deliveries)
	case OpRelease:
		return fmt.Sprintf("release(nb=%d)", op.NotBefore)
	case OpDeadLetter:
		return "deadletter(" + op.Reason + ")"
	case OpMoveOut:
		return "moveout(" + op.Target + ")"
	case OpPurge:
		return "purge"
	}
	return fmt.Sprintf("op%d", op.Kind)
}

// move is the journal's move: a new row in queue q, like the SQL journal's
// (not_before and expires cleared, deliveries reset).
func (s *sim) move(row *simRow, q int) uint64 {
	s.nextID++
	n := &simRow{id: s.nextID, q: q, size: row.size, group: row.group, enqueued: row.enqueued}
	delete(s.rows, row.id)
	s.rows[n.id] = n
	s.movedRows[n.id] = *n
	s.lastClaim[n.id], s.lastAttempt[n.id] = 0, 0
	return n.id
}

// raiseMark applies a mark claim of row (invariant 9).
func (s *sim) raiseMark(q int, row *simRow, op Op) {
	if op.Deliveries != 1 || row.claimed {
		s.failf("mark claim of message %d with count %d (claim row: %v)", row.id, op.Deliveries, row.claimed)
	}
	for id, x := range s.rows {
		if x.q == q && id <= row.id && !x.claimed && !s.everDisp[id] && !s.claimOp[id] {
			s.failf("%s's mark raised to %d covers message %d, never delivered nor given a row", simQName[q], row.id, id)
		}
	}
	s.mark[q] = max(s.mark[q], row.id)
}

// count is the journal's delivery count of row.
func (s *sim) count(row *simRow) int {
	if row.claimed {
		return row.claim
	}
	if row.id <= s.mark[row.q] {
		return 1
	}
	return 0
}

func (s *sim) msgOfRow(row *simRow) *Msg {
	n := s.count(row)
	return &Msg{ID: row.id, Size: row.size, Group: row.group, NotBefore: row.notBefore, Expires: row.expires,
		Enqueued: row.enqueued, Deliveries: n, Scheduled: n == 0 && row.notBefore > row.enqueued, ClaimRow: row.claimed}
}

// notify reports a batch's outcome to its parts, in order.
func (s *sim) notify(jb *simBatch, res []any, err error) {
	for i, p := range jb.parts {
		if p.enq != nil {
			if err != nil {
				s.cores[qMain].Unreserve(p.enq.size)
			} else {
				row := res[i].(simRow) // as committed
				s.logf("  committed enqueue %d group=%q", row.id, row.group)
				s.cores[qMain].Committed(s.msgOfRow(&row), true, s.now)
			}
			s.collect(qMain)
			continue
		}
		var r Result
		if err == nil {
			r = res[i].(Result)
		}
		s.cores[p.q].Done(p.b.Seq, r, err, s.now)
		s.collect(p.q)
	}
}

// answerPage reads the journal for q's page-in, or hands the core what an
// earlier read found (stale by now, maybe).
func (s *sim) answerPage(q int) {
	p := s.page[q]
	if p == nil {
		return
	}
	if !p.read {
		p.read = true
		s.st.pageIns++
		if !s.settling && s.chance(s.pageFailPct) {
			s.logf("page-in %s after %d FAILS", simQName[q], p.req.After)
			p.err = errSimJournal
		} else {
			// A rescan may load the parked group's messages only (as the
			// SQL journal does) or every message (both are allowed).
			var loaded int64
			onlyGroup := p.req.Group != "" && p.req.After%2 == 0 // not from s.r: the seeds keep their schedules
			for _, id := range s.sortedIDs(q) {
				if onlyGroup && s.rows[id].group != p.req.Group {
					continue
				}
				if id > p.req.After && len(p.msgs) < p.req.Limit && (p.req.MaxBytes <= 0 || loaded < p.req.MaxBytes) {
					p.msgs = append(p.msgs, s.msgOfRow(s.rows[id]))
					loaded += s.rows[id].size
				}
			}
			ids := make([]uint64, len(p.msgs))
			for i, m := range p.msgs {
				ids[i] = m.ID
			}
			s.logf("page-in %s after %d limit %d reads %v", simQName[q], p.req.After, p.req.Limit, ids)
		}
		if !s.settling && s.r.intn(2) == 0 {
			return // the answer reaches the core later
		}
	}
	s.page[q] = nil
	s.logf("page-in %s after %d answered", simQName[q], p.req.After)
	s.cores[q].Paged(p.req, p.msgs, p.err, s.now)
	f := &s.pf[q]
	if p.err != nil {
		if f.since == 0 {
			f.since, f.fails = s.now, 0
		}
		f.fails++
		f.err = p.err.Error()
		f.hits = s.cores[q].CacheHits
	} else if f.since != 0 {
		f.okRead = true
	}
	s.collect(q)
	if f.okRead {
		s.failf("%s: a page-in read the journal during a run of %d failed page-ins (since %d) and the run did not end", simQName[q], f.fails, f.since)
	}
}

// pageFailEvent checks an EvPageInFailed or EvPageInRecovered of q
// against the model, and ends the model's run at a recovery that the
// core's state justifies.
func (s *sim) pageFailEvent(q int, ev Event) {
	f := &s.pf[q]
	c := s.cores[q]
	if f.since == 0 {
		s.failf("%s: %v (since %d, %d failures) without a run of failed page-ins", simQName[q], ev.Kind, ev.Since, ev.Failures)
	}
	if ev.Since != f.since || ev.Failures != f.fails {
		s.failf("%s: event %v says a run since %d of %d failures; the model's started at %d with %d", simQName[q], ev.Kind, ev.Since, ev.Failures, f.since, f.fails)
	}
	if ev.Kind == EvPageInFailed {
		if ev.Err == nil || ev.Err.Error() != f.err {
			s.failf("%s: EvPageInFailed with error %v, the page-in failed with %q", simQName[q], ev.Err, f.err)
		}
		return
	}
	switch {
	case f.okRead:
		s.st.pfRead++
	case c.CacheHits > f.hits:
		s.st.pfCache++
	case !c.spilled && len(c.parked) == 0 && !c.paging:
		s.st.pfIdle++
	default:
		s.failf("%s: run of failed page-ins (since %d) ended (%s) with no page-in read, none answered from the cache, and the journal still to page in", simQName[q], f.since, ev.Reason)
	}
	s.logf("%s page-ins recovered after %d failures since %d (%s)", simQName[q], f.fails, f.since, ev.Reason)
	*f = simPageFail{}
}

// checkPageFail: the core reports the model's run of failed page-ins, and
// a run does not outlive its cause.
func (s *sim) checkPageFail(q int) {
	f := s.pf[q]
	c := s.cores[q]
	since, err, failing := c.PageInFailing()
	if failing != (f.since != 0) || since != f.since || err != f.err {
		s.failf("%s: PageInFailing() = %d %q %v; the model: a run since %d, last error %q", simQName[q], since, err, failing, f.since, f.err)
	}
	if !failing {
		return
	}
	if c.CacheHits > f.hits {
		s.failf("%s: a page-in was answered from the cache after the last failure and the run since %d goes on", simQName[q], since)
	}
	if !c.spilled && len(c.parked) == 0 && !c.paging {
		s.failf("%s: nothing left to page in and the run of failed page-ins since %d goes on", simQName[q], since)
	}
}

func (s *sim) sortedIDs(q int) []uint64 {
	var ids []uint64
	for id, row := range s.rows {
		if row.q == q {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (s *sim) subscribe(q int) *simCon {
	c := &Consumer{Prefetch: 1 + s.r.intn(5), Mode: AckMode(s.r.intn(3))}
	if c.Mode != AckAuto && s.r.intn(3) == 0 {
		c.AckTimeout = 20 + int64(s.r.intn(200))
	}
	if c.Prefetch == 5 {
		// A byte bound too (sizes are 1 to 100): often what stops it.
		c.MaxBytes = 120
	}
	return s.subscribeWith(q, c)
}

func (s *sim) subscribeWith(q int, c *Consumer) *simCon {
	s.nextCon++
	sc := &simCon{c: c, q: q, name: fmt.Sprintf("c%d", s.nextCon), at: map[*Delivery]int64{}}
	s.cons = append(s.cons, sc)
	s.conOf[c] = sc
	s.logf("subscribe %s to %s mode=%d prefetch=%d timeout=%d", sc.name, simQName[q], c.Mode, c.Prefetch, c.AckTimeout)
	s.cores[q].Subscribe(c, s.now)
	s.collect(q)
	return sc
}

func (s *sim) unsubscribe() {
	if len(s.cons) == 0 {
		return
	}
	i := s.r.intn(len(s.cons))
	sc := s.cons[i]
	s.cons = append(s.cons[:i], s.cons[i+1:]...)
	delete(s.conOf, sc.c)
	s.logf("unsubscribe %s (held %s)", sc.name, dids(sc.out))
	sc.out = nil
	s.cores[sc.q].Unsubscribe(sc.c, s.now)
	s.collect(sc.q)
}

func dids(ds []*Delivery) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range ds {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d#%d", d.Msg.ID, d.Attempt)
	}
	b.WriteByte(']')
	return b.String()
}

// pickCon picks a consumer for which ok holds.
func (s *sim) pickCon(ok func(*simCon) bool) *simCon {
	var c []*simCon
	for _, sc := range s.cons {
		if ok(sc) {
			c = append(c, sc)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[s.r.intn(len(c))]
}

// token picks a delivery of sc to ack or nack and what that covers.
func (s *sim) token(sc *simCon) (d *Delivery, covered []*Delivery, attempt int) {
	i := s.r.intn(len(sc.out))
	d = sc.out[i]
	if sc.c.Mode == AckClient {
		covered = append(covered, sc.out[:i+1]...)
	} else {
		covered = []*Delivery{d}
	}
	attempt = d.Attempt
	if s.r.intn(4) == 0 {
		attempt = 0
	}
	return d, covered, attempt
}

func (s *sim) resolve(sc *simCon, covered []*Delivery) {
	kept := sc.out[:0]
	for _, d := range sc.out {
		cov := false
		for _, x := range covered {
			cov = cov || x == d
		}
		if !cov {
			kept = append(kept, d)
		}
	}
	sc.out = kept
	for _, d := range covered {
		delete(sc.at, d)
	}
	sc.gone = append(sc.gone, covered...)
	if len(sc.gone) > 20 {
		sc.gone = sc.gone[len(sc.gone)-20:]
	}
}

// checkCovers checks that an ack or nack batch covers exactly the
// deliveries the client meant.
func (s *sim) checkCovers(b *Batch, covered []*Delivery, what string) {
	if b == nil {
		s.failf("%s returned no batch", what)
	}
	want := map[uint64]bool{}
	for _, d := range covered {
		want[d.Msg.ID] = true
	}
	got := map[uint64]bool{}
	for _, op := range b.Ops {
		if op.Msg == nil || !want[op.Msg.ID] || got[op.Msg.ID] {
			s.failf("%s: batch op %s on message %v, want exactly %s", what, opName(op), op.Msg, dids(covered))
		}
		got[op.Msg.ID] = true
	}
	if len(got) != len(want) {
		s.failf("%s: batch covers %d messages, want %s", what, len(got), dids(covered))
	}
}

// ack acks a client-mode delivery; tx puts an enqueue into the same batch.
func (s *sim) ack(tx bool) {
	sc := s.pickCon(func(sc *simCon) bool { return sc.c.Mode != AckAuto && len(sc.out) > 0 })
	if sc == nil {
		return
	}
	part, what := s.ackPart(sc)
	jb := &simBatch{parts: []simPart{part}, what: what}
	queues := []int{sc.q}
	if tx {
		if e := s.newEnq(); s.reserve(e) {
			s.logf("  in a transaction with enqueue size=%d group=%q", e.size, e.group)
			jb.parts = append([]simPart{{q: qMain, enq: e}}, jb.parts...)
			jb.what = "tx: enqueue + " + jb.what
		}
		// Sometimes with an ack of another subscription (of either queue).
		if sc2 := s.pickCon(func(x *simCon) bool { return x != sc && x.c.Mode != AckAuto && len(x.out) > 0 }); sc2 != nil && s.r.intn(2) == 0 {
			part2, what2 := s.ackPart(sc2)
			jb.parts = append(jb.parts, part2)
			jb.what += " + " + what2
			queues = append(queues, sc2.q)
		}
	}
	s.submitOrHold(jb)
	for _, q := range queues {
		s.collect(q)
	}
}

// ackPart acks a delivery of sc and returns the batch as a journal part.
// Half the time it acks several through AckMany, as a session does with the
// ACK frames of one read, sometimes with a stale token among them.
func (s *sim) ackPart(sc *simCon) (simPart, string) {
	if s.r.intn(2) == 0 {
		return s.ackManyPart(sc)
	}
	d, covered, attempt := s.token(sc)
	what := fmt.Sprintf("%s ack %d#%d (attempt %d) covering %s", sc.name, d.Msg.ID, d.Attempt, attempt, dids(covered))
	b, stale := s.cores[sc.q].Ack(sc.c, d.Msg.ID, attempt, s.now)
	s.logf("%s", what)
	if stale {
		s.failf("%s: stale", what)
	}
	s.checkCovers(b, covered, what)
	for _, x := range covered {
		s.ackIntent[x.Msg.ID] = true
	}
	s.resolve(sc, covered)
	s.markOps(sc.q, b)
	return simPart{q: sc.q, b: b}, what
}

// ackManyPart acks 1 to 4 deliveries of sc with one AckMany (the first
// token always names a held delivery).
func (s *sim) ackManyPart(sc *simCon) (simPart, string) {
	var toks []AckToken
	var all []*Delivery
	what := sc.name + " ack-many"
	wantStale := 0
	for k := 1 + s.r.intn(4); k > 0 && len(sc.out) > 0; k-- {
		if len(all) > 0 && len(sc.gone) > 0 && s.r.intn(4) == 0 {
			g := sc.gone[s.r.intn(len(sc.gone))]
			held := false
			for _, d := range sc.out {
				held = held || (d.Msg.ID == g.Msg.ID && d.Attempt == g.Attempt)
			}
			if !held {
				toks = append(toks, AckToken{ID: g.Msg.ID, Attempt: g.Attempt})
				what += fmt.Sprintf(" stale %d#%d", g.Msg.ID, g.Attempt)
				wantStale++
				continue
			}
		}
		d, covered, attempt := s.token(sc)
		toks = append(toks, AckToken{ID: d.Msg.ID, Attempt: attempt})
		what += fmt.Sprintf(" %d#%d (attempt %d) covering %s", d.Msg.ID, d.Attempt, attempt, dids(covered))
		all = append(all, covered...)
		s.resolve(sc, covered)
	}
	b, stale := s.cores[sc.q].AckMany(sc.c, toks, s.now)
	s.logf("%s", what)
	if stale != wantStale {
		s.failf("%s: %d stale, want %d", what, stale, wantStale)
	}
	s.checkCovers(b, all, what)
	for _, x := range all {
		s.ackIntent[x.Msg.ID] = true
	}
	s.markOps(sc.q, b)
	return simPart{q: sc.q, b: b}, what
}

func (s *sim) submitOrHold(jb *simBatch) {
	if s.r.intn(4) == 0 {
		s.logf("  held")
		s.held = append(s.held, jb)
		return
	}
	s.submit(jb)
}

func (s *sim) nack() {
	sc := s.pickCon(func(sc *simCon) bool { return sc.c.Mode != AckAuto && len(sc.out) > 0 })
	if sc == nil {
		return
	}
	d, covered, attempt := s.token(sc)
	requeue := s.r.intn(2) == 0
	what := fmt.Sprintf("%s nack requeue=%v %d#%d (attempt %d) covering %s", sc.name, requeue, d.Msg.ID, d.Attempt, attempt, dids(covered))
	b, stale := s.cores[sc.q].Nack(sc.c, d.Msg.ID, attempt, requeue, s.now)
	s.logf("%s", what)
	if stale {
		s.failf("%s: stale", what)
	}
	s.checkCovers(b, covered, what)
	if !requeue {
		for _, x := range covered {
			s.nackDLQ[x.Msg.ID] = true
		}
	}
	s.resolve(sc, covered)
	s.markOps(sc.q, b)
	s.submitOrHold(&simBatch{parts: []simPart{{q: sc.q, b: b}}, what: what})
	s.collect(sc.q)
}

func (s *sim) written() {
	sc := s.pickCon(func(sc *simCon) bool { return sc.c.Mode == AckAuto && len(sc.out) > 0 })
	if sc == nil {
		return
	}
	ds := append([]*Delivery(nil), sc.out[:1+s.r.intn(len(sc.out))]...)
	for _, d := range ds {
		s.ackIntent[d.Msg.ID] = true
	}
	s.resolve(sc, ds)
	if len(sc.gone) > len(ds) && s.r.intn(4) == 0 {
		ds = append(ds, sc.gone[0]) // written twice: ignored
	}
	s.logf("%s written %s", sc.name, dids(ds))
	s.cores[sc.q].Written(ds, s.now)
	s.collect(sc.q)
}

func (s *sim) staleAck() {
	sc := s.pickCon(func(sc *simCon) bool { return sc.c.Mode != AckAuto && len(sc.gone) > 0 })
	if sc == nil {
		return
	}
	g := sc.gone[s.r.intn(len(sc.gone))]
	for _, d := range sc.out {
		if d.Msg.ID == g.Msg.ID && d.Attempt == g.Attempt {
			return
		}
	}
	nack := s.r.intn(2) == 0
	s.logf("%s stale ack/nack(%v) %d#%d", sc.name, nack, g.Msg.ID, g.Attempt)
	var b *Batch
	var stale bool
	if nack {
		b, stale = s.cores[sc.q].Nack(sc.c, g.Msg.ID, g.Attempt, true, s.now)
	} else {
		b, stale = s.cores[sc.q].Ack(sc.c, g.Msg.ID, g.Attempt, s.now)
	}
	if !stale || b != nil {
		s.failf("ack of %d#%d, no longer held by %s, not stale", g.Msg.ID, g.Attempt, sc.name)
	}
	s.collect(sc.q)
}

func (s *sim) tick() {
	switch s.r.intn(3) {
	case 0:
		w := int64(0)
		for _, x := range s.wake {
			if x > s.now && (w == 0 || x < w) {
				w = x
			}
		}
		if w > 0 && w < s.now+1000 {
			s.now = w
			break
		}
		fallthrough
	default:
		s.now += 1 + int64(s.r.intn(40))
	}
	s.logf("tick")
	for q := range s.cores {
		s.tickCore(q)
	}
}

// tickCore ticks core q. Right after a Tick the core may not ask for
// another at or before now: the shell's timer would spin.
func (s *sim) tickCore(q int) {
	s.cores[q].Tick(s.now)
	s.collect(q)
	if w := s.wake[q]; w != 0 && w <= s.now {
		s.failf("%s asks for a tick at %d right after a tick at %d (the shell's timer would spin)", simQName[q], w, s.now)
	}
}

// simPurge is a purge the sim started: its range and what its batches
// deleted so far.
type simPurge struct {
	upTo  uint64
	keep  map[uint64]bool
	n     int
	bytes int64
}

func (s *sim) purge(q int) {
	b := s.cores[q].Purge(s.now)
	s.logf("purge %s: %v", simQName[q], b != nil)
	if (b != nil) == (s.purging[q] != nil) {
		s.failf("purge of %s: started %v while one runs %v", simQName[q], b != nil, s.purging[q] != nil)
	}
	if b != nil {
		s.st.purges++
		p := &simPurge{upTo: b.Ops[0].UpTo, keep: map[uint64]bool{}}
		for _, id := range b.Ops[0].Keep {
			p.keep[id] = true
		}
		s.purging[q] = p
		s.submit(&simBatch{parts: []simPart{{q: q, b: b}}, what: "purge " + simQName[q]})
	}
	s.collect(q)
}

// purged checks the end of q's purge: it reports what its batches deleted
// and, unless one failed, nothing of its range is left but what it kept.
func (s *sim) purged(q int, ev Event) {
	p := s.purging[q]
	s.purging[q] = nil
	if p == nil {
		s.failf("%s reports a purge that was not running", simQName[q])
	}
	s.logf("%s purge ended: %d messages, %d bytes, %v", simQName[q], ev.Count, ev.Bytes, ev.Err)
	if ev.Count != p.n || ev.Bytes != p.bytes {
		s.failf("%s purge reports %d messages (%d bytes); its batches deleted %d (%d bytes)", simQName[q], ev.Count, ev.Bytes, p.n, p.bytes)
	}
	if ev.Err != nil {
		return
	}
	for _, id := range s.sortedIDs(q) {
		if id <= p.upTo && !p.keep[id] {
			s.failf("%s purge up to %d ended, and message %d is still there", simQName[q], p.upTo, id)
		}
	}
}

// simReqLoad is a requeue's read of the DLQ: what it read, after which
// cursor, and the core's ReadEpoch before it.
type simReqLoad struct {
	msgs  []*Msg
	from  uint64
	epoch uint64
}

// requeue moves messages of the DLQ, loaded from the journal after a
// cursor, back to the main queue. Half the reads are moved at a later
// requeue step, with whatever commits in between (purges).
func (s *sim) requeue() {
	ld := s.reqLoad
	s.reqLoad = nil
	if ld == nil {
		ld = &simReqLoad{from: s.reqCursor, epoch: s.cores[qDLQ].ReadEpoch()}
		limit := 1 + s.r.intn(5)
		for _, id := range s.sortedIDs(qDLQ) {
			if id > s.reqCursor && len(ld.msgs) < limit {
				ld.msgs = append(ld.msgs, s.msgOfRow(s.rows[id]))
			}
		}
		if len(ld.msgs) == 0 {
			s.reqCursor = 0
			return
		}
		s.reqCursor = ld.msgs[len(ld.msgs)-1].ID
		if s.r.intn(2) == 0 {
			s.reqLoad = ld
			s.logf("requeue reads %d..%d", ld.msgs[0].ID, s.reqCursor)
			return
		}
	}
	msgs := ld.msgs
	b, stale := s.cores[qDLQ].MoveOut(msgs, "main", s.now, ld.epoch)
	if stale {
		s.st.staleRequeues++
		s.reqCursor = ld.from // read again
		s.logf("requeue %d..%d: read before a purge committed", msgs[0].ID, msgs[len(msgs)-1].ID)
		return
	}
	s.logf("requeue %d..%d: %v", msgs[0].ID, msgs[len(msgs)-1].ID, b != nil)
	if b != nil {
		for i, op := range b.Ops {
			pin := op.Kind == OpClaim && op.Deliveries == 0 && !op.Mark && i+1 < len(b.Ops) && b.Ops[i+1].Msg == op.Msg
			if !pin && (op.Kind != OpMoveOut || op.Target != "main") {
				s.failf("MoveOut batch holds %s", opName(op))
			}
		}
		s.markOps(qDLQ, b)
		s.submit(&simBatch{parts: []simPart{{q: qDLQ, b: b}}, what: "requeue"})
	}
	s.collect(qDLQ)
}

func (s *sim) crash() {
	s.st.crashes++
	for id, row := range s.rows {
		if n := s.count(row); n < s.seen[id] {
			s.failf("CRASH: the journal counts %d deliveries of message %d, a client received attempt %d (mark %d, claim row %v=%d)", n, id, s.seen[id], s.mark[row.q], row.claimed, row.claim)
		}
	}
	s.outbox = [2][]*simBatch{}
	s.logf("CRASH (dropping %d pending, %d held batches, %d unreported)", len(s.pending), len(s.held), len(s.applied))
	s.resetVolatile()
	for q := range s.cores {
		s.st.cacheHits += int(s.cores[q].CacheHits)
		s.cores[q] = New(s.cfg[q], uint64(s.r.intn(1<<30)))
		n, bytes := s.recount(q)
		var maxID uint64
		for id, row := range s.rows {
			if row.q == q {
				maxID = max(maxID, id)
			}
		}
		s.cores[q].Recover(n, bytes, maxID, s.mark[q], s.now)
		s.collect(q)
	}
}

// --- outputs ------------------------------------------------------------

// markOps records the ops of a batch the caller got directly.
func (s *sim) markOps(q int, b *Batch) {
	for _, op := range b.Ops {
		if op.Kind == OpClaim && !op.Mark {
			s.claimOp[op.Msg.ID] = true
		}
		if op.Msg != nil && !(op.Kind == OpClaim && op.Deliveries == 0) {
			s.dispatched[op.Msg.ID] = true
		}
	}
}

type simDisp struct {
	m        *Msg
	list     int // 0: batch ops, 1: auto-ack deliveries
	pos      int
	dispatch bool
}

// collect takes a core's outputs and plays the shell's part.
func (s *sim) collect(q int) {
	o := s.cores[q].Take()
	s.wake[q] = o.Wake

	// Dispatches: OpClaim ops (not reverts) and auto-ack deliveries.
	// Within one output the order of the two lists is lost; within each
	// list it is the dispatch order.
	var evs []simDisp
	for _, b := range o.Batches {
		for _, op := range b.Ops {
			if op.Kind == OpClaim && !op.Mark {
				s.claimOp[op.Msg.ID] = true
			}
			if op.Msg == nil || op.Kind == OpClaim && op.Deliveries == 0 {
				continue // rows of count 0 (place, reverts) dispatch nothing
			}
			disp := op.Kind == OpClaim && op.Deliveries > 0 && op.Deliveries >= s.lastClaim[op.Msg.ID]
			if disp {
				s.everDisp[op.Msg.ID] = true
			}
			evs = append(evs, simDisp{m: op.Msg, list: 0, pos: len(evs), dispatch: disp})
			if op.Kind == OpClaim {
				s.lastClaim[op.Msg.ID] = max(s.lastClaim[op.Msg.ID], op.Deliveries)
			}
		}
	}
	for _, d := range o.Deliver {
		if d.C.Mode == AckAuto {
			s.everDisp[d.Msg.ID] = true
			evs = append(evs, simDisp{m: d.Msg, list: 1, pos: len(evs), dispatch: true})
		}
	}
	first := map[uint64]simDisp{}
	for _, e := range evs {
		if _, ok := first[e.m.ID]; !ok {
			first[e.m.ID] = e
		}
	}
	for _, e := range evs {
		if e.dispatch {
			s.checkFIFO(q, e, first)
		}
	}
	for _, e := range evs {
		s.dispatched[e.m.ID] = true
	}
	for _, b := range o.Batches {
		what := simQName[q] + " batch"
		for _, op := range b.Ops {
			if op.Msg != nil {
				what += fmt.Sprintf(" %s:%d", opName(op), op.Msg.ID)
			} else {
				what += " " + opName(op)
			}
		}
		s.logf("%s emits %s", simQName[q], what)
		jb := &simBatch{parts: []simPart{{q: q, b: b}}, what: what}
		if len(s.outbox[q]) > 0 || (!s.settling && s.r.intn(3) == 0) {
			s.outbox[q] = append(s.outbox[q], jb) // the pump submits it later
		} else {
			s.submit(jb)
		}
	}

	for _, d := range o.Deliver {
		s.deliver(q, d)
	}
	for _, ev := range o.Events {
		if ev.Kind == EvOutOfOrder {
			s.failf("%s: %s", simQName[q], ev.Reason)
		}
		if ev.Kind == EvPageInFailed || ev.Kind == EvPageInRecovered {
			s.pageFailEvent(q, ev)
			continue
		}
		if ev.Kind == EvPurged {
			s.purged(q, ev)
			continue
		}
		if ev.Kind != EvAckTimeout {
			continue
		}
		var found *simCon
		var idx int
		for _, sc := range s.cons {
			if sc.q != q || sc.c.Mode == AckAuto {
				continue
			}
			for i, d := range sc.out {
				if d.Msg.ID == ev.ID {
					if found != nil {
						s.failf("ack timeout of %d: held by %s and %s", ev.ID, found.name, sc.name)
					}
					found, idx = sc, i
				}
			}
		}
		if found == nil {
			s.failf("ack timeout of message %d, which no client holds", ev.ID)
		}
		s.logf("%s ack timeout %d#%d", found.name, ev.ID, found.out[idx].Attempt)
		s.resolve(found, []*Delivery{found.out[idx]})
	}
	if o.PageIn != nil {
		if s.page[q] != nil {
			s.failf("%s asks a page-in while one is outstanding", simQName[q])
		}
		s.page[q] = &simPage{req: o.PageIn}
		if o.PageIn.scan {
			s.st.parks++ // a rescan of a parked group
		}
		s.logf("%s asks page-in after %d limit %d", simQName[q], o.PageIn.After, o.PageIn.Limit)
	}
	for _, mv := range o.Moved {
		t := qDLQ
		if mv.Queue != "" {
			if mv.Queue != "main" {
				s.failf("moved to unknown queue %q", mv.Queue)
			}
			t = qMain
		}
		row, ok := s.movedRows[mv.NewID]
		if !ok || row.q != t {
			s.failf("Moved %d -> %d: no such move into %s", mv.Msg.ID, mv.NewID, simQName[t])
		}
		delete(s.movedRows, mv.NewID)
		s.logf("  %s Committed moved %d (was %d)", simQName[t], mv.NewID, mv.Msg.ID)
		s.cores[t].Committed(s.msgOfRow(&row), false, s.now)
		s.collect(t)
	}
}

func (s *sim) deliver(q int, d *Delivery) {
	sc := s.conOf[d.C]
	id := d.Msg.ID
	if sc == nil || sc.q != q {
		s.failf("delivery %d#%d to a consumer not subscribed to %s", id, d.Attempt, simQName[q])
	}
	row := s.rows[id]
	if row == nil || row.q != q {
		if s.ackedDone[id] {
			s.failf("message %d delivered again (attempt %d) after its ack committed", id, d.Attempt)
		}
		s.failf("message %d delivered (attempt %d) but not in %s", id, d.Attempt, simQName[q])
	}
	if d.Attempt <= s.lastAttempt[id] {
		s.failf("message %d delivered with attempt %d after attempt %d", id, d.Attempt, s.lastAttempt[id])
	}
	s.lastAttempt[id] = d.Attempt
	// A new delivery: acks and nacks of earlier ones failed. A delete or
	// dead-letter ("nack") needs one of this delivery now.
	delete(s.ackIntent, id)
	delete(s.nackDLQ, id)
	if d.C.Mode != AckAuto {
		s.seen[id] = max(s.seen[id], d.Attempt)
	}
	if d.C.Mode != AckAuto && s.count(row) < d.Attempt {
		s.failf("message %d delivered (client ack) with attempt %d but the journal counts %d", id, d.Attempt, s.count(row))
	}
	s.st.delivered++
	sc.out = append(sc.out, d)
	sc.at[d] = s.now
	s.logf("%s receives %d#%d group=%q", sc.name, id, d.Attempt, d.Msg.Group)
}

// checkFIFO checks invariant 4 for a dispatch of e.m.
func (s *sim) checkFIFO(q int, e simDisp, first map[uint64]simDisp) {
	m := e.m
	for id, x := range s.rows {
		if x.q != q || id >= m.ID {
			continue
		}
		before := s.dispatched[id]
		if f, ok := first[id]; ok && f.list == e.list && f.pos < e.pos {
			before = true
		}
		if !before {
			if f, ok := first[id]; ok && f.list != e.list {
				continue // dispatched in the same call, order unknown
			}
			if x.prodNB <= s.now && (x.group == "" || x.group == m.Group) {
				s.failf("FIFO: %s dispatches %d (group %q) before %d (group %q), never dispatched and due", simQName[q], m.ID, m.Group, id, x.group)
			}
		} else if m.Group != "" && x.group == m.Group {
			s.failf("group order: %s dispatches %d of group %q while %d of that group, dispatched before, is still in the queue", simQName[q], m.ID, m.Group, id)
		}
	}
}

// --- invariants ---------------------------------------------------------

func (s *sim) recount(q int) (int, int64) {
	n, bytes := 0, int64(0)
	for _, row := range s.rows {
		if row.q == q {
			n++
			bytes += row.size
		}
	}
	return n, bytes
}

// outstanding is what clients of q hold, by message.
func (s *sim) outstanding(q int) map[uint64]*Delivery {
	out := map[uint64]*Delivery{}
	for _, sc := range s.cons {
		if sc.q != q {
			continue
		}
		for _, d := range sc.out {
			if out[d.Msg.ID] != nil {
				s.failf("message %d held twice: %s and %s", d.Msg.ID, s.conOf[out[d.Msg.ID].C].name, sc.name)
			}
			out[d.Msg.ID] = d
		}
	}
	return out
}

// capWindow lowers or restores the main queue's byte window now and then,
// as the broker does while its memory budget is short (not drawn from r:
// the seeds keep their schedules).
func (s *sim) capWindow() {
	c := []int64{0, 1, 60, 200, 0, 5000}[(s.step/37)%6]
	s.logf("window cap %d", c)
	s.cores[qMain].SetWindowCap(c, s.now)
	s.collect(qMain)
	// The backlog cache's cap, on both queues, in another rhythm.
	cc := []int64{noCacheCap, 0, 2*CacheOverhead + 80, noCacheCap, 6 * CacheOverhead}[(s.step/37)%5]
	s.logf("cache cap %d", cc)
	for q := range s.cores {
		s.cores[q].SetCacheCap(cc)
		s.collect(q)
	}
}

// checkCache checks q's backlog cache against the model journal: every
// cached message is the journal's row as it is now (a stale copy would be
// delivered with a wrong count, or after its purge), above memTail, in
// ID order, within the bounds; and no reported row in the range it
// stands for is missing (a page-in answered from it would skip the row).
func (s *sim) checkCache(q int) {
	c := s.cores[q]
	var weight int64
	cached := map[uint64]bool{}
	from := max(c.memTail, c.cacheFrom)
	prev := from
	for _, m := range c.cache[c.cacheHead:] {
		weight += m.Size + CacheOverhead
		if m.ID <= prev {
			s.failf("%s caches %d after %d (memTail %d, from %d)", simQName[q], m.ID, prev, c.memTail, c.cacheFrom)
		}
		prev = m.ID
		cached[m.ID] = true
		row := s.rows[m.ID]
		if (row == nil || row.q != q) && c.purgeTakes(m.ID) {
			continue // purged, not reported yet: purgeDone drops it
		}
		if row == nil || row.q != q {
			s.failf("%s caches message %d, which the journal no longer holds there", simQName[q], m.ID)
		}
		if row.claimed != m.ClaimRow || s.count(row) != m.Deliveries || row.size != m.Size || row.group != m.Group ||
			row.notBefore != m.NotBefore || row.expires != m.Expires || row.enqueued != m.Enqueued {
			s.failf("%s caches a stale copy of message %d: %+v, journal %+v (count %d)", simQName[q], m.ID, *m, *row, s.count(row))
		}
		if c.byID[m.ID] != nil {
			s.failf("%s caches message %d and holds it too", simQName[q], m.ID)
		}
	}
	if weight != c.cacheBytes {
		s.failf("%s counts %d bytes cached, holds %d", simQName[q], c.cacheBytes, weight)
	}
	if weight > c.cacheLimit() {
		s.failf("%s caches %d bytes, bound %d", simQName[q], weight, c.cacheLimit())
	}
	if !c.spilled && (!c.cacheAll || len(cached) > 0) {
		s.failf("%s is not spilled but its cache holds %d (all %v)", simQName[q], len(cached), c.cacheAll)
	}
	hi := prev
	if c.cacheAll {
		hi = max(hi, c.lastID)
	}
	for id, row := range s.rows {
		if row.q == q && id > from && id <= hi && !cached[id] && c.byID[id] == nil && !c.isGone(id) {
			s.failf("%s's cache stands for the journal from %d up to %d (all %v) but misses message %d (memTail %d)", simQName[q], from, hi, c.cacheAll, id, c.memTail)
		}
	}
}

func (s *sim) check() {
	for q := range s.cores {
		// The memory the core reports is what it holds.
		inMem := int64(0)
		for _, m := range s.cores[q].byID {
			inMem += m.Size
		}
		if mb := s.cores[q].MemBytes(); mb != inMem {
			s.failf("%s reports %d bytes in memory, holds %d", simQName[q], mb, inMem)
		}
		delayed := int64(0)
		for _, m := range s.cores[q].delayed {
			delayed += m.Size
		}
		if db := s.cores[q].delayedBytes; db != delayed {
			s.failf("%s counts %d bytes delayed, holds %d", simQName[q], db, delayed)
		}
		s.checkCache(q)
		s.checkPageFail(q)
		// 8: counts match the journal.
		// Batches applied but not reported yet are not the core's to know.
		n, bytes := s.recount(q)
		n, bytes = n-s.unseen[q].n, bytes-s.unseen[q].bytes
		snap := s.cores[q].Snapshot()
		if snap.Count != n || snap.Bytes != bytes {
			s.failf("%s counts %d messages, %d bytes; the journal holds %d, %d (reported)", simQName[q], snap.Count, snap.Bytes, n, bytes)
		}
		// 9: with nothing of q outstanding, the journal counts no more
		// deliveries than the core for what it holds undelivered.
		if s.quiet(q) {
			if n := s.cores[q].pinsOut; n != 0 {
				s.failf("%s counts %d rows of count 0 outstanding with none in the journal's hands", simQName[q], n)
			}
			for id, m := range s.cores[q].byID {
				if m.state != stReady && m.state != stDelayed && m.state != stParked {
					continue
				}
				// (A claim row's count may stay above the core's when the
				// revert of an abandoned delivery failed: that one is not
				// retried, and the row keeps the count of the claim that
				// went through, until the message's next claim replaces it.
				// The mark must add no such excess.)
				if row := s.rows[id]; row != nil && !row.claimed && s.count(row) > m.Deliveries {
					s.failf("%s: the journal counts %d deliveries of message %d, the core %d (mark %d, claim row %v)", simQName[q], s.count(row), id, m.Deliveries, s.mark[q], row.claimed)
				}
			}
		}
		// 7: prefetch; and the core agrees on who holds what.
		subs := 0
		for _, sc := range s.cons {
			if sc.q != q {
				continue
			}
			subs++
			if len(sc.out) > sc.c.Prefetch || sc.c.InFlight() > sc.c.Prefetch {
				s.failf("%s holds %d (core: %d), prefetch %d", sc.name, len(sc.out), sc.c.InFlight(), sc.c.Prefetch)
			}
			var held, last int64
			for _, d := range sc.c.inflight {
				held += d.Msg.Size
				last = d.Msg.Size
			}
			if held != sc.c.inflightBytes {
				s.failf("%s: the core counts %d bytes in flight, its deliveries weigh %d", sc.name, sc.c.inflightBytes, held)
			}
			if sc.c.MaxBytes > 0 && held-last >= sc.c.MaxBytes {
				s.failf("%s holds %d bytes, %d before its last delivery, max_bytes %d", sc.name, held, held-last, sc.c.MaxBytes)
			}
			for _, d := range sc.out {
				if !s.cores[q].Holds(sc.c, d.Msg.ID) {
					s.failf("%s holds %d#%d, the core says it does not", sc.name, d.Msg.ID, d.Attempt)
				}
			}
		}
		if n := s.cores[q].Consumers(); n != subs {
			s.failf("%s counts %d consumers, %d subscribed", simQName[q], n, subs)
		}
		// 3: one outstanding message per group (held by a client, or its
		// ack's commit pending).
		held := map[string]map[uint64]bool{}
		add := func(id uint64, g string) {
			if g == "" {
				return
			}
			if held[g] == nil {
				held[g] = map[uint64]bool{}
			}
			held[g][id] = true
			if len(held[g]) > 1 {
				var ids []uint64
				for x := range held[g] {
					ids = append(ids, x)
				}
				sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
				s.failf("group %q of %s has %v outstanding", g, simQName[q], ids)
			}
		}
		for id, d := range s.outstanding(q) {
			add(id, d.Msg.Group)
		}
		for _, jb := range s.unfinished() {
			for _, p := range jb.parts {
				if p.b == nil || p.q != q {
					continue
				}
				for _, op := range p.b.Ops {
					if op.Kind == OpDelete {
						add(op.Msg.ID, op.Msg.Group)
					}
				}
			}
		}
	}
}

// quiet reports whether q has no journal work outstanding: no batch
// unfinished, none to write again.
func (s *sim) quiet(q int) bool {
	if len(s.cores[q].repin) > 0 || len(s.cores[q].work.ops) > 0 {
		return false
	}
	for _, jb := range s.unfinished() {
		for _, p := range jb.parts {
			if p.b != nil && p.q == q {
				return false
			}
		}
	}
	return true
}

// settle runs without failures past every back-off until nothing moves.
func (s *sim) settle() {
	s.st.settles++
	s.settling = true
	defer func() { s.settling = false }()
	adv := int64(1)
	for q, c := range s.cfg {
		adv = max(adv, max(c.RedeliveryMax, s.maxRedel[q])*5/4+1, c.RetryMax+1)
	}
	// Two rounds: failures that happened before the settle but reach the
	// core during the first (stale page-in errors, unreported batches)
	// start back-offs that the second waits out.
	for round := 0; round < 2; round++ {
		s.now += adv
		s.logf("settle")
		s.settleRound()
	}
}

func (s *sim) settleRound() {
	for i := 0; ; i++ {
		if i > 10000 {
			s.failf("settle does not converge")
		}
		// Ticks only when a core asked for one (Wake), as the shell's
		// timer does: a forgotten Wake shows as a stall.
		for q := range s.cores {
			if w := s.wake[q]; w != 0 && w <= s.now {
				s.tickCore(q)
			}
		}
		progress := false
		for q := range s.outbox {
			if len(s.outbox[q]) > 0 {
				s.flushOutbox(q)
				progress = true
			}
		}
		for len(s.held) > 0 {
			s.submitHeld()
			progress = true
		}
		if len(s.pending) > 0 {
			s.complete(len(s.pending))
			progress = true
		}
		if len(s.applied) > 0 {
			s.report(len(s.applied))
			progress = true
		}
		for q := range s.cores {
			if s.page[q] != nil {
				s.answerPage(q)
				progress = true
			}
		}
		s.check()
		if !progress {
			return
		}
	}
}

// checkNoStall (invariant 5, after settle): no consumer with credit while
// a message is deliverable.
func (s *sim) checkNoStall() {
	// Ack timeouts fire (settle ticks only at Wake).
	for _, sc := range s.cons {
		if sc.c.Mode == AckAuto || sc.c.AckTimeout == 0 {
			continue
		}
		for _, d := range sc.out {
			if at := sc.at[d]; at+sc.c.AckTimeout < s.now {
				s.failf("%s holds %d#%d since %d: ack timeout %d ms missed", sc.name, d.Msg.ID, d.Attempt, at, sc.c.AckTimeout)
			}
		}
	}
	for q := range s.cores {
		if c := s.cores[q]; c.windowCap > 0 && c.capRoom() < 1 && c.cfg.WindowBytes > 0 && c.delayedBytes >= c.cfg.WindowBytes {
			// Allowed: under a window cap (the broker's memory budget is
			// short), paging stops once delayed messages fill the byte
			// window; it resumes when the cap is lifted or they are due.
			continue
		}
		out := s.outstanding(q)
		groups := map[string]bool{}
		for _, d := range out {
			groups[d.Msg.Group] = true
		}
		for _, sc := range s.cons {
			if sc.q != q || len(sc.out) >= sc.c.Prefetch {
				continue
			}
			var held int64
			for _, d := range sc.out {
				held += d.Msg.Size
			}
			if sc.c.MaxBytes > 0 && len(sc.out) > 0 && held >= sc.c.MaxBytes {
				continue // full in bytes
			}
			for _, id := range s.sortedIDs(q) {
				x := s.rows[id]
				if out[id] != nil || x.prodNB > s.now || (x.expires != 0 && x.expires <= s.now) || (x.group != "" && groups[x.group]) {
					continue
				}
				s.failf("stall: %s has credit (%d/%d) but message %d (group %q) of %s is deliverable; core %+v\n%s",
					sc.name, len(sc.out), sc.c.Prefetch, id, x.group, simQName[q], s.cores[q].Snapshot(), s.coreState(q))
			}
		}
	}
}

// coreState describes core q's paging and memory, for failure messages.
func (s *sim) coreState(q int) string {
	c := s.cores[q]
	var b strings.Builder
	fmt.Fprintf(&b, "memTail %d spilled %v paging %v pageRetryAt %d parked %v goneAhead %v\n", c.memTail, c.spilled, c.paging, c.pageRetryAt, c.parked, c.goneAhead)
	for g, l := range c.stash {
		fmt.Fprintf(&b, "  stash %q:", g)
		for _, m := range l {
			fmt.Fprintf(&b, " %d", m.ID)
		}
		b.WriteByte('\n')
	}
	for g, gr := range c.ready.groups {
		fmt.Fprintf(&b, "  group %q held %d ready", g, gr.held)
		for _, m := range gr.ready {
			fmt.Fprintf(&b, " %d", m.ID)
		}
		b.WriteByte('\n')
	}
	for _, id := range s.sortedIDs(q) {
		if m := c.byID[id]; m != nil {
			fmt.Fprintf(&b, "  %d:%q st%d hold=%v nb=%d", id, m.Group, m.state, m.holdsGroup, m.NotBefore)
		}
	}
	return b.String()
}

// drain acks everything until the main queue is empty.
func (s *sim) drain() {
	s.step++
	s.logf("final drain")
	s.now += 1000 // past every producer delay and expiry
	idle := 0
	for round := 0; ; round++ {
		if s.pickCon(func(sc *simCon) bool { return sc.q == qMain }) == nil {
			s.subscribeWith(qMain, &Consumer{Prefetch: 5, Mode: AckClientIndividual})
		}
		s.settle()
		s.checkNoStall()
		n, _ := s.recount(qMain)
		if n == 0 {
			break
		}
		acked := 0
		for _, sc := range append([]*simCon(nil), s.cons...) {
			if len(sc.out) == 0 {
				continue
			}
			acked += len(sc.out)
			if sc.c.Mode == AckAuto {
				ds := append([]*Delivery(nil), sc.out...)
				for _, d := range ds {
					s.ackIntent[d.Msg.ID] = true
				}
				s.resolve(sc, ds)
				s.cores[sc.q].Written(ds, s.now)
				s.collect(sc.q)
				continue
			}
			for len(sc.out) > 0 {
				d := sc.out[len(sc.out)-1]
				covered := []*Delivery{d}
				if sc.c.Mode == AckClient {
					covered = append([]*Delivery(nil), sc.out...)
				}
				b, stale := s.cores[sc.q].Ack(sc.c, d.Msg.ID, d.Attempt, s.now)
				if stale {
					s.failf("drain: ack of %d#%d stale", d.Msg.ID, d.Attempt)
				}
				s.checkCovers(b, covered, "drain ack")
				for _, x := range covered {
					s.ackIntent[x.Msg.ID] = true
				}
				s.resolve(sc, covered)
				s.markOps(sc.q, b)
				s.submit(&simBatch{parts: []simPart{{q: sc.q, b: b}}, what: "drain ack"})
				s.collect(sc.q)
			}
		}
		s.check()
		if acked == 0 {
			if idle++; idle > 3 {
				s.failf("drain: main queue keeps %d messages %v and delivers none; core %+v", n, s.sortedIDs(qMain), s.cores[qMain].Snapshot())
			}
		} else {
			idle = 0
		}
	}
	if snap := s.cores[qMain].Snapshot(); snap.Count != 0 || snap.Bytes != 0 {
		s.failf("drain: main queue empty in the journal but the core counts %d, %d bytes", snap.Count, snap.Bytes)
	}
	if since, err, failing := s.cores[qMain].PageInFailing(); failing {
		s.failf("drain: main queue drained and its page-ins still failing since %d (%s)", since, err)
	}
}

// --- tests --------------------------------------------------------------

func simSeedSrc(seed uint64) simSrc {
	return rngSrc{rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))}
}

func TestSim(t *testing.T) {
	if *flagSimSeed >= 0 {
		seed := uint64(*flagSimSeed)
		st, err := runSim(simSeedSrc(seed), *flagSimSteps, fmt.Sprintf("seed %d", seed))
		if err != nil {
			t.Fatalf("%v\nreproduce: go test ./appliance/queuecore -run TestSim -sim.seed=%d -sim.steps=%d", err, seed, *flagSimSteps)
		}
		t.Logf("seed %d: %+v", seed, st)
		return
	}
	seeds := *flagSimSeeds
	if testing.Short() {
		seeds = min(seeds, 200)
	}
	start := time.Now()
	var tot simStats
	for seed := *flagSimFrom; seed < *flagSimFrom+uint64(seeds); seed++ {
		st, err := runSim(simSeedSrc(seed), *flagSimSteps, fmt.Sprintf("seed %d", seed))
		if err != nil {
			t.Fatalf("%v\nreproduce: go test ./appliance/queuecore -run TestSim -sim.seed=%d -sim.steps=%d", err, seed, *flagSimSteps)
		}
		tot.steps += st.steps
		tot.enqueued += st.enqueued
		tot.delivered += st.delivered
		tot.acked += st.acked
		tot.deadLettered += st.deadLettered
		tot.moved += st.moved
		tot.purges += st.purges
		tot.purgeParts += st.purgeParts
		tot.staleRequeues += st.staleRequeues
		tot.crashes += st.crashes
		tot.settles += st.settles
		tot.failures += st.failures
		tot.pageIns += st.pageIns
		tot.parks += st.parks
		tot.marks += st.marks
		tot.rows += st.rows
		tot.pins += st.pins
		tot.cacheHits += st.cacheHits
		tot.pfRead += st.pfRead
		tot.pfCache += st.pfCache
		tot.pfIdle += st.pfIdle
	}
	t.Logf("%d seeds x %d steps in %v: %+v", seeds, *flagSimSteps, time.Since(start).Round(time.Millisecond), tot)
	// The schedules reach every kind of claim (invariant 9 is not vacuous).
	if seeds >= 100 && (tot.marks == 0 || tot.rows == 0 || tot.pins == 0) {
		t.Fatalf("claims applied: %d raises of the mark, %d rows, %d rows of count 0: want each", tot.marks, tot.rows, tot.pins)
	}
	// And purges the journal took in parts, one batch after another.
	if seeds >= 100 && (tot.purges == 0 || tot.purgeParts == 0) {
		t.Fatalf("purges: %d, batches that purged part of a range: %d: want both", tot.purges, tot.purgeParts)
	}
	// And requeues whose read a purge made stale (MoveOut's epoch rule is
	// not vacuous).
	if seeds >= 100 && tot.staleRequeues == 0 {
		t.Fatalf("no requeue read before a purge committed")
	}
	// And both ways of paging in (checkCache is not vacuous).
	if seeds >= 100 && (tot.cacheHits == 0 || tot.pageIns == 0) {
		t.Fatalf("page-ins: %d from the journal, %d from the backlog cache: want both", tot.pageIns, tot.cacheHits)
	}
	// And runs of failed page-ins ended by a read (checkPageFail is not
	// vacuous).
	if seeds >= 100 && tot.pfRead == 0 {
		t.Fatalf("runs of failed page-ins ended: %d by a read, %d from the cache, %d with nothing to page in: want reads", tot.pfRead, tot.pfCache, tot.pfIdle)
	}
}

func FuzzSim(f *testing.F) {
	for seed := uint64(1); seed <= 4; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		b := make([]byte, 200*int(seed))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := runSim(&byteSrc{b: data}, 0, "fuzz input"); err != nil {
			t.Fatal(err)
		}
	})
}
