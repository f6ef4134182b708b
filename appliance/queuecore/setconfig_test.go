package queuecore

import (
	"fmt"
	"testing"
)

// SetConfig (a reload) changes the limits for the next Reserve, wakes
// producers blocked on a full queue, keeps every message, and pages in
// more once the window grows.
func TestCore_SetConfigLimitsAndWindow(t *testing.T) {
	c := New(Config{Window: 2, MaxMessages: 3}, 1)
	for id := uint64(1); id <= 3; id++ {
		if ok, why := c.Reserve(1); !ok {
			t.Fatalf("reserve %d: refused (%s)", id, why)
		}
		c.Committed(&Msg{ID: id, Size: 1}, true, 0)
	}
	if ok, why := c.Reserve(1); ok || why != "max_messages=3" {
		t.Fatalf("4th reserve at max_messages=3: got %v %q, want refused by max_messages=3", ok, why)
	}
	c.Take()
	cfg := c.Config()
	cfg.MaxMessages = 5
	cfg.Window = 10
	c.SetConfig(cfg, 1)
	out := c.Take()
	if !out.Space {
		t.Errorf("SetConfig: no Space output: producers blocked on the old limit would not retry")
	}
	if got := c.Config().MaxMessages; got != 5 {
		t.Errorf("Config().MaxMessages after SetConfig: %d, want 5", got)
	}
	if ok, why := c.Reserve(1); !ok {
		t.Errorf("reserve after raising max_messages to 5: refused (%s)", why)
	}
	// Messages 1 and 2 were in memory (window 2), 3 spilled: the wider
	// window asks for it.
	if out.PageIn == nil || out.PageIn.After != 2 {
		t.Errorf("after widening the window: page-in %+v, want one after message 2", out.PageIn)
	}
	if snap := c.Snapshot(); snap.Count != 3 {
		t.Errorf("count after SetConfig: %d, want 3 (nothing dropped)", snap.Count)
	}
	// Defaults apply as in New.
	c.SetConfig(Config{}, 2)
	if got := c.Config(); got.Window != DefaultWindow || got.RetryMin != DefaultRetryMin || got.GroupOverflow != DefaultGroupOverflow {
		t.Errorf("SetConfig(Config{}): %+v, want New's defaults", got)
	}
}

// SetConfig lowers max_deliveries: the next failed delivery past the new
// bound dead-letters.
func TestCore_SetConfigMaxDeliveries(t *testing.T) {
	c := New(Config{Window: 10, MaxDeliveries: 10, DeadLetter: true}, 1)
	c.Committed(&Msg{ID: 1, Size: 1}, false, 0)
	a := &Consumer{Prefetch: 1, Mode: AckClientIndividual}
	c.Subscribe(a, 0)
	now := int64(0)
	for attempt := 1; attempt <= 2; attempt++ {
		out := c.Take()
		for _, b := range out.Batches {
			c.Done(b.Seq, Result{NewIDs: make([]uint64, len(b.Ops))}, nil, now)
		}
		out = c.Take()
		if len(out.Deliver) != 1 {
			t.Fatalf("attempt %d: delivered %d, want 1", attempt, len(out.Deliver))
		}
		if attempt == 2 {
			cfg := c.Config()
			cfg.MaxDeliveries = 2
			c.SetConfig(cfg, now)
		}
		b, _ := c.Nack(a, out.Deliver[0].Msg.ID, out.Deliver[0].Attempt, true, now)
		if b == nil {
			t.Fatalf("attempt %d: nack returned no batch", attempt)
		}
		var kinds []string
		for _, op := range b.Ops {
			kinds = append(kinds, fmt.Sprint(op.Kind))
			if attempt == 2 && op.Kind == OpDeadLetter && op.Reason != "max-deliveries" {
				t.Errorf("dead-letter reason %q, want max-deliveries", op.Reason)
			}
		}
		dl := false
		for _, op := range b.Ops {
			dl = dl || op.Kind == OpDeadLetter
		}
		if want := attempt == 2; dl != want {
			t.Errorf("nack of attempt %d (max_deliveries %d): dead-lettered %v, want %v (ops %v)", attempt, c.Config().MaxDeliveries, dl, want, kinds)
		}
		c.Done(b.Seq, Result{NewIDs: make([]uint64, len(b.Ops))}, nil, now)
		now += 10_000
		c.Tick(now)
	}
}

// TestSimReconfig is TestSim with SetConfig among the actions (about one
// step in 40, on either queue): every invariant holds across reloads of
// the window, limits, max_deliveries, back-off and expired_to_dlq.
//
//	go test -run TestSimReconfig -sim.seed=N -sim.trace ./appliance/queuecore
func TestSimReconfig(t *testing.T) {
	if *flagSimSeed >= 0 {
		seed := uint64(*flagSimSeed)
		if _, err := runSimWith(simSeedSrc(seed), *flagSimSteps, fmt.Sprintf("seed %d", seed), true); err != nil {
			t.Fatalf("%v\nreproduce: go test ./appliance/queuecore -run TestSimReconfig -sim.seed=%d -sim.steps=%d", err, seed, *flagSimSteps)
		}
		return
	}
	seeds := *flagSimSeeds / 2
	if testing.Short() {
		seeds = min(seeds, 100)
	}
	for seed := *flagSimFrom; seed < *flagSimFrom+uint64(seeds); seed++ {
		if _, err := runSimWith(simSeedSrc(seed), *flagSimSteps, fmt.Sprintf("seed %d", seed), true); err != nil {
			t.Fatalf("%v\nreproduce: go test ./appliance/queuecore -run TestSimReconfig -sim.seed=%d -sim.steps=%d", err, seed, *flagSimSteps)
		}
	}
}
