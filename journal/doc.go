// Package journal is Herald's durable store: one SQLite database in WAL mode
// implementing appliance.Journal.
//
// One writer goroutine owns the write connection. Every batch submitted by
// every connection while a transaction is being committed joins the next
// transaction (group commit: one fsync for many messages). Each batch runs
// inside its own SAVEPOINT, so a batch that fails (a constraint, a bug) fails
// alone; a failed COMMIT (disk full, I/O error) fails every batch of that
// transaction and applies none of them. Completions run on a second goroutine
// in submission order so the writer can start the next transaction at once.
//
// Readers (recovery, paging of deep queues, admin peeks, backup) use other
// connections of the pool; WAL lets them read while the writer writes.
// Checkpoints run in the background so the WAL stays bounded.
package journal
