package queuecore

import (
	"errors"
	"testing"
)

// Regression tests for bugs the simulation (sim_test.go) found. Each one
// failed before its fix. Seed numbers are those of TestSimRegressionSeeds
// (sim_test.go's choices as committed with it; a change to the harness
// reshuffles them).

var errNotFound = errors.New("journal: move: message not found")

// deliveredIDs takes c's output and returns the IDs of its deliveries.
func deliveredIDs(c *Core) []uint64 {
	var ids []uint64
	for _, d := range c.Take().Deliver {
		ids = append(ids, d.Msg.ID)
	}
	return ids
}

// A requeue (MoveOut) while a purge is pending must not pick messages the
// purge deletes: the journal then fails the move (message not found) and
// the message came back to memory as a ghost, delivered though deleted.
// Seed 146.
func TestRegress_MoveOutDuringPurge(t *testing.T) {
	c := New(Config{Window: 10, RetryMin: 1, RetryMax: 1}, 1) // a DLQ
	c.Committed(&Msg{ID: 1, Size: 10}, false, 0)
	p := c.Purge(0)
	mv, _ := c.MoveOut([]*Msg{{ID: 1, Size: 10}}, "main", 0, c.ReadEpoch())
	c.Done(p.Seq, Result{Affected: 1, Bytes: 10}, nil, 0) // the purge deleted 1
	if mv != nil {
		c.Done(mv.Seq, Result{}, errNotFound, 0) // so its move fails
	}
	c.Subscribe(&Consumer{Prefetch: 5, Mode: AckAuto}, 10)
	c.Tick(100)
	if ids := deliveredIDs(c); len(ids) != 0 {
		t.Fatalf("delivered %v, purged before", ids)
	}
	if s := c.Snapshot(); s.Count != 0 || s.InMemory != 0 {
		t.Fatalf("count %d, in memory %d after the purge; want 0, 0", s.Count, s.InMemory)
	}
}

// A message being moved out still heads its group: should the move fail,
// nothing of its group may have been delivered before it. Seed 512.
func TestRegress_MoveOutHoldsGroup(t *testing.T) {
	c := New(Config{Window: 10, RetryMin: 1, RetryMax: 1}, 1)
	c.Committed(&Msg{ID: 1, Size: 1, Group: "g"}, false, 0)
	c.Committed(&Msg{ID: 2, Size: 1, Group: "g"}, false, 0)
	mv, _ := c.MoveOut([]*Msg{{ID: 1, Size: 1, Group: "g"}}, "main", 0, c.ReadEpoch())
	if mv == nil {
		t.Fatal("MoveOut moves nothing")
	}
	c.Subscribe(&Consumer{Prefetch: 5, Mode: AckAuto}, 0)
	if ids := deliveredIDs(c); len(ids) != 0 {
		t.Fatalf("delivered %v while 1, first of group g, is being moved", ids)
	}
	c.Done(mv.Seq, Result{}, errors.New("disk full"), 0)
	c.Tick(10)
	if ids := deliveredIDs(c); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("after the failed move delivered %v, want [1]", ids)
	}
}

// A NACK back-off made durable before a restart keeps the message at the
// head of its group when paged in again. Seed 420.
func TestRegress_PagedBackoffHoldsGroup(t *testing.T) {
	const now = 1000
	c := New(Config{Window: 10}, 1)
	c.Recover(2, 2, 2, 0, now)
	req := c.Take().PageIn
	if req == nil {
		t.Fatal("no page-in after Recover")
	}
	c.Paged(req, []*Msg{
		{ID: 1, Size: 1, Group: "g", Deliveries: 1, NotBefore: now + 100},
		{ID: 2, Size: 1, Group: "g"},
	}, nil, now)
	c.Subscribe(&Consumer{Prefetch: 5, Mode: AckAuto}, now)
	if ids := deliveredIDs(c); len(ids) != 0 {
		t.Fatalf("delivered %v while 1, first of group g, waits out its back-off", ids)
	}
	c.Tick(now + 100)
	if ids := deliveredIDs(c); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("after the back-off delivered %v, want [1]", ids)
	}
}

