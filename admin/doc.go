// Package admin is Herald's administration interface: an HTTP/JSON API served
// on a unix socket (Server), its client (Client, used by the herald CLI), and
// Prometheus metrics on their own TCP listener (Metrics).
//
// The JSON of every endpoint is a written contract: docs/admin-api.md. The
// CLI's --json output is the API's JSON, so scripts may rely on either.
//
// Access control is the socket file's: mode 0660, owned by the daemon's user
// and group, so only root and members of that group can administer the
// daemon. Nothing admin-level is served over TCP: the metrics listener serves
// /metrics and /healthz only.
//
// The daemon's duties, in order:
//
//  1. Claim the socket's path with LockSocket before opening the journal or
//     listening on anything, and fail startup if it fails (another daemon
//     holds the socket's lock file or answers on it, or it cannot be
//     created): a daemon refused there has served no client.
//  2. Create a Metrics with NewMetrics before opening the journal, and pass
//     its ObserveCommit to journal.Store.SetCommitHook.
//  3. After the broker listens, call New, with the claim in
//     Options.SocketLock, and Start; fail startup if Start fails.
//  4. Register multicast channels with SetChannels when they exist.
//  5. On shutdown, call Close first, so no admin operation races the
//     broker's shutdown.
package admin
