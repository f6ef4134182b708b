package appliance

import (
	"context"
	"errors"
	"fmt"

	"github.com/herald-mq/herald/appliance/headers"
)

// OpKind is what one journal operation does.
type OpKind uint8

// Journal operation kinds.
const (
	// OpEnqueue inserts Msg; the journal sets Msg.ID. With Msg.DedupID set and
	// already recorded for the queue within the dedup window, nothing is
	// inserted and Duplicate is set.
	OpEnqueue OpKind = iota + 1
	// OpDelete removes message ID (acknowledged, expired and dropped, purged).
	OpDelete
	// OpClaim records a delivery attempt: deliveries = Deliveries for ID,
	// in a claim row of its own. With Mark, it is a first delivery in
	// queue order instead: the delivered mark of queue Queue is raised to
	// ID. A message's delivery count is its claim row's if it has one,
	// else at least 1 if its ID is at or below its queue's mark.
	OpClaim
	// OpRelease returns ID to its queue, not deliverable before NotBefore.
	OpRelease
	// OpMove moves ID to the tail of queue Queue with Headers replaced (nil:
	// kept) and deliveries set to Deliveries, under a new ID (NewID):
	// dead-lettering, requeue from a DLQ. The moved message never expires.
	OpMove
	// OpPurge deletes, in ID order, messages of queue Queue with an ID
	// above After and up to ID, except those listed in Keep (in flight):
	// at most as many as the journal deletes in one transaction without
	// holding up its other writers for long (a purge is a run of these).
	// PurgedTo is set to how far it got (every message of the range up to
	// it is deleted, but Keep; ID when none is left), Affected to the
	// number deleted and Bytes to their size.
	OpPurge
	// OpBarrier does nothing; its batch completes after every batch submitted
	// before it.
	OpBarrier
	// OpKV stores the key-value change KV (kv.go): the bucket's revision
	// counter becomes KV.Revision, which must be higher than the stored
	// one; a put replaces the key's row and adds it to the key's history
	// (keeping the newest KV.History), a delete removes row and history.
	OpKV
	// OpLock stores advisory lock Lock.Name's last fencing token (lock.go),
	// which must be higher than the stored one.
	OpLock
	// OpForgetDedup deletes the dedup ids recorded for queue Queue (the
	// queue was deleted: a new queue of the name starts with none).
	OpForgetDedup
)

// Op is one journal operation. Inputs are set by the caller; outputs by the
// journal before the batch's Done runs.
type Op struct {
	Kind       OpKind
	Msg        *Message        // OpEnqueue
	ID         uint64          // OpDelete, OpClaim, OpRelease, OpMove
	Deliveries int             // OpClaim
	Mark       bool            // OpClaim: raise Queue's delivered mark to ID (no claim row)
	NoClaim    bool            // OpDelete: the message has no claim row (only its own row is deleted)
	NotBefore  int64           // OpRelease
	Queue      string          // OpMove: destination queue; OpClaim with Mark: the message's queue; OpForgetDedup
	Headers    headers.Headers // OpMove: replacement headers (nil: keep)
	Size       int             // OpMove: the moved message's Size with its new headers (0: keep)

	Duplicate bool // out, OpEnqueue: dedup id seen before; DupOf holds the first ID
	DupOf     uint64
	NewID     uint64   // out, OpMove
	After     uint64   // OpPurge
	Keep      []uint64 // OpPurge
	Affected  int      // out, OpPurge
	Bytes     int64    // out, OpPurge
	PurgedTo  uint64   // out, OpPurge

	Stream *StreamOp  // OpAppend, OpTrim, OpCursor (stream_journal.go)
	KV     *KVEntry   // OpKV
	Lock   *LockToken // OpLock
}

// Batch is a set of operations applied atomically, in order.
type Batch struct {
	Ops []Op
	// Done is called once, after the batch is durable (err == nil) or failed
	// as a whole (nothing of it applied). It runs on the journal's completion
	// goroutine in submission order and must not block.
	Done func(b *Batch, err error)
	// Lone is set by the journal before Done when the batch was committed
	// alone and its completion runs where nothing waits behind it (the
	// writer had nothing else to commit): Done may then write a lone
	// RECEIPT itself (session.receiptDone) instead of only signalling.
	Lone bool
	// Wait (set by the caller) says the submitter waits for this batch
	// alone (a lone SEND whose client waits for its RECEIPT): a journal
	// that can (Committer) may commit it on the submitting goroutine when
	// it is idle.
	Wait bool
}