// A page-in that returns messages being moved out (MoveOut of messages not
// paged in yet) skips them and may end the queue's paging; when the move
// then failed, the messages were dropped from memory for the pager to find
// again, but nothing paged any more. Seed 1599 (as the next test).
func TestRegress_PagedSkipsMovingMessages(t *testing.T) {
	c := New(Config{Window: 10, RetryMin: 1, RetryMax: 1}, 1)
	c.Recover(2, 2, 2, 0, 0)
	req := c.Take().PageIn
	msgs := func() []*Msg { return []*Msg{{ID: 1, Size: 1}, {ID: 2, Size: 1}} }
	mv, _ := c.MoveOut(msgs(), "main", 0, c.ReadEpoch())
	if mv == nil {
		t.Fatal("MoveOut moves nothing")
	}
	c.Paged(req, msgs(), nil, 0)
	c.Done(mv.Seq, Result{}, errors.New("disk full"), 0)
	c.Subscribe(&Consumer{Prefetch: 5, Mode: AckAuto}, 0)
	for now := int64(1); now < 10; now++ {
		c.Tick(now)
		o := c.Take()
		if o.PageIn != nil {
			c.Paged(o.PageIn, msgs(), nil, now)
		}
		for _, d := range o.Deliver {
			c.Written([]*Delivery{d}, now)
		}
		for _, b := range o.Batches {
			c.Done(b.Seq, Result{}, nil, now)
		}
	}
	if s := c.Snapshot(); s.Acked != 2 {
		t.Fatalf("%d of the 2 messages delivered after their move failed", s.Acked)
	}
}

// drive runs c from now to now+ms with an auto-ack consumer subscribed:
// page-ins are answered from journal (IDs ascending), deliveries written,
// batches committed. It returns the IDs delivered.
func drive(c *Core, journal []*Msg, now, ms int64) []uint64 {
	var ids []uint64
	c.Subscribe(&Consumer{Prefetch: 100, Mode: AckAuto}, now)
	for t := now; t <= now+ms; t++ {
		c.Tick(t)
		for range 10 {
			o := c.Take()
			if o.PageIn == nil && len(o.Deliver) == 0 && len(o.Batches) == 0 {
				break
			}
			if req := o.PageIn; req != nil {
				var msgs []*Msg
				for _, m := range journal {
					if m.ID > req.After && len(msgs) < req.Limit {
						cp := *m
						msgs = append(msgs, &cp)
					}
				}
				c.Paged(req, msgs, nil, t)
			}
			for _, d := range o.Deliver {
				ids = append(ids, d.Msg.ID)
				c.Written([]*Delivery{d}, t)
			}
			for _, b := range o.Batches {
				c.Done(b.Seq, Result{}, nil, t)
			}
		}
	}
	return ids
}

// A page-in read before a requeue of a message not paged in yet committed,
// answered after it, must not bring the message back (the shell loads
// page-ins outside the queue's lock, so answers may be stale). Seed 313.
func TestRegress_StalePageInAfterMoveOut(t *testing.T) {
	c := New(Config{Window: 10}, 1)
	c.Recover(1, 1, 1, 0, 0)
	req := c.Take().PageIn
	stale := []*Msg{{ID: 1, Size: 1}} // what the page-in read
	mv, _ := c.MoveOut([]*Msg{{ID: 1, Size: 1}}, "main", 0, c.ReadEpoch())
	c.Done(mv.Seq, Result{NewIDs: []uint64{9}}, nil, 0)
	c.Paged(req, stale, nil, 0)
	if ids := drive(c, nil, 1, 10); len(ids) != 0 {
		t.Fatalf("delivered %v, requeued to another queue", ids)
	}
	if s := c.Snapshot(); s.Count != 0 || s.InMemory != 0 {
		t.Fatalf("count %d, in memory %d; want 0, 0", s.Count, s.InMemory)
	}
}

