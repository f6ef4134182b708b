package journal

import (
	"context"
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// In one group commit, a batch whose mark raise and claims join
// the shared run, followed by a batch that fails: the redo with a
// savepoint per batch keeps the first batch's raise and row, and drops
// the failing batch's raise and row.
func TestStore_MarkInGroupCommitWithFailingBatch(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{})
	b, err := apply(t, s, enq("q", "a"), enq("q", "b"), enq("q", "c"))
	if err != nil {
		t.Fatal(err)
	}
	id := func(i int) uint64 { return b.Ops[i].Msg.ID }
	ok := &appliance.Batch{Ops: []appliance.Op{
		{Kind: appliance.OpClaim, ID: id(0), Deliveries: 1, Mark: true, Queue: "q"},
		{Kind: appliance.OpClaim, ID: id(1), Deliveries: 0},
	}}
	bad := &appliance.Batch{Ops: []appliance.Op{
		{Kind: appliance.OpClaim, ID: id(2), Deliveries: 1, Mark: true, Queue: "q"},
		{Kind: appliance.OpClaim, ID: id(1), Deliveries: 5},
		{Kind: appliance.OpMove, ID: 999999, Queue: "x"}, // fails: no such message
	}}
	s.wmu.Lock()
	errs := s.commit([]*appliance.Batch{ok, bad}, 5)
	s.wmu.Unlock()
	if errs[0] != nil || errs[1] == nil {
		t.Fatalf("errs %v, want the second batch alone to fail", errs)
	}
	ms, err := s.Page(ctx, appliance.PageRequest{Queue: "q", Limit: 10})
	if err != nil || len(ms) != 3 {
		t.Fatal(ms, err)
	}
	got := []int{ms[0].Deliveries, ms[1].Deliveries, ms[2].Deliveries}
	if got[0] != 1 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("deliveries %v, want [1 0 0] (mark at a, row 0 for b, nothing of the failed batch)", got)
	}
}
