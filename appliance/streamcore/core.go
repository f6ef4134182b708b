package streamcore

import (
	"errors"
	"fmt"
	"sort"
)

// AckMode is a subscription's STOMP ack mode.
type AckMode int

// Ack modes.
const (
	Auto AckMode = iota
	Client
	ClientIndividual
)

// StartKind is where a subscription starts (x-stream-offset).
type StartKind int

// Start points, as RabbitMQ names them: first, last, next, offset=N,
// timestamp=T (resolved to an offset by the caller, which has the journal).
const (
	StartNext StartKind = iota
	StartFirst
	StartLast
	StartOffset
)

// Start is a subscription's start point.
type Start struct {
	Kind   StartKind
	Offset uint64 // StartOffset
}

// SubID names a subscription within the caller.
type SubID uint64

// Config bounds reads.
type Config struct {
	PageMessages int   // messages per read
	PageBytes    int64 // bytes per read (at least one message)
}

// Read asks the caller to read the stream for subscription Sub.
type Read struct {
	Sub      SubID
	From     uint64
	Limit    int
	MaxBytes int64
}

// Entry is one message of a page: its offset and size.
type Entry struct {
	Offset uint64
	Size   int64
}

// Delivery is one MESSAGE to write.
type Delivery struct {
	Offset uint64
	// Gap: offsets from GapFrom up to Offset were removed by retention
	// before this subscriber reached them.
	Gap     bool
	GapFrom uint64
}

// CursorMove is a durable cursor's new position to journal.
type CursorMove struct {
	Name   string
	Offset uint64 // first offset not acknowledged
}

// ErrCursorInUse: another subscriber holds the cursor name.
var ErrCursorInUse = errors.New("streamcore: consumer name in use")

type sub struct {
	id       SubID
	mode     AckMode
	prefetch int // client modes; 0 = unbounded
	pos      uint64
	unacked  []uint64 // delivered, not acknowledged, ascending
	reading  bool
	cursor   string
	// stalled: the last read found nothing where the core expected
	// messages (retention ran ahead of Trimmed); no read until the next
	// Appended or Trimmed, so that nothing spins.
	stalled bool
	// hasGap: offsets from gapFrom were removed before this subscriber
	// read them; its next delivery says so.
	hasGap  bool
	gapFrom uint64
	// nacked: in client-individual mode an offset was NACKed, nackMin the
	// lowest; the durable cursor never moves past it (in client mode an
	// ACK of a later offset acknowledges it too).
	nacked  bool
	nackMin uint64
}

// Core is one stream's state.
type Core struct {
	cfg          Config
	first, next  uint64
	count, bytes int64
	cursors      map[string]uint64 // committed positions
	active       map[string]SubID
	subs         map[SubID]*sub
	reads        []Read
}

// New returns the core of a stream holding [first, next), count messages
// of bytes, with durable cursors as committed.
func New(cfg Config, first, next uint64, count, bytes int64, cursors map[string]uint64) *Core {
	if cfg.PageMessages <= 0 {
		cfg.PageMessages = 256
	}
	if cfg.PageBytes <= 0 {
		cfg.PageBytes = 1 << 20
	}
	c := &Core{cfg: cfg, first: first, next: next, count: count, bytes: bytes,
		cursors: map[string]uint64{}, active: map[string]SubID{}, subs: map[SubID]*sub{}}
	for k, v := range cursors {
		c.cursors[k] = v
	}
	return c
}

// SetConfig replaces the read bounds (configuration reload).
func (c *Core) SetConfig(cfg Config) {
	if cfg.PageMessages > 0 {
		c.cfg.PageMessages = cfg.PageMessages
	}
	if cfg.PageBytes > 0 {
		c.cfg.PageBytes = cfg.PageBytes
	}
}

// First is the first offset held (Next when empty).
func (c *Core) First() uint64 { return c.first }

// Next is the offset of the next append.
func (c *Core) Next() uint64 { return c.next }

// Count and Bytes are what the stream holds.
func (c *Core) Count() int64 { return c.count }

// Bytes is the size of what the stream holds.
func (c *Core) Bytes() int64 { return c.bytes }

// Cursor returns the committed position of cursor name.
func (c *Core) Cursor(name string) (uint64, bool) {
	v, ok := c.cursors[name]
	return v, ok
}

// CursorCount is len(CursorNames()) without the list.
func (c *Core) CursorCount() int {
	n := len(c.cursors)
	for k := range c.active {
		if _, ok := c.cursors[k]; !ok {
			n++
		}
	}
	return n
}

