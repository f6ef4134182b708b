// Package auth is Herald's authentication and authorization core: the users
// file (users, groups, argon2id password hashes and permissions), destination
// permission patterns, the policy a broker applies to each connection, and
// the failed-login throttle.
//
// It is deterministic: no goroutines, clocks, sockets or files. Callers pass
// the time (Throttle) and the file's bytes (DecodeUsers); the broker holds
// the current *Policy and swaps it atomically on reload.
//
// Permissions are granted on destination patterns: /queue/NAME,
// /topic/NAME, /kv/BUCKET.KEY (key-value store) or /lock/NAME (advisory
// locks: taking one, a SUBSCRIBE, needs write), where NAME is dot-separated segments and the segment * matches
// one segment, > one or more trailing segments (as topic subscriptions and
// queue policies use them). Three permissions exist:
//
//   - read: SUBSCRIBE (queues, dead-letter queues, topics; a wildcard topic
//     subscription needs a grant that covers the whole pattern)
//   - write: SEND
//   - create: a SEND or SUBSCRIBE that creates a queue that does not exist
//     yet, a put that creates a key-value key
//
// Nothing is allowed unless granted. Temporary queues are not governed by
// grants: they are their owner connection's alone (see the appliance).
package auth