// A purge keeps a message being requeued; when that requeue fails before
// the purge commits, the message (never paged in) must be paged in again:
// the purge may not take the queue for paged in up to its UpTo. Seed 2820.
func TestRegress_PurgeKeepsFailedMoveOut(t *testing.T) {
	c := New(Config{Window: 1, RetryMin: 1, RetryMax: 1}, 1)
	m1, m2 := &Msg{ID: 1, Size: 1}, &Msg{ID: 2, Size: 1}
	c.Committed(m1, false, 0)
	c.Committed(m2, false, 0) // window full: 2 stays in the journal
	mv, _ := c.MoveOut([]*Msg{{ID: 2, Size: 1}}, "main", 0, c.ReadEpoch())
	p := c.Purge(0) // keeps 2, moving
	c.Done(mv.Seq, Result{}, errors.New("disk full"), 0)
	c.Done(p.Seq, Result{Affected: 1, Bytes: 1}, nil, 0) // deleted 1
	ids := drive(c, []*Msg{{ID: 2, Size: 1}}, 1, 10)
	if len(ids) != 1 || ids[0] != 2 {
		t.Fatalf("delivered %v, want [2]", ids)
	}
}

// A requeue of a message the queue learnt of only from the journal (moved
// in, its Committed still to come) that fails must leave the queue paging:
// the message is in the journal and not in memory. Seed 1599.
func TestRegress_FailedMoveOutOfUnpagedMessage(t *testing.T) {
	c := New(Config{Window: 10, RetryMin: 1, RetryMax: 1}, 1)
	c.Committed(&Msg{ID: 1, Size: 1}, false, 0)
	mv, _ := c.MoveOut([]*Msg{{ID: 2, Size: 1}}, "main", 0, c.ReadEpoch()) // read from the journal
	c.Committed(&Msg{ID: 2, Size: 1}, false, 0)
	c.Done(mv.Seq, Result{}, errors.New("disk full"), 0)
	ids := drive(c, []*Msg{{ID: 1, Size: 1}, {ID: 2, Size: 1}}, 1, 10)
	if len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
		t.Fatalf("delivered %v, want [1 2]", ids)
	}
}

// A window of 1 must page: with Window*3/4 == 0 eligible messages the
// pager thought memory full and a second message was never delivered.
// Seed 4.
func TestRegress_WindowOfOnePages(t *testing.T) {
	c := New(Config{Window: 1}, 1)
	journal := []*Msg{{ID: 1, Size: 1}, {ID: 2, Size: 1}, {ID: 3, Size: 1}}
	for _, m := range journal {
		cp := *m
		c.Committed(&cp, false, 0)
	}
	ids := drive(c, journal, 1, 10)
	if len(ids) != 3 {
		t.Fatalf("delivered %v, want [1 2 3]", ids)
	}
}

// A purge that keeps messages moved out meanwhile (never paged in) must
// not take them for failed moves to page in again: a page-in read before
// the purge then brought back messages it deleted. Found by seed 45807
// against the core of commit 28aa323 (the other fixes since hide it there).
func TestRegress_PurgeKeepsMovedOut(t *testing.T) {
	c := New(Config{Window: 10}, 1)
	c.Recover(3, 3, 3, 0, 0)
	req := c.Take().PageIn
	stale := []*Msg{{ID: 1, Size: 1}, {ID: 2, Size: 1}, {ID: 3, Size: 1}} // read now, answered late
	mv, _ := c.MoveOut([]*Msg{{ID: 1, Size: 1}}, "main", 0, c.ReadEpoch())
	p := c.Purge(0) // keeps 1, deletes 2 and 3
	c.Done(mv.Seq, Result{NewIDs: []uint64{9}}, nil, 0)
	c.Done(p.Seq, Result{Affected: 2, Bytes: 2}, nil, 0)
	c.Paged(req, stale, nil, 0)
	if ids := drive(c, nil, 1, 10); len(ids) != 0 {
		t.Fatalf("delivered %v: moved out or purged", ids)
	}
	if s := c.Snapshot(); s.Count != 0 || s.InMemory != 0 {
		t.Fatalf("count %d, in memory %d; want 0, 0", s.Count, s.InMemory)
	}
}

