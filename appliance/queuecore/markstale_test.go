package queuecore

import (
	"fmt"
	"testing"
)

// markRig plays the shell and a model of the SQL journal for one queue:
// rows, claim rows (last count wins), the delivered mark (max). Batches
// are applied and completed in emission order, except those hold picks,
// which wait in held; page-ins read the model at once.
type markRig struct {
	t       *testing.T
	c       *Core
	now     int64
	rows    map[uint64]Msg // committed messages: ID, group, not_before
	claim   map[uint64]int // claim rows
	mark    uint64
	hold    func(*Batch) bool
	held    []*Batch
	onScan  func(req *PageIn, read []*Msg) // before a rescan's answer reaches the core
	holding map[*Consumer][]*Delivery
}

func newMarkRig(t *testing.T, cfg Config) *markRig {
	return &markRig{t: t, c: New(cfg, 1), rows: map[uint64]Msg{}, claim: map[uint64]int{}, holding: map[*Consumer][]*Delivery{}}
}

func (r *markRig) count(id uint64) int {
	if n, ok := r.claim[id]; ok {
		return n
	}
	if id <= r.mark {
		return 1
	}
	return 0
}

func (r *markRig) apply(b *Batch) {
	for _, op := range b.Ops {
		id := op.Msg.ID
		switch op.Kind {
		case OpDelete, OpDrop, OpDeadLetter, OpMoveOut:
			delete(r.rows, id)
			delete(r.claim, id)
		case OpClaim:
			if op.Mark {
				r.mark = max(r.mark, id)
			} else if _, ok := r.rows[id]; ok {
				r.claim[id] = op.Deliveries
			}
		}
	}
}

func (r *markRig) read(req *PageIn) []*Msg {
	var out []*Msg
	for id := req.After + 1; id <= 1000 && len(out) < req.Limit; id++ {
		m, ok := r.rows[id]
		if !ok || (req.Group != "" && m.Group != req.Group) {
			continue
		}
		_, row := r.claim[id]
		out = append(out, &Msg{ID: id, Size: 1, Group: m.Group, NotBefore: m.NotBefore, Deliveries: r.count(id), ClaimRow: row})
	}
	return out
}

// complete applies and completes b.
func (r *markRig) complete(b *Batch) {
	r.apply(b)
	r.c.Done(b.Seq, Result{}, nil, r.now)
}

// settle plays the shell until the core asks for nothing more.
func (r *markRig) settle() {
	for i := 0; i < 1000; i++ {
		o := r.c.Take()
		for _, d := range o.Deliver {
			if d.C.Mode != AckAuto && r.count(d.Msg.ID) < d.Attempt {
				r.t.Fatalf("t=%d: MESSAGE %d#%d goes out while the journal counts %d deliveries of it (mark %d, claim rows %v)",
					r.now, d.Msg.ID, d.Attempt, r.count(d.Msg.ID), r.mark, r.claim)
			}
			r.holding[d.C] = append(r.holding[d.C], d)
		}
		if len(o.Batches) == 0 && o.PageIn == nil {
			return
		}
		for _, b := range o.Batches {
			if r.hold != nil && r.hold(b) {
				r.held = append(r.held, b)
				continue
			}
			r.complete(b)
		}
		if req := o.PageIn; req != nil {
			msgs := r.read(req)
			if req.Group != "" && r.onScan != nil {
				r.onScan(req, msgs)
			}
			r.c.Paged(req, msgs, nil, r.now)
		}
	}
	r.t.Fatal("the core does not settle")
}

func (r *markRig) commit(m Msg) {
	r.rows[m.ID] = m
	mm := m
	r.c.Committed(&mm, false, r.now)
	r.settle()
}

func (r *markRig) ack(con *Consumer, id uint64) {
	b, stale := r.c.Ack(con, id, 0, r.now)
	if stale {
		r.t.Fatalf("ack of %d: stale", id)
	}
	r.settle()
	r.complete(b)
	r.settle()
}

func (r *markRig) String() string { return fmt.Sprintf("mark %d claims %v", r.mark, r.claim) }

// A message whose row of count 0 is still being written when park() drops
// it from memory comes back through a rescan that read the journal before
// that row committed (the shell reads page-ins outside the queue's lock,
// and the pump may submit a core batch after a later ACK's batch). The
// core then takes the rescanned copy's ClaimRow=false at its word and
// raises the mark for the message's first delivery: the journal, which
// holds the row of 0, counts 0 deliveries of a MESSAGE that went out.
func TestMark_StaleRescanAfterPendingPin(t *testing.T) {
	r := newMarkRig(t, Config{Window: 2, GroupOverflow: 1, RetryMin: 1, RetryMax: 1})
	const g1, h1, g2, h2, x = 1, 2, 3, 4, 5
	var pin *Batch
	r.hold = func(b *Batch) bool { // the row of 0 of g2 (scheduled) waits
		for _, op := range b.Ops {
			if op.Kind == OpClaim && op.Msg.ID == g2 && op.Deliveries == 0 && !op.Mark && pin == nil {
				pin = b
				return true
			}
		}
		return false
	}
	a := &Consumer{Prefetch: 3, Mode: AckClientIndividual}
	r.c.Subscribe(a, r.now)
	r.settle()
	r.commit(Msg{ID: g1, Size: 1, Group: "g"}) // delivered (mark 1)
	r.commit(Msg{ID: h1, Size: 1, Group: "h"}) // delivered (mark 2)
	r.commit(Msg{ID: g2, Size: 1, Group: "g", NotBefore: 5, Scheduled: true})
	if pin == nil {
		t.Fatal("no row of 0 for the scheduled message")
	}
	r.commit(Msg{ID: h2, Size: 1, Group: "h"}) // waits behind h1
	r.now = 5
	r.c.Tick(r.now) // g2 due: waits behind g1; the window is full
	r.settle()
	r.now = 6
	r.commit(Msg{ID: x, Size: 1}) // spilled: g is parked, g2 dropped from memory
	if _, ok := r.c.parked["g"]; !ok {
		t.Fatalf("g not parked (parked %v)", r.c.parked)
	}
	r.now = 7
	r.ack(a, h1) // h2 goes out
	r.ack(a, h2)
	r.ack(a, x)
	// The rescan of g reads the journal before g2's row of 0 commits;
	// that row commits before the answer reaches the core.
	r.onScan = func(req *PageIn, read []*Msg) {
		if pin != nil {
			r.complete(pin)
			pin = nil
		}
	}
	r.now = 8
	r.ack(a, g1) // g has nothing held: rescan; g2 is delivered after it
	delivered := false
	for _, d := range r.holding[a] {
		delivered = delivered || d.Msg.ID == g2
	}
	if !delivered {
		t.Fatalf("g2 not delivered (%v)", r)
	}
}
