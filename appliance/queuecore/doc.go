// Package queuecore is the deterministic state machine of one durable
// queue: what is ready, delayed, in flight and on its way out; who may
// receive what; which journal operations make each change durable.
//
// It has no goroutines, locks, clocks, timers, sockets or SQL. Every input
// is a method call that carries the current time (milliseconds since the
// epoch); every effect is an output collected until the caller takes it
// with Take:
//
//   - Batches: journal work, to be submitted in the order given. Each
//     batch's outcome comes back through Done(seq, result, err).
//   - Deliver: deliveries whose MESSAGE may now be written. For auto-ack
//     consumers the caller reports the write with Written, which deletes
//     them.
//   - PageIn: a request to load the next messages of the queue from the
//     journal (ID > After, at most Limit), answered by Paged (a failed
//     read too: the core asks again after a back-off and reports the run
//     of failures through PageInFailing).
//   - Moved: messages that left for another queue (dead-lettered, or
//     requeued out of a dead-letter queue), with their new IDs; the caller
//     hands them to that queue's Committed.
//   - Wake: the earliest time the core wants a Tick (a delayed message
//     becomes due, an ack deadline passes, a retry is due).
//   - Space: limits were freed; producers blocked on a full queue may retry.
//
// SetConfig is an input too (a configuration reload): the new limits,
// max_deliveries, back-off and window apply from the next call that uses
// them; nothing in memory is dropped or moved by it.
//
// The caller's duties (the shell in package appliance):
//  1. Serialise every call (one lock per queue).
//  2. Submit Batches in order, and call Done once per batch, from the
//     journal's completion order. Acks and nacks return their batch to the
//     caller, which may combine it with other work (transactions).
//  3. Call Committed for each enqueue, and each message moved into the
//     queue (Moved), in commit order, which is ID order: a transaction
//     reports its SENDs and the moves its acks made in the order of its
//     operations. (A report out of order is EvOutOfOrder: a bug.)
//  4. Call Tick at or after Wake.
//  5. Never block inside a call: the core never asks for it.
//
// Invariants (checked by the seeded simulation in sim_test.go after every
// step):
//   - A message is in exactly one state: ready, delayed, in flight, or
//     leaving (its delete, move or dead-letter is being committed); memory
//     changes only after the journal committed (purge, requeue, ack).
//   - At most one message of a group is in flight or in back-off, and a
//     group's messages are delivered in ID order.
//   - Ready messages are dispatched in ID order (FIFO per queue), skipping
//     only groups that are blocked; no scan limit. Memory holds at most
//     Window*GroupOverflow ready messages (after SetConfig lowers Window,
//     what is there comes down to it as messages leave, with no page-in
//     meanwhile): past that, the blocked group
//     with the most of them is parked (its messages stay in the journal
//     and are paged in again, in order, once it unblocks), so that no
//     number of blocked messages hides the rest of the queue.
//   - Delayed messages are held apart from the ready window, so any number
//     of them never blocks ready messages.
//   - count and bytes equal what the journal holds for the queue;
//     MemBytes equals the sizes of the messages held in memory (what the
//     broker charges to its memory budget). SetWindowCap lowers the byte
//     window while that budget is short: messages committed past it stay
//     in the journal and are paged in once it is lifted.
//   - A failed journal write never makes dispatch spin: the affected
//     messages wait out a back-off that grows with consecutive failures.
//   - A failed page-in is asked again after a back-off, and the core
//     reports the run of failed page-ins it is in (PageInFailing, and the
//     events EvPageInFailed, EvPageInRecovered): a run starts at a failed
//     page-in (its time stays the first failure's; its error is the last
//     one's) and ends at the next page-in that succeeds, from the journal
//     or the backlog cache, or once nothing is left to page in.
package queuecore
