package queuecore

// Msg is the core's view of one queue message. The shell keeps what it
// needs to build frames in Ref.
type Msg struct {
	ID         uint64
	Size       int64 // weight for max_bytes and byte counts; fixed while in this queue
	Group      string
	NotBefore  int64 // ms; not deliverable before
	Expires    int64 // ms; 0 = never
	Enqueued   int64 // ms of the first commit
	Deliveries int   // delivery attempts whose claim committed (or auto-ack writes)
	Scheduled  bool  // delayed by its producer (not a redelivery back-off)
	// ClaimRow: the journal may hold a delivery count of this message's
	// own (a claim row), which the queue's delivered mark does not stand
	// for. The shell sets it for messages loaded from the journal; the
	// core sets it when it emits a claim that is not a mark.
	ClaimRow bool
	Ref      any

	state      msgState
	holdsGroup bool // waiting out a back-off while still blocking its group
	pinned     bool // a claim row of count 0 is written, being written or to be written again (repin)
	heapIdx    int
}

type msgState uint8

const (
	stNone    msgState = iota // not in memory
	stReady                   // in the ready index
	stDelayed                 // in the delay heap
	stFlight                  // held by a delivery
	stLeaving                 // its delete/move/dead-letter is being committed
	stParked                  // ready, but its group is parked past it: waits for the group's rescan
)

// AckMode is a subscription's acknowledgement mode.
type AckMode uint8

// Acknowledgement modes.
const (
	AckAuto AckMode = iota
	AckClient
	AckClientIndividual
)

// Consumer is one subscription of the queue. The shell fills the exported
// fields before Subscribe and must not change them afterwards.
type Consumer struct {
	Ref        any
	Prefetch   int
	Mode       AckMode
	AckTimeout int64 // ms; 0 = none
	// MaxBytes bounds the deliveries the consumer holds (not yet acked; in
	// AckAuto, not yet written) in bytes (Msg.Size), beside Prefetch: past
	// it the consumer gets no more until some leave, though always one.
	// 0: no bound.
	MaxBytes int64

	inflight      []*Delivery // delivery order, for cumulative acks
	inflightBytes int64       // Msg.Size of inflight
	closed        bool
}

// InFlight is the number of deliveries the consumer holds.
func (c *Consumer) InFlight() int { return len(c.inflight) }

// Delivery is one delivery attempt of a message to a consumer.
type Delivery struct {
	Msg     *Msg
	C       *Consumer
	Attempt int

	claimed   bool  // claim committed (or auto-ack): MESSAGE may go out
	abandoned bool  // consumer left while the claim was pending
	ended     bool  // acked, nacked, released
	deadline  int64 // ack deadline, 0 = none
}

// AutoAck reports whether the delivery is deleted once written.
func (d *Delivery) AutoAck() bool { return d.C.Mode == AckAuto }
