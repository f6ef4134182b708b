package streamcore

import "testing"

// TestNack_CursorStopsAtNacked: Nack's contract, "a durable cursor does
// not move past them, so a consumer that stops after a NACK reads them
// again when it resumes", in client-individual mode. The move after a
// NACK was computed from the offsets still unacknowledged only, so an ACK
// of a later offset moved the cursor past the NACKed one. (The shell
// takes x-stream-consumer with ack:client only, where an ACK is
// cumulative; this mode is the core's.)
func TestNack_CursorStopsAtNacked(t *testing.T) {
	c := New(Config{}, 0, 3, 3, 3, nil)
	if _, err := c.Subscribe(1, ClientIndividual, 10, Start{Kind: StartFirst}, "w"); err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Take() {
		c.Paged(r.Sub, []Entry{{0, 1}, {1, 1}, {2, 1}})
	}
	if !c.Nack(1, 0) {
		t.Fatal("nack 0 not held")
	}
	mv, held := c.Ack(1, 1)
	if !held {
		t.Fatal("ack 1 not held")
	}
	if mv != nil && mv.Offset > 0 {
		t.Fatalf("after NACK 0 and ACK 1 the cursor moves to %d: offset 0 (NACKed) will not be read again on resume", mv.Offset)
	}
	if mv, _ := c.Ack(1, 2); mv != nil && mv.Offset > 0 {
		t.Fatalf("after NACK 0 and ACK 1, 2 the cursor moves to %d, want it kept before 0", mv.Offset)
	}
}
