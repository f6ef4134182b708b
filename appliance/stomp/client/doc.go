// Package client is a STOMP 1.0/1.1/1.2 client built on Herald's frame codec.
//
// It is used by the herald CLI, by the server's integration tests and by
// benchmarks, so it aims to be both strict and cheap:
//
//   - [Dial] opens a TCP connection, sends CONNECT and waits for CONNECTED
//     (an ERROR answer is returned as a *[ServerError]).
//   - Each [Conn] owns exactly one reader goroutine, plus one heart-beat
//     goroutine when heart-beats were negotiated. [Conn.Close] stops both and
//     waits for them.
//   - Writes are serialised by a mutex into a bufio.Writer. A writer flushes
//     unless another writer is already waiting for the lock, in which case the
//     last one of the batch flushes: concurrent senders share syscalls.
//   - Receipts: [Conn.Request], [Conn.SendReceipt] and [Conn.SendAsync] add a
//     receipt header with a fresh id and are answered when the matching
//     RECEIPT arrives. Any number may be outstanding (pipelining). An ERROR
//     frame whose receipt-id names a request fails it with a *ServerError; a
//     connection that ends fails every outstanding request with [Conn.Err].
//   - Subscriptions: MESSAGE frames are delivered on [Subscription.C], a
//     bounded channel (Options.SubscriptionBuffer, default 1024). The consumer
//     MUST drain it: when it is full the reader goroutine waits, which stops
//     reading the socket (TCP backpressure) and delays receipts and ERROR
//     frames of the whole connection. The channel is closed when the
//     subscription or the connection ends. [Conn.SubscribeFunc] instead
//     calls a function with each MESSAGE on the reader goroutine (no
//     hand-over per message); it must return promptly, for the same reason.
//   - [Conn.SendBuffered] and [Conn.AckBuffered] leave their frame in the
//     write buffer for [Conn.Flush] (or the next write), so that a burst
//     costs few system calls.
//   - Heart-beats: the client offers Options.HeartBeat, sends EOLs when the
//     negotiated interval passes without another write, and declares the
//     server dead (ErrHeartbeatTimeout) when nothing arrives for twice the
//     server's negotiated interval. Time the reader spends waiting for a full
//     subscription channel does not count.
package client
