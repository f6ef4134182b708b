// Package multicast is Herald's reliable multicast: a NAK-based protocol (after PGM and Aeron) that
// carries topic messages from one sender to any number of receivers on a LAN, in order per topic,
// repairing losses and reporting what cannot be repaired as an explicit Gap — never a silent hole.
// The wire format is specified in docs/multicast-protocol.md; wire.go is its reference codec.
//
// Two layers:
//
//   - SenderCore and ReceiverCore are sans-IO state machines (etcd-raft style): datagrams in
//     (Step, Handle), time in (Tick), datagrams and events out (Ready). They own no socket, clock,
//     goroutine or global random source, so tests drive them with a simulated clock, scripted loss
//     and a hundred receivers.
//   - Sender and Receiver are the socket shells any Go program on the LAN can import: the appliance
//     uses Sender, `herald listen` and subscribers use Receiver.
//
// The caller's duties with a core (the shells do exactly this):
//
//  1. Feed every received datagram to Step (sender: NAKs) or Handle (receiver: the group).
//  2. Call Tick(now) no later than Deadline().
//  3. After every call, take Ready() and act on all of it before the next call: multicast the
//     sender's datagrams in order; send the receiver's NAKs by unicast to their address and hand
//     its events to the application in order.
//  4. Sender only: Publish each message, then Flush when no more are queued right now (natural
//     batching: a datagram fills up under load and leaves at once when the queue drains).
//  5. Receiver only: SetBehind(true) while datagrams are known to wait unread in the socket, so
//     that give-ups wait for repairs that may be among them. Handle's error says why a datagram
//     was dropped (ErrAuth, ErrAhead, ErrOtherSession, ...): the shell logs them, rate-limited.
//
// Guarantee (README.md, guarantee 6): a receiver that keeps up within the sender's retransmit
// window gets every message of every stream exactly once and in order; one that falls behind gets
// a Gap naming the exact stream sequences lost, before the next message of that stream.
package multicast