// QueueState is what the journal knows of a queue at startup.
type QueueState struct {
	Name   string
	Count  int
	Bytes  int64
	Oldest int64  // ms since epoch of the oldest message's enqueue, 0 if empty
	MaxID  uint64 // highest message ID in the queue
	Mark   uint64 // its delivered mark (OpClaim)
}

// PageRequest is one page-in of a queue.
type PageRequest struct {
	Queue string
	Group string // only this message group's messages ("" = all)
	After uint64 // messages with ID > After, in ID order
	Limit int    // at most this many
	// MaxBytes, when positive: stop after the message whose Size brings
	// the total to MaxBytes or more (at least one message).
	MaxBytes int64
}

// Committer is a Journal that can commit a batch on the caller's
// goroutine when it is idle (journal.Store.CommitNow): every batch
// submitted before it completed, the writer not busy. CommitNow reports
// whether it did (then b.Done has run, with b.Lone set); if not, the
// caller submits b.
type Committer interface {
	CommitNow(b *Batch) bool
}

// ErrJournalStopped is wrapped by the error of a batch the journal
// refused because an earlier I/O error stopped it: nothing of the batch
// was stored.
var ErrJournalStopped = errors.New("journal stopped after an I/O error")

// ErrOutcomeUnknown is wrapped by the error of a batch whose commit met an
// I/O error (a failed fsync, a write error): it may or may not be stored,
// and only the journal's recovery at the next start tells. It wraps
// ErrJournalStopped too: the journal takes nothing more after it.
var ErrOutcomeUnknown = fmt.Errorf("%w; whether this was stored is unknown", ErrJournalStopped)

// notStored is the ERROR message header for what (a "message", an
// "acknowledgement") that the journal did not commit because of err.
func notStored(what string, err error) string {
	switch {
	case errors.Is(err, ErrOutcomeUnknown):
		return what + " may or may not be stored (journal I/O error)"
	case errors.Is(err, ErrJournalStopped):
		return what + " not stored (journal stopped)"
	}
	return what + " not stored"
}

// txNotCommitted is the ERROR message header for a transaction the journal
// did not commit because of err.
func txNotCommitted(err error) string {
	if errors.Is(err, ErrOutcomeUnknown) {
		return "transaction may or may not be committed (journal I/O error)"
	}
	return "transaction not committed"
}

// Journal is the durable store behind queues. Implementations batch every
// submitted operation of every connection into few transactions (group
// commit) and never reorder batches.
type Journal interface {
	// Submit queues b for the next group commit. It blocks only while the
	// journal's intake is full (backpressure). After Close it calls b.Done
	// with an error.
	Submit(b *Batch)
	// Queues lists every queue with messages, for recovery.
	Queues(ctx context.Context) ([]QueueState, error)
	// Load returns up to limit messages of queue with ID > after, in ID order.
	Load(ctx context.Context, queue string, after uint64, limit int) ([]*Message, error)
	// Page is Load for paging a queue in: only message group r.Group's
	// messages when set, and bounded in bytes (see PageRequest).
	Page(ctx context.Context, r PageRequest) ([]*Message, error)
	// LoadPrefix calls fn with up to limit messages of queue with ID > after,
	// in ID order, one at a time as it reads them, each with at most maxBody
	// bytes of its body (maxBody < 0: all of it) and the whole body's length
	// in bytes. It reads no more of a body than it passes on, save a
	// compressed body, read compressed and decompressed up to maxBody bytes.
	// An error of fn ends the read and is returned.
	LoadPrefix(ctx context.Context, queue string, after uint64, limit, maxBody int, fn func(m *Message, bodyBytes int) error) error
	// Close flushes what was submitted, checkpoints and closes.
	Close(ctx context.Context) error
}
