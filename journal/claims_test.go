package journal

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// TestStore_ClaimsTable: a claim's delivery count is read back after a
// reopen (Page, LoadPrefix), moves carry the count given, and deletes,
// moves and purges leave no claims row behind.
func TestStore_ClaimsTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.db")
	s := New(Config{Path: path})
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := apply(t, s, enq("q", "a"), enq("q", "b"), enq("q", "c"), enq("q", "d"), enq("p", "e"))
	if err != nil {
		t.Fatal(err)
	}
	id := func(i int) uint64 { return b.Ops[i].Msg.ID }
	if _, err := apply(t, s,
		appliance.Op{Kind: appliance.OpClaim, ID: id(0), Deliveries: 1},
		appliance.Op{Kind: appliance.OpClaim, ID: id(0), Deliveries: 2},
		appliance.Op{Kind: appliance.OpClaim, ID: id(1), Deliveries: 1},
		appliance.Op{Kind: appliance.OpClaim, ID: id(2), Deliveries: 4},
		appliance.Op{Kind: appliance.OpClaim, ID: id(3), Deliveries: 1},
		appliance.Op{Kind: appliance.OpClaim, ID: id(4), Deliveries: 1},
	); err != nil {
		t.Fatal(err)
	}
	mv, err := apply(t, s, appliance.Op{Kind: appliance.OpDelete, ID: id(1)},
		appliance.Op{Kind: appliance.OpMove, ID: id(2), Queue: "dlq", Deliveries: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Config{Path: path})
	ms, err := s.Load(context.Background(), "q", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]int{}
	for _, m := range ms {
		got[m.ID] = m.Deliveries
	}
	if len(ms) != 2 || got[id(0)] != 2 || got[id(3)] != 1 {
		t.Fatalf("after reopen: deliveries %v, want %d:2 %d:1", got, id(0), id(3))
	}
	var pref int
	if err := s.LoadPrefix(context.Background(), "q", 0, 1, 0, func(m *appliance.Message, _ int) error {
		pref = m.Deliveries
		return nil
	}); err != nil || pref != 2 {
		t.Fatalf("LoadPrefix deliveries %d (%v), want 2", pref, err)
	}
	dl, err := s.Load(context.Background(), "dlq", 0, 10)
	if err != nil || len(dl) != 1 || dl[0].ID != mv.Ops[1].NewID || dl[0].Deliveries != 4 {
		t.Fatalf("moved message: %+v %v, want id %d with 4 deliveries", dl, err, mv.Ops[1].NewID)
	}
	// Claim the moved message again: its count rises from the moved one.
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpClaim, ID: dl[0].ID, Deliveries: 5}); err != nil {
		t.Fatal(err)
	}
	if dl, err = s.Load(context.Background(), "dlq", 0, 10); err != nil || dl[0].Deliveries != 5 {
		t.Fatalf("moved then claimed: %+v %v, want 5 deliveries", dl, err)
	}
	purge := appliance.Op{Kind: appliance.OpPurge, Queue: "q", ID: id(3), Keep: []uint64{id(3)}}
	if _, err := apply(t, s, purge); err != nil {
		t.Fatal(err)
	}
	rows := func() (ids []int64) {
		r, err := s.db.Query(`SELECT id FROM claims ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for r.Next() {
			var i int64
			r.Scan(&i)
			ids = append(ids, i)
		}
		return ids
	}
	// Left: id(3) (kept by the purge), id(4) (queue p), the moved one.
	if got := rows(); len(got) != 3 || got[0] != int64(id(3)) || got[1] != int64(id(4)) || got[2] != int64(dl[0].ID) {
		t.Fatalf("claims rows %v, want [%d %d %d]", got, id(3), id(4), dl[0].ID)
	}
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpDelete, ID: id(3)}, appliance.Op{Kind: appliance.OpDelete, ID: id(4)}, appliance.Op{Kind: appliance.OpDelete, ID: dl[0].ID}); err != nil {
		t.Fatal(err)
	}
	if got := rows(); len(got) != 0 {
		t.Fatalf("claims rows %v after deleting every message, want none", got)
	}
}

// TestStore_Runs: deletes and claims of many messages across batches of
// one transaction (cut into statements of 256, 64, 16, 4 and 1) land on
// exactly the messages named, in order with the other ops: a claim of a
// gone message leaves nothing, a lower count never replaces a higher one.
func TestStore_Runs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.db")
	s := New(Config{Path: path})
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	const n = 347 // 256 + 64 + 16 + 4 + 4 + 1 + 1 + 1
	var ops []appliance.Op
	for i := 0; i < n; i++ {
		ops = append(ops, enq("q", "m"))
	}
	b, err := apply(t, s, ops...)
	if err != nil {
		t.Fatal(err)
	}
	id := func(i int) uint64 { return b.Ops[i].Msg.ID }
	// Submitted together so that one transaction takes them all.
	var batches []*appliance.Batch
	done := make(chan error, 8)
	submit := func(ops ...appliance.Op) {
		bb := &appliance.Batch{Ops: ops, Done: func(_ *appliance.Batch, err error) { done <- err }}
		batches = append(batches, bb)
	}
	var claims, dels []appliance.Op
	for i := 0; i < n; i++ {
		claims = append(claims, appliance.Op{Kind: appliance.OpClaim, ID: id(i), Deliveries: 2})
		if i%3 == 0 {
			dels = append(dels, appliance.Op{Kind: appliance.OpDelete, ID: id(i)})
		}
	}
	submit(claims[:200]...)
	submit(claims[200:]...)
	submit(dels...)
	// Claimed after its delete in the same transaction: nothing stays.
	submit(appliance.Op{Kind: appliance.OpClaim, ID: id(0), Deliveries: 3},
		appliance.Op{Kind: appliance.OpClaim, ID: id(1), Deliveries: 5},
		appliance.Op{Kind: appliance.OpClaim, ID: id(1), Deliveries: 4},
		appliance.Op{Kind: appliance.OpRelease, ID: id(2), NotBefore: 7},
		appliance.Op{Kind: appliance.OpClaim, ID: id(2), Deliveries: 3})
	for _, bb := range batches {
		s.Submit(bb)
	}
	for range batches {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Config{Path: path})
	ms, err := s.Load(context.Background(), "q", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != n-len(dels) {
		t.Fatalf("%d messages left, want %d", len(ms), n-len(dels))
	}
	for _, m := range ms {
		want := 2
		switch m.ID {
		case id(1):
			want = 4 // the last claim's count (a revert lowers it)
		case id(2):
			want = 3
			if m.NotBefore != 7 {
				t.Errorf("message %d not_before %d, want 7", m.ID, m.NotBefore)
			}
		}
		if m.Deliveries != want {
			t.Errorf("message %d: %d deliveries, want %d", m.ID, m.Deliveries, want)
		}
		if (m.ID-id(0))%3 == 0 {
			t.Errorf("message %d was deleted but is there", m.ID)
		}
	}
	var orphans int
	if err := s.db.QueryRow(`SELECT count(*) FROM claims WHERE id NOT IN (SELECT id FROM messages)`).Scan(&orphans); err != nil || orphans != 0 {
		t.Fatalf("%d claims rows without a message (%v), want 0", orphans, err)
	}
}
