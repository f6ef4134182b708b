package journal

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/herald-mq/herald/appliance"
)

// TestStore_DeliveredMark: a claim with Mark raises its queue's delivered
// mark instead of writing a claims row; a message without a claims row
// counts one delivery at or below the mark (Page, LoadPrefix), one with a
// row counts the row's (a row of 0 included); the mark never goes down,
// is per queue, survives a reopen and is reported by Queues; a delete
// with NoClaim leaves other rows alone, one without removes the row.
func TestStore_DeliveredMark(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	s := mustOpen(t, Config{Path: path})
	b, err := apply(t, s, enq("q", "a"), enq("q", "b"), enq("q", "c"), enq("q", "d"), enq("q", "e"), enq("p", "f"))
	if err != nil {
		t.Fatal(err)
	}
	id := func(i int) uint64 { return b.Ops[i].Msg.ID }
	mark := func(i int) appliance.Op {
		return appliance.Op{Kind: appliance.OpClaim, ID: id(i), Deliveries: 1, Mark: true, Queue: "q"}
	}
	if _, err := apply(t, s, mark(0), mark(1), mark(2)); err != nil {
		t.Fatal(err)
	}
	// A lower raise does not lower it; a row of 0 (a message the mark
	// passed but that was not delivered) and a row of 3 override it.
	if _, err := apply(t, s, mark(1),
		appliance.Op{Kind: appliance.OpClaim, ID: id(1)},
		appliance.Op{Kind: appliance.OpClaim, ID: id(2), Deliveries: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpClaim, ID: id(0), Mark: true}); err == nil {
		t.Fatal("a mark claim without its queue was accepted")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Config{Path: path})
	type got struct {
		n   int
		row bool
	}
	want := []got{{1, false}, {0, true}, {3, true}, {0, false}, {0, false}}
	check := func(what string, want []got) {
		t.Helper()
		ms, err := s.Page(ctx, appliance.PageRequest{Queue: "q", Limit: 10})
		if err != nil || len(ms) != len(want) {
			t.Fatalf("%s: page %d messages (%v), want %d", what, len(ms), err, len(want))
		}
		for i, m := range ms {
			if (got{m.Deliveries, m.ClaimRow}) != want[i] {
				t.Fatalf("%s: message %d: deliveries %d, claim row %v; want %+v", what, i, m.Deliveries, m.ClaimRow, want[i])
			}
		}
		i := 0
		if err := s.LoadPrefix(ctx, "q", 0, 10, 0, func(m *appliance.Message, _ int) error {
			if (got{m.Deliveries, m.ClaimRow}) != want[i] {
				t.Fatalf("%s: LoadPrefix message %d: deliveries %d, claim row %v; want %+v", what, i, m.Deliveries, m.ClaimRow, want[i])
			}
			i++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	check("after reopen", want)
	p, err := s.Page(ctx, appliance.PageRequest{Queue: "p", Limit: 10})
	if err != nil || len(p) != 1 || p[0].Deliveries != 0 {
		t.Fatalf("queue p: %+v %v, want its message undelivered (another queue's mark)", p, err)
	}
	qs, err := s.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if w := map[string]uint64{"q": id(2), "p": 0}[q.Name]; q.Mark != w {
			t.Fatalf("queue %s: mark %d, want %d", q.Name, q.Mark, w)
		}
	}
	claims := func() int {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM claims`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := claims(); n != 2 {
		t.Fatalf("%d claims rows, want 2 (the marks wrote none)", n)
	}
	// NoClaim deletes only the message's row; a plain delete its claims
	// row too.
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpDelete, ID: id(0), NoClaim: true},
		appliance.Op{Kind: appliance.OpDelete, ID: id(1)}); err != nil {
		t.Fatal(err)
	}
	if n := claims(); n != 1 {
		t.Fatalf("%d claims rows after the deletes, want 1", n)
	}
	// A raise past messages enqueued later counts them; the messages of
	// the first raise that are gone are not brought back.
	if _, err := apply(t, s, mark(4)); err != nil {
		t.Fatal(err)
	}
	check("after a raise to the last", []got{{3, true}, {1, false}, {1, false}})
}

// TestStore_MarkMigration: a data directory of schema version 3 (no
// queues.mark) opens with the column added (every mark 0) and version 4.
func TestStore_MarkMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	s := mustOpen(t, Config{Path: path})
	if _, err := apply(t, s, enq("q", "a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER TABLE queues DROP COLUMN mark`, `UPDATE meta SET value='3' WHERE key='schema_version'`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s = mustOpen(t, Config{Path: path})
	var v string
	if err := s.db.QueryRow(`SELECT value FROM meta WHERE key='schema_version'`).Scan(&v); err != nil || v != "4" {
		t.Fatalf("schema version %q (%v), want 4", v, err)
	}
	ms, err := s.Page(ctx, appliance.PageRequest{Queue: "q", Limit: 10})
	if err != nil || len(ms) != 1 || ms[0].Deliveries != 0 {
		t.Fatalf("after the migration: %+v %v, want one undelivered message", ms, err)
	}
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpClaim, ID: ms[0].ID, Deliveries: 1, Mark: true, Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	if ms, err = s.Page(ctx, appliance.PageRequest{Queue: "q", Limit: 10}); err != nil || ms[0].Deliveries != 1 {
		t.Fatalf("after a raise: %+v %v, want one delivery", ms, err)
	}
}

// TestStore_ClaimLastCountWins: a claim's count replaces the stored one,
// also downwards (the revert of a delivery whose consumer left before the
// MESSAGE went out), in later batches and within one run of claims.
func TestStore_ClaimLastCountWins(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{Path: filepath.Join(t.TempDir(), "herald.db")})
	b, err := apply(t, s, enq("q", "a"), enq("q", "b"))
	if err != nil {
		t.Fatal(err)
	}
	a, bb := b.Ops[0].Msg.ID, b.Ops[1].Msg.ID
	claim := func(id uint64, n int) appliance.Op {
		return appliance.Op{Kind: appliance.OpClaim, ID: id, Deliveries: n}
	}
	if _, err := apply(t, s, claim(a, 3), claim(bb, 1), claim(bb, 2), claim(bb, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(t, s, claim(a, 2)); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Page(ctx, appliance.PageRequest{Queue: "q", Limit: 10})
	if err != nil || len(ms) != 2 || ms[0].Deliveries != 2 || ms[1].Deliveries != 1 {
		t.Fatalf("page %+v (%v), want deliveries 2 and 1 (the last claims)", ms, err)
	}
}
