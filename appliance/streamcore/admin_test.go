package streamcore

import (
	"errors"
	"sort"
	"testing"
)

// The admin's cursor operations: a held cursor refuses a subscriber; a
// reset cursor (back or forth, bounded by next) is where its next
// subscriber starts; CursorNames lists committed and active cursors.
func TestCursorHoldAndSet(t *testing.T) {
	c := New(Config{PageMessages: 10, PageBytes: 1 << 20}, 0, 0, 0, 0, map[string]uint64{"w": 3})
	for i := uint64(0); i < 8; i++ {
		c.Appended(i, 10)
	}
	if _, err := c.Subscribe(1, Client, 10, Start{Kind: StartNext}, "x"); err != nil {
		t.Fatal(err)
	}
	names := c.CursorNames()
	sort.Strings(names)
	if len(names) != 2 || names[0] != "w" || names[1] != "x" || c.CursorActive("w") || !c.CursorActive("x") {
		t.Errorf("cursors %v, w active %v, x active %v; want [w x], only x active", names, c.CursorActive("w"), c.CursorActive("x"))
	}
	if c.HoldCursor("x") {
		t.Error("HoldCursor of a cursor with a subscriber succeeded")
	}
	if !c.HoldCursor("w") {
		t.Fatal("HoldCursor of a free cursor failed")
	}
	if _, err := c.Subscribe(2, Client, 10, Start{Kind: StartFirst}, "w"); !errors.Is(err, ErrCursorInUse) {
		t.Errorf("subscribe to a held cursor: %v, want ErrCursorInUse", err)
	}
	c.SetCursor("w", 1) // back
	c.ReleaseCursor("w")
	pos, err := c.Subscribe(3, Client, 10, Start{Kind: StartNext}, "w")
	if err != nil || pos != 1 {
		t.Errorf("after a reset to 1 the cursor's subscriber starts at %d (%v)", pos, err)
	}
	c.Unsubscribe(3)
	c.SetCursor("w", 100) // past next: bounded
	if p, _ := c.Cursor("w"); p != 8 {
		t.Errorf("cursor set past next is at %d, want next 8", p)
	}
	c.ReleaseCursor("x") // not held by the admin: the subscriber keeps it
	if !c.CursorActive("x") {
		t.Error("ReleaseCursor freed a subscriber's cursor")
	}
}