// CursorNames lists the durable cursors (committed or held by a
// subscriber), in no order.
func (c *Core) CursorNames() []string {
	out := make([]string, 0, len(c.cursors)+len(c.active))
	for k := range c.cursors {
		out = append(out, k)
	}
	for k := range c.active {
		if _, ok := c.cursors[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// CursorActive reports whether a subscriber (or an admin hold) holds
// cursor name.
func (c *Core) CursorActive(name string) bool {
	_, ok := c.active[name]
	return ok
}

// HoldCursor marks cursor name in use without a subscriber (while an admin
// reset commits): a SUBSCRIBE with the name is refused with
// ErrCursorInUse. False when it is in use already.
func (c *Core) HoldCursor(name string) bool {
	if _, busy := c.active[name]; busy {
		return false
	}
	c.active[name] = 0
	return true
}

// ReleaseCursor ends a HoldCursor.
func (c *Core) ReleaseCursor(name string) {
	if id, ok := c.active[name]; ok && id == 0 {
		delete(c.active, name)
	}
}

// SetCursor sets cursor name's committed position to off, back or forth
// (an admin reset, once journaled), bounded by the stream's next offset.
func (c *Core) SetCursor(name string, off uint64) {
	c.cursors[name] = min(off, c.next)
}

// Subscribers is the number of subscriptions.
func (c *Core) Subscribers() int { return len(c.subs) }

// Appended records a committed append at offset off (commit order).
func (c *Core) Appended(off uint64, size int64) {
	if off < c.next {
		panic(fmt.Sprintf("streamcore: append at %d below next %d", off, c.next))
	}
	if c.count == 0 {
		c.first = off
	}
	c.next = off + 1
	c.count++
	c.bytes += size
	c.unstall()
	c.pump()
}

// Trimmed records a committed retention step: first is the first offset
// still held; n messages of bytes were removed.
func (c *Core) Trimmed(first uint64, n int, bytes int64) {
	if first > c.first {
		c.first = first
	}
	c.count -= int64(n)
	c.bytes -= bytes
	if c.count < 0 {
		c.count = 0
	}
	if c.bytes < 0 {
		c.bytes = 0
	}
	c.unstall()
	c.pump()
}

func (c *Core) unstall() {
	for _, s := range c.subs {
		s.stalled = false
	}
}

// Subscribe adds subscription id starting at start; with a cursor name
// (client mode only) it starts at the cursor's committed position if the
// cursor exists, and at start otherwise. It returns the first offset it
// will deliver.
func (c *Core) Subscribe(id SubID, mode AckMode, prefetch int, start Start, cursor string) (uint64, error) {
	if _, dup := c.subs[id]; dup {
		return 0, fmt.Errorf("streamcore: subscription %d exists", id)
	}
	if cursor != "" {
		if _, busy := c.active[cursor]; busy {
			return 0, ErrCursorInUse
		}
	}
	s := &sub{id: id, mode: mode, prefetch: prefetch, cursor: cursor}
	if mode == Auto {
		s.prefetch = 0
	}
	switch start.Kind {
	case StartFirst:
		s.pos = c.first
	case StartLast:
		s.pos = c.next
		if c.next > c.first {
			s.pos = c.next - 1
		}
	case StartOffset:
		s.pos = min(start.Offset, c.next)
	default:
		s.pos = c.next
	}
	if cursor != "" {
		if p, ok := c.cursors[cursor]; ok {
			s.pos = min(p, c.next)
		}
		c.active[cursor] = id
	}
	c.subs[id] = s
	c.pump()
	return s.pos, nil
}

// Unsubscribe ends subscription id; its cursor name is free again.
func (c *Core) Unsubscribe(id SubID) {
	s, ok := c.subs[id]
	if !ok {
		return
	}
	if s.cursor != "" && c.active[s.cursor] == id {
		delete(c.active, s.cursor)
	}
	delete(c.subs, id)
}

// Paged answers subscription id's read with the entries read (offset
// order). It returns what to deliver: every entry from the subscriber's
// position on, in order; the caller writes those MESSAGEs.
func (c *Core) Paged(id SubID, entries []Entry) []Delivery {
	s, ok := c.subs[id]
	if !ok {
		return nil
	}
	s.reading = false
	var out []Delivery
	for _, e := range entries {
		if e.Offset < s.pos || e.Offset >= c.next {
			continue // cannot happen with a journal in step; ignore rather than repeat
		}
		if s.prefetch > 0 && len(s.unacked) >= s.prefetch {
			break
		}
		d := Delivery{Offset: e.Offset}
		if e.Offset > s.pos || s.hasGap {
			d.Gap, d.GapFrom = true, s.pos
			if s.hasGap {
				d.GapFrom = s.gapFrom
			}
			s.hasGap = false
			if c.first < e.Offset && c.count > 0 {
				// Retention is under way; what the journal skipped was
				// removed, so the core's first catches up.
				c.first = e.Offset
			}
		}
		out = append(out, d)
		s.pos = e.Offset + 1
		if s.mode != Auto {
			s.unacked = append(s.unacked, e.Offset)
		}
	}
	if len(entries) == 0 && s.pos < c.next {
		if s.pos < c.first {
			// Everything from pos up to first was removed: the next read
			// starts at first, and the message found there reports the
			// gap.
			if !s.hasGap {
				s.hasGap, s.gapFrom = true, s.pos
			}
			s.pos = c.first
		} else {
			s.stalled = true
		}
	}
	c.pump()
	return out
}

// Ack acknowledges offset off for subscription id: in client mode it and
// every earlier delivered offset, in client-individual mode that offset
// alone. It returns the durable cursor move to journal (nil without a
// cursor or when the cursor does not move) and whether off was held.
func (c *Core) Ack(id SubID, off uint64) (*CursorMove, bool) {
	s, ok := c.subs[id]
	if !ok || s.mode == Auto {
		return nil, false
	}
	i := sort.Search(len(s.unacked), func(i int) bool { return s.unacked[i] >= off })
	if i == len(s.unacked) || s.unacked[i] != off {
		return nil, false
	}
	if s.mode == Client {
		s.unacked = s.unacked[i+1:]
	} else {
		s.unacked = append(s.unacked[:i], s.unacked[i+1:]...)
	}
	c.pump()
	if s.cursor == "" {
		return nil, true
	}
	// The first offset not acknowledged.
	pos := s.pos
	if len(s.unacked) > 0 {
		pos = s.unacked[0]
	}
	if s.mode == Client {
		pos = off + 1
	} else if s.nacked && s.nackMin < pos {
		pos = s.nackMin
	}
	if cur, ok := c.cursors[s.cursor]; ok && cur >= pos {
		return nil, true
	}
	return &CursorMove{Name: s.cursor, Offset: pos}, true
}

// Nack is Ack without the cursor: the offsets are settled for this
// subscription (its credit comes back; a stream does not redeliver) but a
// durable cursor does not move past them, so a consumer that stops after a
// NACK reads them again when it resumes.
func (c *Core) Nack(id SubID, off uint64) bool {
	s, ok := c.subs[id]
	if !ok || s.mode == Auto {
		return false
	}
	i := sort.Search(len(s.unacked), func(i int) bool { return s.unacked[i] >= off })
	if i == len(s.unacked) || s.unacked[i] != off {
		return false
	}
	if s.mode == Client {
		s.unacked = s.unacked[i+1:]
	} else {
		s.unacked = append(s.unacked[:i], s.unacked[i+1:]...)
		if !s.nacked || off < s.nackMin {
			s.nacked, s.nackMin = true, off
		}
	}
	c.pump()
	return true
}

// CursorCommitted records that cursor name's move to off is durable.
func (c *Core) CursorCommitted(name string, off uint64) {
	if cur, ok := c.cursors[name]; !ok || off > cur {
		c.cursors[name] = off
	}
}

// Take returns the reads to run and clears them.
func (c *Core) Take() []Read {
	r := c.reads
	c.reads = nil
	return r
}

// Unacked is subscription id's number of unacknowledged deliveries.
func (c *Core) Unacked(id SubID) int {
	if s, ok := c.subs[id]; ok {
		return len(s.unacked)
	}
	return 0
}

// Position is the next offset subscription id will read.
func (c *Core) Position(id SubID) uint64 {
	if s, ok := c.subs[id]; ok {
		return s.pos
	}
	return 0
}

// pump asks for a read for every subscriber that has credit, has not
// caught up and has no read outstanding; in SubID order, deterministic.
func (c *Core) pump() {
	ids := make([]SubID, 0, len(c.subs))
	for id := range c.subs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		s := c.subs[id]
		if s.reading || s.stalled || s.pos >= c.next {
			continue
		}
		limit := c.cfg.PageMessages
		if s.prefetch > 0 {
			room := s.prefetch - len(s.unacked)
			if room <= 0 {
				continue
			}
			limit = min(limit, room)
		}
		s.reading = true
		c.reads = append(c.reads, Read{Sub: id, From: s.pos, Limit: limit, MaxBytes: c.cfg.PageBytes})
	}
}
