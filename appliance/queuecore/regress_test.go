package queuecore

import (
	"errors"
	"testing"
)

// Regression tests for bugs the simulation (sim_test.go) found. Each one
// failed before its fix.

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
// Found by seed 56.
func TestRegress_MoveOutDuringPurge(t *testing.T) {
	c := New(Config{Window: 10, RetryMin: 1, RetryMax: 1}, 1) // a DLQ
	c.Committed(&Msg{ID: 1, Size: 10}, false, 0)
	p := c.Purge(0)
	mv := c.MoveOut([]*Msg{{ID: 1, Size: 10}}, "main", 0)
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
// nothing of its group may have been delivered before it. Found by seed 667.
func TestRegress_MoveOutHoldsGroup(t *testing.T) {
	c := New(Config{Window: 10, RetryMin: 1, RetryMax: 1}, 1)
	c.Committed(&Msg{ID: 1, Size: 1, Group: "g"}, false, 0)
	c.Committed(&Msg{ID: 2, Size: 1, Group: "g"}, false, 0)
	mv := c.MoveOut([]*Msg{{ID: 1, Size: 1, Group: "g"}}, "main", 0)
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
// head of its group when paged in again. Found by seed 1007.
func TestRegress_PagedBackoffHoldsGroup(t *testing.T) {
	const now = 1000
	c := New(Config{Window: 10}, 1)
	c.Recover(2, 2, 2, now)
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
// paged in yet) must still advance past them: the queue took itself for
// fully paged in, and when the move failed the messages were never seen
// again. Found by seed 6026.
func TestRegress_PagedSkipsMovingMessages(t *testing.T) {
	c := New(Config{Window: 10, RetryMin: 1, RetryMax: 1}, 1)
	c.Recover(2, 2, 2, 0)
	req := c.Take().PageIn
	msgs := func() []*Msg { return []*Msg{{ID: 1, Size: 1}, {ID: 2, Size: 1}} }
	mv := c.MoveOut(msgs(), "main", 0)
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

// The seeds that found the bugs above (and seed 39, a NACK batch held until
// after the message was redelivered and acked), with the steps they need.
func TestSimRegressionSeeds(t *testing.T) {
	for _, seed := range []uint64{39, 56, 667, 1007, 6026} {
		if _, err := runSim(simSeedSrc(seed), 300, "regression seed"); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}
