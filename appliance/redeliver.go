package appliance

import (
	"strconv"

	"github.com/herald-mq/herald/appliance/stomp"
)

// dlqHeaderKeys are the headers a dead-letter move adds and a requeue
// removes.
var dlqHeaderKeys = []string{"dlq-original-destination", "dlq-reason", "dlq-delivery-count"}

// deadLetterQueue names the DLQ of this queue.
func (q *queue) deadLetterQueue() string { return q.cfg().DeadLetterQueue + q.name }

// deadLetterHeaders are m's headers once dead-lettered: naming where it
// came from, why, and how often it was delivered.
func (q *queue) deadLetterHeaders(m *Message, deliveries int, reason string) stomp.Headers {
	h := m.Headers.Clone()
	h.Set("dlq-original-destination", prefixQueue+q.name)
	h.Set("dlq-reason", reason)
	h.Set("dlq-delivery-count", strconv.Itoa(deliveries))
	return h
}

// requeueHeaders are m's headers once requeued out of a dead-letter queue.
func requeueHeaders(m *Message) stomp.Headers {
	h := m.Headers.Clone()
	for _, k := range dlqHeaderKeys {
		h.Del(k)
	}
	return h
}
