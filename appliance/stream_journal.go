package appliance

import "context"

// Journal operation kinds of streams (op.Stream describes them).
const (
	// OpAppend appends Msg to stream Stream.Name: the journal sets Msg.ID to
	// its offset (the stream's next, starting at 0) and Msg.Enqueued to its
	// timestamp (the commit's clock, ms). With Msg.DedupID recorded for the
	// stream within the dedup window nothing is stored and Duplicate/DupOf
	// (the first offset) are set, as for OpEnqueue.
	OpAppend OpKind = 64 + iota
	// OpTrim deletes the messages of stream Stream.Name with an offset
	// below Stream.Offset, at most Stream.Limit of them (the oldest):
	// retention. Affected and Bytes are set to what was deleted, and
	// Stream.First to the first offset still held (or the next one).
	OpTrim
	// OpCursor sets durable cursor Stream.Cursor of stream Stream.Name to
	// Stream.Offset (the first offset not acknowledged) when that is ahead
	// of where it is: a cursor never moves back.
	OpCursor
	// OpStreamDelete forgets stream Stream.Name: its messages (Limit 0:
	// all; Limit > 0: at most that many of the oldest, Affected says how
	// many, and the stream stays while Affected == Limit), its cursors and
	// its dedup ids. The admin API deletes a stream in such steps so that
	// appends to other streams interleave; the last step (Limit 0 on what
	// is left) removes the stream itself.
	OpStreamDelete
	// OpCursorSet sets durable cursor Stream.Cursor of stream Stream.Name
	// to Stream.Offset, back or forth (the admin's reset-cursor).
	OpCursorSet
)

// StreamOp is the stream part of an Op.
type StreamOp struct {
	Name   string
	Cursor string // OpCursor
	Offset uint64 // OpTrim: delete below; OpCursor: new position
	Limit  int    // OpTrim: at most this many rows
	First  uint64 // out, OpTrim
}

// StreamState is what the journal holds of a stream at startup.
type StreamState struct {
	Name    string
	First   uint64 // first offset held (== Next when empty)
	Next    uint64 // offset of the next append
	Count   int64
	Bytes   int64
	Cursors map[string]uint64 // durable cursor -> first offset not acknowledged
}

// StreamEntry is a stored stream message's offset, time and size, for
// retention.
type StreamEntry struct {
	Offset uint64
	TS     int64 // ms since epoch
	Size   int64
}

// StreamJournal is what a journal must also implement for streams.
// Streams are refused (with an error naming the cause) on a journal that
// does not.
type StreamJournal interface {
	// Streams lists every stream the journal knows, for recovery.
	Streams(ctx context.Context) ([]StreamState, error)
	// StreamRead returns the messages of stream name with offset >= from,
	// in offset order: at most limit, and none past the one that brings
	// their total Size to maxBytes (at least one). Message.ID is the
	// offset, Message.Enqueued the timestamp.
	StreamRead(ctx context.Context, name string, from uint64, limit int, maxBytes int64) ([]*Message, error)
	// StreamEntries returns up to limit entries of stream name with offset
	// >= from, in offset order, without bodies.
	StreamEntries(ctx context.Context, name string, from uint64, limit int) ([]StreamEntry, error)
	// StreamOffsetAt returns the first offset whose timestamp is >= ts
	// (the stream's next offset if none).
	StreamOffsetAt(ctx context.Context, name string, ts int64) (uint64, error)
}
