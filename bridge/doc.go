// Package bridge links a Herald appliance to a NATS JetStream cluster or to
// another STOMP broker, carrying queues exactly once across the link and
// topics live, best effort ([[bridge]] in the configuration).
//
// Each direction of a bridge is a deterministic Core (core.go: the window
// of messages in flight, what has been confirmed where and may be
// acknowledged at the source, the reconnection back-off) driven by one
// goroutine (bridge.go) that owns the connections: to this appliance, a
// STOMP client over loopback TCP to its own listener (the broker's own
// session code, so that queue semantics, permissions and the journal are
// exactly a client's), and to the peer, nats.go or the same STOMP client.
//
// Out: the local queue is consumed with ack:client-individual and a
// prefetch of max_in_flight; each message is published with the dedup id
// APPLIANCE_ID:MESSAGE_ID (Nats-Msg-Id, or dedup-id for a STOMP peer), and
// ACKed locally only once the JetStream PubAck (or the RECEIPT) arrived.
// In: a durable JetStream consumer (or a STOMP subscription with client
// acks) feeds local SENDs with a dedup-id of
// js:BRIDGE:STREAM:CREATED:SEQUENCE (CREATED: the stream's creation time)
// or stomp:BRIDGE:MESSAGE_ID; the remote ack follows the local RECEIPT,
// which Herald sends once the message is committed to its journal.
//
// Order: out to JetStream, a publish behind an unconfirmed one carries
// Nats-Expected-Last-Sequence (the sequence the one before is predicted to
// have), so the stream stores nothing past a message that failed; another
// writer to the stream is noticed and the bridge then sends one at a time.
// In from JetStream, the Sequencer (inorder_core.go) passes messages on in
// stream order, holding back those that overtook one delivered to a lost
// connection. docs/design.md, "Bridges", says what is promised.
//
// Loop prevention: every message crossing a bridge carries
// herald-bridge-origin (the appliance ids it left, comma-separated) and
// herald-bridge-hops; a bridge does not bring in a message that already
// left this appliance, nor send one that crossed max_hops bridges.
package bridge
