// Package bridgeview holds the state of a bridge as the admin API serves it
// (GET /v1/bridges) and `herald bridges` prints it, apart from package
// bridge so that the CLI does not link the NATS client.
package bridgeview

// View is one bridge as `herald bridges` and GET /v1/bridges show it.
type View struct {
	Name       string    `json:"name"`
	Kind       string    `json:"kind"`
	Peer       string    `json:"peer"` // the URLs or host
	Directions []DirView `json:"directions"`
}

// Failing reports whether a direction of the bridge is failing.
func (v View) Failing() bool {
	for _, d := range v.Directions {
		if d.Failing {
			return true
		}
	}
	return false
}

// DirView is one direction of a bridge.
type DirView struct {
	Direction string `json:"direction"` // "out" or "in"
	State     string `json:"state"`     // "up", "connecting" or "down"
	// Failing: not up, with an error since it last was.
	Failing bool `json:"failing"`
	// Lag: messages (and bytes, where known; -1 if not) waiting to cross:
	// direction out, the local queues' depth; in, the consumer's pending
	// and unacknowledged messages.
	LagMessages int64 `json:"lag_messages"`
	LagBytes    int64 `json:"lag_bytes"`
	InFlight    int   `json:"in_flight"`
	Held        int64 `json:"held"` // taken from the source, not yet acknowledged there
	HeldBytes   int64 `json:"held_bytes"`
	// Counters since start.
	Taken     uint64 `json:"taken_total"`
	Forwarded uint64 `json:"forwarded_total"` // sends, resends included
	Resent    uint64 `json:"resent_total"`
	Confirmed uint64 `json:"confirmed_total"`
	Skipped   uint64 `json:"skipped_total"` // loops refused
	Dropped   uint64 `json:"dropped_total"` // topic messages dropped: the link down or full, or refused by the other side
	// DeadLettered: queue messages the other side refuses for good (out
	// to JetStream: over the server's max_payload or the stream's
	// max_msg_size, headers over 64 KiB), sent to their queue's
	// dead-letter queue here.
	DeadLettered uint64 `json:"dead_lettered_total"`
	// HeadersDropped: headers dropped from messages crossing the link
	// because the other side would refuse or misread them (coming in, a
	// transaction header or an invalid expires or delay; either way, a
	// reply-to naming a temporary queue).
	HeadersDropped uint64 `json:"headers_dropped_total"`
	Reconnects     uint64 `json:"reconnects_total"`
	Failures       uint64 `json:"failures_total"`
	// Refused: forwards the other side refused because the message before
	// them was not the last it stored (direction out to JetStream; each is
	// sent again in order).
	Refused uint64 `json:"refused_total"`
	// SharedStream: another publisher writes to the stream (direction
	// out): the bridge sends one message at a time, which keeps order.
	SharedStream bool `json:"shared_stream,omitempty"`
	// HeldBack: messages of direction in (JetStream) held back, waiting for
	// an earlier one the server delivers again, to keep stream order.
	HeldBack      int64  `json:"held_back"`
	HeldBackBytes int64  `json:"held_back_bytes"`
	HeldBackTotal uint64 `json:"held_back_total"`
	// Gaps: ranges of stream messages removed (retention, deletion) before
	// direction in brought them in (the last error names the latest).
	Gaps uint64 `json:"gaps_total"`
	// HeartbeatsMissed: times a pull of direction in (JetStream) missed
	// two of its idle heartbeats (the consumer's leader gone, the link or
	// the server stalled); nats.go pulls again each time.
	HeartbeatsMissed uint64 `json:"heartbeats_missed_total"`
	// Rate is the messages confirmed per second, over the last second or so.
	Rate         float64 `json:"rate"`
	LastError    string  `json:"last_error,omitempty"`
	LastErrorAt  string  `json:"last_error_at,omitempty"`
	FailingSince string  `json:"failing_since,omitempty"`
}
