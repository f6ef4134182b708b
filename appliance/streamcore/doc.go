// Package streamcore is the deterministic state machine of one stream: an
// append-only log of offsets [First, Next) and the subscribers reading it.
//
// It has no goroutines, locks, clocks, timers, sockets or SQL. Every input
// is a method call (the time, where one matters, is an argument); every
// effect is an output collected until the caller takes it with Take:
//
//   - Reads: page reads the caller runs against the journal (offsets
//     >= From, at most Limit messages and about MaxBytes), answered by
//     Paged. A subscriber has at most one read outstanding, so the memory
//     a stream holds for delivery is at most one page per subscriber.
//
// Paged answers with the MESSAGEs to write, in offset order, each with the
// offset from which retention removed offsets just before it (a gap), if
// any. Ack returns the durable cursor move to journal, if any; the caller
// reports its commit with CursorCommitted. Nack settles offsets for the
// subscription (credit) without moving its cursor.
//
// The caller's duties (the shell in package appliance):
//  1. Serialise every call (one lock per stream).
//  2. Call Appended for each committed append in commit order, Trimmed for
//     each committed retention step.
//  3. Run each Read and answer it with Paged (an empty page too), once.
//  4. Journal each cursor move before acknowledging the ACK (RECEIPT).
//
// Invariants (checked by the seeded simulation in sim_test.go):
//   - A subscriber receives offsets in strictly increasing order, never one
//     twice, starting at its start point; an offset is skipped only if
//     retention removed it, and the first message after skipped offsets
//     names where the skip began (GapFrom).
//   - A client-mode subscriber never holds more than its prefetch of
//     unacknowledged messages.
//   - A durable cursor never moves back; a subscriber with a cursor starts
//     at the cursor's committed position (the first offset not
//     acknowledged), so after a crash it sees again at most what it had not
//     acknowledged, and nothing it had.
//   - One subscriber at a time per cursor name.
//   - Consumers never remove messages: only Trimmed moves First.
package streamcore
