package appliance

import (
	"sync"
	"sync/atomic"
)

// intake hands the connections' journal batches to the journal round-robin
// between connections, keeping at most inflightMax bytes of them handed to
// the journal and not yet completed.
//
// The journal commits its intake first come, first served, in group
// commits. Without this, a producer that floods SENDs without receipts
// fills the journal's intake and every other client's batch waits behind
// all of it (a 1 ms round trip became 110 ms beside two such producers).
// Here each connection has its own FIFO (bounded by
// stomp.max_journal_pending_bytes, see session.submit), and the journal
// sees only a short interleaving of them: another client's batch waits
// behind about one group commit, whatever the flooders queued.
//
// Batches of one connection reach the journal in the order submitted (one
// dispatcher goroutine), which receipts and DISCONNECT rely on. Batches of
// queue cores go to the journal directly (the pump): they are bounded by
// the queues' windows.
type intake struct {
	j           submitter
	inflightMax int64

	mu       sync.Mutex
	ring     []*intakeQ // connections with batches waiting, in turn order
	inflight int64
	handing  int  // batches next gave run that run has not yet handed to the journal
	closed   bool // run has returned: add submits directly
	wake     chan struct{}

	direct atomic.Uint64 // batches add handed to the journal itself
}

type intakeQ struct {
	batches []*Batch
	weights []int64
	queued  bool // in ring
}

// intakeInflight is how many bytes of the connections' batches (see
// batchWeight) the journal holds at most, committing or waiting: a group
// commit of about 200 1 KiB messages. Less costs a lone producer
// throughput (smaller commits, each with its fsync); more makes everyone
// else wait longer behind a flood (BenchmarkFloodSend,
// TestBudget_JournalIntakeIsFair).
var intakeInflight int64 = 256 << 10

// submitter is the part of Journal the intake uses.
type submitter interface{ Submit(*Batch) }

func newIntake(j submitter, inflightMax int64) *intake {
	return &intake{j: j, inflightMax: inflightMax, wake: make(chan struct{}, 1)}
}

// add queues b (weighing w) on q. It never blocks.
//
// When nothing waits (no connection's batch queued, none between next and
// the journal) and the journal holds less than inflightMax, add hands b to
// the journal itself: the dispatcher's turn would change nothing but cost
// a lone SEND a goroutine hand-over (a wake-up) on its way to the commit.
// This connection's earlier batches are all in the journal's hands then,
// so its order is kept.
func (in *intake) add(q *intakeQ, b *Batch, w int64) {
	done := b.Done
	b.Done = func(b *Batch, err error) {
		if done != nil {
			done(b, err)
		}
		in.mu.Lock()
		in.inflight -= w
		in.mu.Unlock()
		in.poke()
	}
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		in.j.Submit(b)
		return
	}
	if len(in.ring) == 0 && in.handing == 0 && (in.inflight == 0 || in.inflight < in.inflightMax) {
		in.inflight += w
		alone := in.inflight == w
		in.mu.Unlock()
		in.direct.Add(1)
		if cn, ok := in.j.(Committer); ok && b.Wait && alone && cn.CommitNow(b) {
			return
		}
		in.j.Submit(b)
		return
	}
	q.batches = append(q.batches, b)
	q.weights = append(q.weights, w)
	if !q.queued {
		q.queued = true
		in.ring = append(in.ring, q)
	}
	in.mu.Unlock()
	in.poke()
}

func (in *intake) poke() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// next takes the next batch in turn, or nil when nothing waits or the
// journal has inflightMax bytes in hand (one batch always goes).
func (in *intake) next() *Batch {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.ring) == 0 || (in.inflight > 0 && in.inflight >= in.inflightMax) {
		return nil
	}
	q := in.ring[0]
	b, w := q.batches[0], q.weights[0]
	q.batches[0] = nil
	q.batches, q.weights = q.batches[1:], q.weights[1:]
	copy(in.ring, in.ring[1:])
	in.ring[len(in.ring)-1] = nil
	in.ring = in.ring[:len(in.ring)-1]
	if len(q.batches) > 0 {
		in.ring = append(in.ring, q) // its turn again after the others
	} else {
		q.queued = false
		q.batches, q.weights = nil, nil
	}
	in.inflight += w
	in.handing++
	return b
}

// handed: run has handed a batch from next to the journal.
func (in *intake) handed() {
	in.mu.Lock()
	in.handing--
	in.mu.Unlock()
}

// run dispatches until stop is closed, then hands over everything still
// waiting (the sessions have ended by then: a SEND without a receipt is
// stored all the same). A batch added after that goes to the journal
// directly.
func (in *intake) run(stop <-chan struct{}) {
	for {
		for b := in.next(); b != nil; b = in.next() {
			in.j.Submit(b)
			in.handed()
		}
		select {
		case <-in.wake:
		case <-stop:
			in.mu.Lock()
			in.inflightMax = 1 << 62
			in.mu.Unlock()
			for {
				b := in.next()
				if b == nil {
					break
				}
				in.j.Submit(b)
				in.handed()
			}
			in.mu.Lock()
			rest := in.ring
			in.ring = nil
			in.closed = true
			in.mu.Unlock()
			for _, q := range rest { // added between the last next and closed
				for _, b := range q.batches {
					in.j.Submit(b)
				}
			}
			return
		}
	}
}
