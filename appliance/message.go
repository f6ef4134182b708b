package appliance

import (
	"github.com/herald-mq/herald/appliance/headers"
)

// Message is one queue message as the journal stores it.
type Message struct {
	ID         uint64          // journal sequence: queue order, assigned at commit
	Queue      string          // queue name without the /queue/ prefix
	Headers    headers.Headers // application headers of the SEND
	Body       []byte
	Deliveries int   // delivery attempts so far (claims committed)
	NotBefore  int64 // ms since epoch; not deliverable before (delay, back-off)
	Expires    int64 // ms since epoch; 0 = never
	Group      string
	DedupID    string
	// Enqueued is ms since the epoch the SEND was accepted (for a
	// transaction, its COMMIT; the first commit when the session did not
	// set it): the MESSAGE's timestamp header, journaled, kept by moves to
	// a dead-letter queue and across restarts.
	Enqueued int64
	// ClaimRow (set by the journal's page-ins): the journal holds a claim
	// row for the message, which its queue's delivered mark does not
	// stand for (OpClaim).
	ClaimRow bool
}

// Size is the message's weight for byte limits and memory accounting.
func (m *Message) Size() int {
	n := len(m.Body) + 64
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value) + 2
	}
	return n
}
