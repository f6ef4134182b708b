package appliance

import "time"

type ackMode int

const (
	ackAuto ackMode = iota
	ackClient
	ackClientIndividual
)

func (m ackMode) String() string {
	switch m {
	case ackClient:
		return "client"
	case ackClientIndividual:
		return "client-individual"
	}
	return "auto"
}

// subscription is one SUBSCRIBE of a session: to a queue (competing
// consumer) or to a topic pattern (fan-out).
type subscription struct {
	s    *session
	id   string
	dest string
	kind destKind
	name string // queue name or topic pattern
	ack  ackMode

	// queue subscriptions; guarded by q.mu
	q          *queue
	prefetch   int
	ackTimeout time.Duration
	inflight   []*delivery // in delivery order, for cumulative acks
	closed     bool
}