// A page-in read before a purge committed is stale: answered after it, it
// brought back messages the purge deleted (when a failed requeue had made
// the purge leave the queue paging below its UpTo). As the test above.
func TestRegress_PageInReadBeforePurge(t *testing.T) {
	c := New(Config{Window: 10, RetryMin: 1, RetryMax: 1}, 1)
	c.Recover(3, 3, 3, 0, 0)
	req := c.Take().PageIn
	stale := []*Msg{{ID: 1, Size: 1}, {ID: 2, Size: 1}, {ID: 3, Size: 1}}
	mv, _ := c.MoveOut([]*Msg{{ID: 1, Size: 1}}, "main", 0, c.ReadEpoch())
	p := c.Purge(0) // keeps 1, deletes 2 and 3
	c.Done(mv.Seq, Result{}, errors.New("disk full"), 0)
	c.Done(p.Seq, Result{Affected: 2, Bytes: 2}, nil, 0)
	c.Paged(req, stale, nil, 0)
	ids := drive(c, []*Msg{{ID: 1, Size: 1}}, 1, 10)
	if len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("delivered %v, want [1]: 2 and 3 were purged", ids)
	}
}

// An ack timeout that fires must not make the core lose count of the
// other deadlines: the next one never fired, and Wake forgot it. Seed 3.
func TestRegress_SecondAckTimeoutFires(t *testing.T) {
	c := New(Config{Window: 10}, 1)
	con := &Consumer{Prefetch: 2, Mode: AckClientIndividual, AckTimeout: 10}
	c.Subscribe(con, 0)
	commit := func(now int64) {
		for _, b := range c.Take().Batches {
			c.Done(b.Seq, Result{}, nil, now)
		}
		c.Take()
	}
	c.Committed(&Msg{ID: 1, Size: 1}, false, 0) // deadline 10
	commit(0)
	c.Committed(&Msg{ID: 2, Size: 1}, false, 5) // deadline 15
	commit(5)
	timeouts := func() (ids []uint64, wake int64) {
		o := c.Take()
		for _, ev := range o.Events {
			if ev.Kind == EvAckTimeout {
				ids = append(ids, ev.ID)
			}
		}
		return ids, o.Wake
	}
	c.Tick(10)
	if ids, wake := timeouts(); len(ids) != 1 || ids[0] != 1 || wake != 15 {
		t.Fatalf("at 10: timeouts %v, wake %d; want [1], 15", ids, wake)
	}
	c.Tick(15)
	if ids, _ := timeouts(); len(ids) != 1 || ids[0] != 2 {
		t.Fatalf("at 15: timeouts %v, want [2]", ids)
	}
}

// An ack deadline that passes while its claim is still being committed
// must not ask for a Wake in the past (the shell's timer would fire again
// and again until the claim completes); it expires when the claim does.
// Seed 14.
func TestRegress_NoWakeInThePastForPendingClaim(t *testing.T) {
	c := New(Config{Window: 10}, 1)
	c.Subscribe(&Consumer{Prefetch: 1, Mode: AckClient, AckTimeout: 10}, 0)
	c.Committed(&Msg{ID: 1, Size: 1}, false, 0)
	claim := c.Take().Batches[0]
	c.Tick(20)
	if w := c.Take().Wake; w != 0 && w <= 20 {
		t.Fatalf("after a tick at 20, wake at %d", w)
	}
	c.Done(claim.Seq, Result{}, nil, 25)
	o := c.Take()
	if len(o.Deliver) != 1 || len(o.Events) != 1 || o.Events[0].Kind != EvAckTimeout {
		t.Fatalf("claim committed past its deadline: %d deliveries, events %v; want 1 and its timeout", len(o.Deliver), o.Events)
	}
}

// A page-in retry that comes due while the window needs no page-in must
// not leave a Wake in the past behind. Seed 49.
func TestRegress_NoWakeInThePastForPageRetry(t *testing.T) {
	c := New(Config{Window: 4, RetryMin: 5, RetryMax: 5}, 1)
	for id := uint64(1); id <= 5; id++ {
		c.Committed(&Msg{ID: id, Size: 1}, false, 0) // 5 stays in the journal
	}
	con := &Consumer{Prefetch: 2, Mode: AckClientIndividual}
	c.Subscribe(con, 0)
	o := c.Take()
	if o.PageIn == nil {
		t.Fatal("no page-in with 2 of 4 eligible")
	}
	c.Paged(o.PageIn, nil, errors.New("disk"), 0) // retry at 5
	for _, b := range o.Batches {
		c.Done(b.Seq, Result{}, nil, 0)
	}
	c.Unsubscribe(con, 1) // 4 eligible again: no page-in needed
	c.Take()
	c.Tick(10)
	if w := c.Take().Wake; w != 0 && w <= 10 {
		t.Fatalf("after a tick at 10, wake at %d", w)
	}
}

