package appliance

// The tail cache of a stream: its newest committed messages, contiguous
// offsets, at most streams.tail_bytes and charged to the queues' half of
// the memory budget (what is cached can always be read from the journal
// instead, so a spent budget only shrinks the tail). A caught-up
// subscriber's read of a new append is served from here; a subscriber
// behind the tail reads the journal. Without it, each live subscriber of a
// busy stream ran its own journal query per append.
type streamTail struct {
	msgs  []*Message // ascending, contiguous offsets
	head  int        // msgs[:head] are evicted (kept until compaction)
	bytes int64
	mem   *memBudget
}

// live returns the cached messages.
func (t *streamTail) live() []*Message { return t.msgs[t.head:] }

// first returns the first cached offset and whether any is cached.
func (t *streamTail) first() (uint64, bool) {
	if t.head >= len(t.msgs) {
		return 0, false
	}
	return t.msgs[t.head].ID, true
}

// push adds committed message m (commit order), evicting the oldest while
// over limit bytes or the budget's queues' half; a message that does not
// fit empties the tail (it stays contiguous).
func (t *streamTail) push(m *Message, limit int64, mem *memBudget) {
	t.mem = mem
	size := int64(m.Size())
	if n := len(t.live()); n > 0 && t.msgs[len(t.msgs)-1].ID+1 != m.ID {
		t.reset()
	}
	if limit <= 0 || size > limit {
		t.reset()
		return
	}
	for t.head < len(t.msgs) && (t.bytes+size > limit || mem.queueFree() < size) {
		t.evict()
	}
	if mem.queueFree() < size {
		return
	}
	if t.head > 0 && t.head >= len(t.msgs)/2 {
		n := copy(t.msgs, t.msgs[t.head:])
		clear(t.msgs[n:])
		t.msgs = t.msgs[:n]
		t.head = 0
	}
	t.msgs = append(t.msgs, m)
	t.bytes += size
	mem.chargeQueue(size)
}

func (t *streamTail) evict() {
	m := t.msgs[t.head]
	t.msgs[t.head] = nil
	t.head++
	size := int64(m.Size())
	t.bytes -= size
	t.mem.chargeQueue(-size)
	if t.head == len(t.msgs) {
		t.msgs = t.msgs[:0]
		t.head = 0
	}
}

// trim drops cached offsets below first (retention).
func (t *streamTail) trim(first uint64) {
	for t.head < len(t.msgs) && t.msgs[t.head].ID < first {
		t.evict()
	}
}

// reset empties the tail.
func (t *streamTail) reset() {
	for t.head < len(t.msgs) {
		t.evict()
	}
	t.msgs, t.head = nil, 0
}

// page returns the cached messages from offset from on, at most limit and
// none past the one that brings their size to maxBytes (at least one), as
// the journal's StreamRead would; ok is false when from is not cached.
func (t *streamTail) page(from uint64, limit int, maxBytes int64) ([]*Message, bool) {
	f, ok := t.first()
	if !ok || from < f {
		return nil, false
	}
	live := t.live()
	i := int(from - f)
	if i >= len(live) {
		return nil, false
	}
	var out []*Message
	var total int64
	for _, m := range live[i:] {
		if len(out) >= limit || (maxBytes > 0 && total >= maxBytes) {
			break
		}
		out = append(out, m)
		total += int64(m.Size())
	}
	return out, true
}
