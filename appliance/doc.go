// Package appliance is Herald's broker core: STOMP sessions, durable queues
// and broadcast topics. It owns the domain types (Message, Config) and the
// Journal interface its durable store must implement; package journal
// implements it and cmd/heraldd wires the two.
//
// Data flow. A session's reader goroutine decodes frames and handles them in
// order. A SEND to /queue/NAME becomes an OpEnqueue batch for the journal;
// the RECEIPT is written only after the batch committed, and only then is
// the message handed to the queue (queue.committed). A SEND to /topic/NAME
// is fanned out at once to the matching subscribers and TopicSinks
// (multicast channels), and kept in memory when a topics.history rule
// matches it (topic_history.go, core in package histcore). A session's writer goroutine batches outgoing frames
// into few writes and sends heart-beats.
//
// Queues. Each queue keeps in memory only a window of its ready messages
// (the rest stays in the journal and is paged in by ID), the delayed ones (a
// heap by NotBefore) and the deliveries in flight. Dispatch hands ready
// messages to consumers with prefetch credit, round robin, skipping message
// groups that already have a message in flight. A client-ack delivery is
// first claimed in the journal (its delivery count raised durably) and its
// MESSAGE written after the claim committed. Every delivery attempt has its
// own ack token, so a stale ACK or NACK is recognised and ignored.
//
// Invariants the code relies on:
//   - The journal completes batches in submission order; message IDs grow in
//     commit order, so a queue learns of new messages in ID order.
//   - queue.mu is never held while calling Journal.Submit: completions take
//     queue.mu. Work found under the lock (claims, dead-letter moves, drops)
//     is collected and submitted by flush after unlocking.
//   - Lock order: Broker.mu, then queue.mu, then session.outMu.
//   - Topic history: hist.mu, then topicRegistry.mu (last values); hist.mu,
//     then a subscription's subHistory.mu, then session.outMu. Nothing
//     under them writes to a socket.
package appliance