// However many messages of blocked groups come first, a consumer with
// credit gets the messages after them: the ready memory was bounded at
// Window*GroupOverflow, and a page-in cannot skip the blocked ones, so
// they hid the rest of the queue until their group unblocked. The blocked
// group is parked (left in the journal) and rescanned once it unblocks, in
// order. Seed 8.
func TestRegress_BlockedGroupsDoNotHideTheQueue(t *testing.T) {
	journal := map[uint64]*Msg{}
	for id := uint64(1); id <= 6; id++ {
		m := &Msg{ID: id, Size: 1, Group: "g"}
		if id == 6 {
			m.Group = ""
		}
		journal[id] = m
	}
	c := New(Config{Window: 2, GroupOverflow: 1}, 1)
	var got []*Delivery // in delivery order, every consumer
	pump := func(now int64) {
		for range 50 {
			o := c.Take()
			if o.PageIn == nil && len(o.Batches) == 0 && len(o.Deliver) == 0 {
				return
			}
			if req := o.PageIn; req != nil {
				var msgs []*Msg
				for id := req.After + 1; id <= 6 && len(msgs) < req.Limit; id++ {
					if m := journal[id]; m != nil {
						cp := *m
						msgs = append(msgs, &cp)
					}
				}
				c.Paged(req, msgs, nil, now)
			}
			got = append(got, o.Deliver...)
			for _, b := range o.Batches {
				c.Done(b.Seq, Result{}, nil, now)
			}
		}
	}
	ids := func() (s []uint64) {
		for _, d := range got {
			s = append(s, d.Msg.ID)
		}
		return s
	}
	c.Recover(6, 6, 6, 0, 0)
	a := &Consumer{Prefetch: 1, Mode: AckClientIndividual}
	c.Subscribe(a, 0)
	pump(0)
	b := &Consumer{Prefetch: 5, Mode: AckClientIndividual}
	c.Subscribe(b, 1) // group g is held by a: b may only get 6
	pump(1)
	if s := ids(); len(s) != 2 || s[0] != 1 || s[1] != 6 {
		t.Fatalf("delivered %v while group g is held by 1; want [1 6]", s)
	}
	// Ack each message of g as it comes: the rest of g follows, in order.
	for now := int64(2); now < 20 && len(got) < 6; now++ {
		d := got[len(got)-1]
		if d.Msg.Group != "g" {
			d = got[0]
		}
		ab, _ := c.Ack(d.C, d.Msg.ID, d.Attempt, now)
		for _, op := range ab.Ops {
			delete(journal, op.Msg.ID)
		}
		c.Done(ab.Seq, Result{}, nil, now)
		pump(now)
	}
	if s := ids(); len(s) != 6 || s[2] != 2 || s[3] != 3 || s[4] != 4 || s[5] != 5 {
		t.Fatalf("delivered %v, want [1 6 2 3 4 5]", s)
	}
}

// Seeds that failed before each fix (the fix each one needs in brackets),
// with the 300 steps they need.
func TestSimRegressionSeeds(t *testing.T) {
	for _, seed := range []uint64{
		146,  // MoveOut skips what a pending purge deletes
		512,  // a message moving out holds its group
		420,  // a paged-in NACK back-off holds its group
		313,  // a stale page-in does not bring back a message moved out
		2820, // a purge does not take kept, unpaged messages for paged in
		1599, // a failed move of an unpaged message leaves the queue paging
		4,    // a window of 1 pages
		3,    // an ack timeout firing leaves the count of the other deadlines right
		14,   // an overdue deadline of a pending claim asks no Wake in the past
		49,   // a page-in retry come due asks no Wake in the past
		8,    // blocked groups are parked: they do not hide the rest of the queue
	} {
		if _, err := runSim(simSeedSrc(seed), 300, "regression seed"); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}
