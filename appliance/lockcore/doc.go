// Package lockcore is the deterministic state machine of Herald's advisory
// locks (/lock/NAME): who holds each lock, who waits for it in order, and
// its fencing token.
//
// It has no goroutines, locks, clocks, sockets or SQL. The shell (package
// appliance, lock.go) serialises every call under one lock. A SUBSCRIBE to
// /lock/NAME is Acquire, its UNSUBSCRIBE (or the end of its connection,
// heart-beat timeout included: the connection is the lease) is Release.
// Both may return a Grant: the lock passes to an owner with a token one
// above the lock's last. The shell journals the token before it tells the
// owner (a MESSAGE with lock-token:N), so a token shown to anyone is
// durable and, after a restart (Recover with the journaled tokens), every
// new token is above it. A grant whose token the journal could not store
// is given back by the shell (Release), never shown.
//
// Invariants (checked by the seeded simulation in sim_test.go after every
// step):
//   - mutual exclusion: a lock has at most one holder;
//   - FIFO: a released lock passes to the owner that has waited longest;
//   - tokens of a lock grow with every grant and never go back, across
//     restarts too;
//   - an owner that releases (or whose connection ends) neither holds nor
//     waits for the lock afterwards, and a free lock with waiters is never
//     left ungranted;
//   - the number of lock names and of waiters per lock stay within Limits.
package lockcore
