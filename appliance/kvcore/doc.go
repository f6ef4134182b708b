// Package kvcore is the deterministic state machine of Herald's key-value
// buckets (/kv/BUCKET.KEY): the current value of every key, each bucket's
// revision counter, compare-and-set, limits, and the watchers that receive
// every change after a consistent snapshot.
//
// It has no goroutines, locks, clocks, sockets or SQL. The shell (package
// appliance, kv.go) serialises every call under one lock and drives a write
// in two steps:
//
//  1. Prepare checks a request (compare-and-set, value size, key count,
//     bucket bytes, bucket count) against the committed state and returns
//     the Entry to journal, its Revision the bucket's next one. Prepare
//     changes nothing: a write whose journal batch fails leaves no trace,
//     and its revision is used by the next write instead (it was never
//     shown to anyone).
//  2. Once the journal has committed the entry, Apply makes it the key's
//     value and returns one Delivery per watcher whose pattern matches.
//
// Watch registers a watcher and returns, in the same call, the snapshot of
// every matching key and the bucket revision it reflects: every later change
// comes out of Apply with a higher revision, so a watcher sees each
// committed change exactly once, never a gap nor a duplicate between the
// snapshot and the live changes, however writes interleave with the
// subscription (the shell makes both calls under its lock).
//
// Transactions: PrepareTxn checks a set of requests as if applied in order
// (conditions judged against the state the earlier ones make) and returns
// entries with consecutive revisions of each bucket, changing nothing;
// ApplyTxn commits them together (the journal stored them in one batch)
// and marks each watcher's deliveries with the set's first revision and
// its last one, so a watcher applies the set at once.
//
// Group commit: PrepareEach checks independent writes in order, each
// against the state the earlier successful ones make, and returns an entry
// or an error for each, changing nothing; the shell journals the entries
// in one batch and Applies them one by one.
//
// Expiry: a put may carry Expires (Unix ms, computed by the shell from the
// time and a TTL); Expire(now) returns the deletes of every key due at now
// (the time is a value passed in: the shell's timer only calls it, at
// NextExpiry), committed like a transaction. A key past its time when the
// store is recovered is due at the first Expire.
//
// Invariants (checked by the seeded simulation in sim_test.go after every
// step):
//   - revisions of a bucket grow by one with each committed change and are
//     never reused, across restarts too (Recover restores the counter);
//   - a compare-and-set succeeds exactly when the key's revision (0: no
//     such key) equals the expected one;
//   - a bucket never holds more keys, value bytes or buckets than its
//     limits allow, and no value is larger than MaxValueBytes;
//   - a watcher's snapshot plus its live changes replay to exactly the
//     committed state of the keys it matches;
//   - a transaction's compare-and-set conditions all hold in order, or
//     nothing of it is prepared; its deliveries to each watcher are in
//     order, complete, and the last is marked;
//   - Expire returns exactly the keys whose expiry time has passed.
package kvcore
