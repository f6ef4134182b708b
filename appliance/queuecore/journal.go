package queuecore

// OpKind is what one journal operation of the core does.
type OpKind uint8

// Journal operation kinds. The shell maps them to its journal's operations.
const (
	OpDelete     OpKind = iota + 1 // ack or auto-ack: delete Msg
	OpDrop                         // expired: delete Msg
	OpClaim                        // set Msg's delivery count to Deliveries (or, with Mark, raise the delivered mark to Msg.ID)
	OpRelease                      // Msg not deliverable before NotBefore
	OpDeadLetter                   // move Msg to the dead-letter queue (Reason says why)
	OpMoveOut                      // requeue: move Msg to another queue (Target)
	OpPurge                        // delete messages with After < ID <= UpTo except Keep, in ID order, as many as the journal takes at once
)

// Op is one journal operation.
type Op struct {
	Kind       OpKind
	Msg        *Msg
	Deliveries int // OpClaim
	// Mark (OpClaim, Deliveries 1): Msg's first delivery, in queue order.
	// Instead of a claim row, the journal raises the queue's delivered
	// mark to Msg.ID: it counts one delivery for every message of the
	// queue with an ID up to the mark and no claim row (see Core.markHi).
	Mark bool
	// NoClaim (OpDelete, OpDrop): Msg has no claim row to delete; set
	// when the op is made, under the core's owner's lock, so that the
	// shell reads only the op.
	NoClaim   bool
	NotBefore int64  // OpRelease
	Reason    string // OpDeadLetter: nack, max-deliveries, expired
	Target    string // OpMoveOut
	// OpPurge: a purge is a run of these, one batch each, so that the
	// journal's other writers are not held up for the whole of it: each
	// deletes, in ID order, the messages with an ID in (After, UpTo]
	// except Keep, as many as the journal deletes in one go, and reports
	// in Result.PurgedTo how far it got.
	UpTo  uint64
	After uint64
	Keep  []uint64
}

// Batch is journal work applied atomically. Seq names it in Done.
type Batch struct {
	Seq uint64
	Ops []Op
}

// Result is what the journal reports back for a committed batch.
type Result struct {
	NewIDs   []uint64 // per op: the moved message's new ID (OpDeadLetter, OpMoveOut)
	Affected int      // OpPurge: messages deleted
	Bytes    int64    // OpPurge: their size
	// PurgedTo (OpPurge): every message of the op's range up to this ID
	// is deleted (but Keep); UpTo when none is left. A journal that
	// deletes the whole range at once reports UpTo.
	PurgedTo uint64
}

// Moved is a message that left this queue for another, under a new ID.
type Moved struct {
	Msg    *Msg
	NewID  uint64
	Queue  string // "" = this queue's dead-letter queue
	Reason string
}

// PageIn asks the shell to load messages with ID > After, at most Limit.
type PageIn struct {
	After uint64
	Limit int
	// MaxBytes, when positive, bounds the load too: it stops after the
	// message whose Size brings the total to MaxBytes or more (at least
	// one message, so a page-in always progresses).
	MaxBytes int64
	// Group, when set, is a rescan of a parked group: the caller may load
	// only that group's messages (the core ignores the others).
	Group string
	seq   uint64
	epoch uint64
	scan  bool
}

// Event is something the shell logs or counts.
type Event struct {
	Kind   EventKind
	ID     uint64
	Reason string
	Err    error
	// EvPageInFailed, EvPageInRecovered: when the run of failed page-ins
	// started (ms) and how many failed in it so far.
	Since    int64
	Failures int
	// EvPurged: what the purge deleted.
	Count int
	Bytes int64
}

// EventKind names an Event.
type EventKind uint8

// Event kinds.
const (
	EvAckTimeout EventKind = iota + 1
	EvDeadLettered
	EvJournalFailed // a batch failed; its messages retry after a back-off
	// EvPurged: a purge ended, with Count messages (Bytes) deleted by it;
	// Err when one of its batches failed (what committed before stays
	// deleted).
	EvPurged
	// EvOutOfOrder: Committed reported a message with an ID below one
	// reported before (the shell broke its duty 3). The message may be
	// taken for one already paged in and not delivered until a restart;
	// the backlog cache is given up. A bug to log loudly.
	EvOutOfOrder
	// EvPageInFailed: a page-in's read failed (Err); it is asked again
	// after a back-off (RetryMin). Since and Failures describe the run of
	// failed page-ins it belongs to (PageInFailing).
	EvPageInFailed
	// EvPageInRecovered: the run of failed page-ins ended (Reason: a
	// page-in read the journal, was answered from the backlog cache, or
	// the queue has nothing left in the journal to page in); Since and
	// Failures describe the run.
	EvPageInRecovered
)
