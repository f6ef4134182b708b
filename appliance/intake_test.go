package appliance

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// The intake hands batches over one connection's at a time in turn, each
// connection's in its own order, and holds back once inflightMax bytes are
// in the journal's hands.
func TestIntake_RoundRobinInOrder(t *testing.T) {
	j := &recordJournal{}
	in := newIntake(j, 3)
	var a, b, c intakeQ
	mk := func(tag string) *Batch { return &Batch{Ops: []Op{{Kind: OpBarrier, Queue: tag}}} }
	// c's batch fills the journal (handed over at once: nothing waits);
	// everything after it waits for its turn.
	in.add(&c, mk("c1"), 3)
	if got := j.tags(); got != "c1" {
		t.Fatalf("the journal got %q from an idle intake, want c1 at once", got)
	}
	for _, tag := range []string{"a1", "a2", "a3", "a4"} {
		in.add(&a, mk(tag), 1)
	}
	in.add(&b, mk("b1"), 1)
	in.add(&b, mk("b2"), 1)
	var got []string
	var taken []*Batch
	if bt := in.next(); bt != nil {
		t.Fatalf("handed %s while the journal held its inflightMax", bt.Ops[0].Queue)
	}
	j.got[0].Done(j.got[0], nil)
	for bt := in.next(); bt != nil; bt = in.next() {
		in.handed()
		got = append(got, bt.Ops[0].Queue)
		taken = append(taken, bt)
	}
	if want := "a1 b1 a2"; join(got) != want {
		t.Fatalf("handed %q before the journal was full, want %q", join(got), want)
	}
	for _, bt := range taken { // the journal completes them
		bt.Done(bt, nil)
	}
	got = got[:0]
	for bt := in.next(); bt != nil; bt = in.next() {
		in.handed()
		got = append(got, bt.Ops[0].Queue)
		bt.Done(bt, nil)
	}
	if want := "b2 a3 a4"; join(got) != want {
		t.Fatalf("then handed %q, want %q", join(got), want)
	}
	if in.inflight != 0 || len(in.ring) != 0 {
		t.Fatalf("inflight %d, ring %d after everything completed", in.inflight, len(in.ring))
	}
}

// recordJournal records the batches submitted to it, in order.
type recordJournal struct {
	mu  sync.Mutex
	got []*Batch
}

func (j *recordJournal) Submit(b *Batch) {
	j.mu.Lock()
	j.got = append(j.got, b)
	j.mu.Unlock()
}

func (j *recordJournal) tags() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var s []string
	for _, b := range j.got {
		s = append(s, b.Ops[0].Queue)
	}
	return join(s)
}

// An idle intake (nothing waiting, nothing between the dispatcher and the
// journal, room in the journal) hands a batch to the journal from add
// itself, sparing the dispatcher's wake-up; with anything waiting or in
// the dispatcher's hands, add queues it, so that no connection's batch
// overtakes an earlier one of its own or a waiting one of another's.
func TestIntake_IdleHandsOverDirectly(t *testing.T) {
	j := &recordJournal{}
	in := newIntake(j, 20)
	var a, b intakeQ
	mk := func(tag string) *Batch { return &Batch{Ops: []Op{{Kind: OpBarrier, Queue: tag}}} }
	in.add(&a, mk("a1"), 20)
	if got := j.tags(); got != "a1" || in.direct.Load() != 1 {
		t.Fatalf("journal got %q (%d direct) from an idle intake, want a1 handed over in add", got, in.direct.Load())
	}
	// The journal is full: b1 waits, and so does a2 behind it.
	in.add(&b, mk("b1"), 1)
	in.add(&a, mk("a2"), 1)
	if got := j.tags(); got != "a1" || len(in.ring) != 2 {
		t.Fatalf("journal got %q (ring %d), want b1 and a2 waiting behind the full journal", got, len(in.ring))
	}
	j.got[0].Done(j.got[0], nil)
	// The dispatcher takes b1 (not handed over yet) and a2: a3 waits
	// although nothing is left in the ring.
	b1 := in.next()
	a2 := in.next()
	in.add(&a, mk("a3"), 1)
	if got := j.tags(); got != "a1" || len(in.ring) != 1 {
		t.Fatalf("journal got %q (ring %d), want a3 queued while b1 and a2 are in the dispatcher's hands", got, len(in.ring))
	}
	for _, bt := range []*Batch{b1, a2} {
		in.j.Submit(bt)
		in.handed()
	}
	for bt := in.next(); bt != nil; bt = in.next() {
		in.j.Submit(bt)
		in.handed()
	}
	if got := j.tags(); got != "a1 b1 a2 a3" {
		t.Fatalf("journal got %q, want a1 b1 a2 a3", got)
	}
	// Idle again: the next one goes directly.
	in.add(&b, mk("b2"), 1)
	if got := j.tags(); got != "a1 b1 a2 a3 b2" || in.direct.Load() != 2 {
		t.Fatalf("journal got %q (%d direct), want b2 handed over in add", got, in.direct.Load())
	}
}

// Connections adding concurrently while the dispatcher runs and the
// journal completes in the background: every connection's batches reach
// the journal in the order added, whichever way each went.
func TestIntake_OrderKeptWithDirectHandOver(t *testing.T) {
	const conns, per = 8, 2000
	j := &completingJournal{order: map[string][]int{}, in: make(chan *Batch, 64)}
	in := newIntake(j, 4)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); in.run(stop) }()
	go func() { defer wg.Done(); j.complete() }()
	var senders sync.WaitGroup
	for c := range conns {
		senders.Add(1)
		go func() {
			defer senders.Done()
			var q intakeQ
			tag := fmt.Sprint("c", c)
			for i := range per {
				b := &Batch{Ops: []Op{{Kind: OpBarrier, Queue: tag, ID: uint64(i)}}}
				in.add(&q, b, 1)
				if i%97 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	senders.Wait()
	close(stop)
	for {
		j.mu.Lock()
		n := j.n
		j.mu.Unlock()
		if n == conns*per {
			break
		}
		runtime.Gosched()
	}
	close(j.in)
	wg.Wait()
	for tag, ids := range j.order {
		for i, id := range ids {
			if id != i {
				t.Fatalf("%s: batch %d reached the journal in place %d", tag, id, i)
			}
		}
	}
	if in.direct.Load() == 0 {
		t.Fatalf("no batch of %d was handed over by add: the direct path was not exercised", conns*per)
	}
	t.Logf("%d of %d handed over directly", in.direct.Load(), conns*per)
}

// completingJournal records each connection's order of submission and
// completes batches in order on its own goroutine.
type completingJournal struct {
	mu    sync.Mutex
	order map[string][]int
	n     int
	in    chan *Batch
}

func (j *completingJournal) Submit(b *Batch) {
	j.mu.Lock()
	tag := b.Ops[0].Queue
	j.order[tag] = append(j.order[tag], int(b.Ops[0].ID))
	j.n++
	j.in <- b // under mu: counted only once sent
	j.mu.Unlock()
}

func (j *completingJournal) complete() {
	for b := range j.in {
		b.Done(b, nil)
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

// The default memory budget follows the cgroup's limit when there is one.
func TestDefaultMemoryBudget_FollowsCgroup(t *testing.T) {
	if b := DefaultMemoryBudget(); b < 64<<20 {
		t.Fatalf("default budget %d, want at least 64 MiB", b)
	}
	if cg, _ := cgroupMemoryMax(); cg > 0 && DefaultMemoryBudget() > max(cg*2/5, 64<<20) {
		t.Fatalf("default budget %d above 40%% of the cgroup's %d", DefaultMemoryBudget(), cg)
	}
}
