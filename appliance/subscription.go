package appliance

import (
	"github.com/herald-mq/herald/appliance/queuecore"
	"github.com/herald-mq/herald/appliance/streamcore"
)

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

	// queue subscriptions: the core's consumer (guarded by q.mu once
	// subscribed)
	q   *queue
	con *queuecore.Consumer

	// stream subscriptions (stream.go): the stream, the core's id for the
	// subscription and its durable cursor name ("" none).
	st     *stream
	sid    streamcore.SubID
	cursor string

	// topic subscriptions with history:N (topic_history.go)
	hist *subHistory
}
