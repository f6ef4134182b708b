package appliance

import "testing"

// The intake hands batches over one connection's at a time in turn, each
// connection's in its own order, and holds back once inflightMax bytes are
// in the journal's hands.
func TestIntake_RoundRobinInOrder(t *testing.T) {
	in := newIntake(nil, 3)
	var a, b intakeQ
	mk := func(tag string) *Batch { return &Batch{Ops: []Op{{Kind: OpBarrier, Queue: tag}}} }
	for _, tag := range []string{"a1", "a2", "a3", "a4"} {
		in.add(&a, mk(tag), 1)
	}
	in.add(&b, mk("b1"), 1)
	in.add(&b, mk("b2"), 1)
	var got []string
	var taken []*Batch
	for bt := in.next(); bt != nil; bt = in.next() {
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
	if cg := cgroupMemoryMax(); cg > 0 && DefaultMemoryBudget() > max(cg*2/5, 64<<20) {
		t.Fatalf("default budget %d above 40%% of the cgroup's %d", DefaultMemoryBudget(), cg)
	}
}
