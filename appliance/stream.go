package appliance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/streamcore"
)

// Streams: /stream/NAME, an append-only log journaled like a queue, read
// from any offset by any number of subscribers; consumers never remove
// messages, retention does (in the background, in small transactions).
//
// stream is the shell around one stream's deterministic core
// (streamcore.Core): it serialises calls into the core under mu, runs the
// reads the core asks for (on background goroutines, against the journal),
// writes the MESSAGEs the core says to write, and journals cursor moves.
// Live delivery is replay that caught up: a subscriber always reads from
// the journal (the newest pages are in SQLite's page cache), so a stream
// holds no messages in memory beyond one page per reading subscriber.
//
// Memory: a page read is charged to the connections' half of the memory
// budget while it is held, then its MESSAGEs are queued to the connection
// like any frame (charged there until written): messages held for delivery
// belong to a connection, bounded per connection by stomp.max_output_bytes
// (auto ack) or prefetch-count (client modes), and a stream itself holds no
// messages in memory to charge to the queues' half.
//
// Lock order: streamRegistry.mu, then stream.mu, then session.outMu.
type stream struct {
	b    *Broker
	name string

	mu   sync.Mutex
	core *streamcore.Core
	subs map[streamcore.SubID]*subscription
	// tail holds the newest committed messages for caught-up subscribers
	// (streams.tail_bytes; stream_tail.go). Under mu.
	tail streamTail
	// deleting: the admin is deleting the stream; appends and
	// subscriptions are refused. Under mu.
	deleting bool
	del      *streamDelete // the running delete's record, while deleting
	// inflight counts appends and retention trims submitted and not yet
	// completed; a delete waits for them.
	inflight sync.WaitGroup
	// cursorOps counts, per durable cursor, the moves (ACKs) submitted to
	// the journal and not completed yet; cursorWake is closed (and
	// dropped) whenever one reaches zero. An admin reset or delete waits
	// for them: a departed consumer's last ACK still in its connection's
	// intake would otherwise commit after the reset and move the cursor
	// forward again (OpCursor keeps the furthest position), or after the
	// delete and make the stream's row again. Under mu.
	cursorOps  map[string]int
	cursorWake chan struct{}

	// pub publishes appends to the multicast channels carrying the
	// stream (stream_mcast.go); set at the first append when one does.
	// Under mu.
	pub        *streamPub
	pubChecked bool

	appends, appendBytes, trimmedN atomic.Uint64
	tailHits, journalReads         atomic.Uint64
}

// beginAppend counts an append about to be submitted (inflight.Done when
// it completed); an error while the stream is being deleted.
func (st *stream) beginAppend() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.deleting {
		return fmt.Errorf("%w: %s; retry once the delete is done (a new stream of the name starts at offset 0)", ErrStreamDeleting, st.name)
	}
	st.inflight.Add(1)
	return nil
}

// streamRegistry holds the broker's streams.
type streamRegistry struct {
	mu      sync.Mutex
	byName  map[string]*stream
	j       StreamJournal // nil: the journal has no streams
	nextSub streamcore.SubID
	trimmed uint64    // messages removed by retention (under mu)
	deletes deleteLog // the last admin delete of each name (stream_delete.go)
}

// Header names of stream MESSAGEs and SUBSCRIBEs (RabbitMQ's STOMP names
// where RabbitMQ has one).
const (
	hdrStreamOffset   = "x-stream-offset"   // MESSAGE: its offset; SUBSCRIBE: where to start
	hdrStreamConsumer = "x-stream-consumer" // SUBSCRIBE: durable cursor name
	hdrStreamGap      = "x-stream-gap-from" // MESSAGE: offsets from this one up to the message's were removed by retention
	hdrTimestamp      = "timestamp"         // MESSAGE: broker time of the append, ms since the epoch
)

var errNoStreams = errors.New("appliance: this journal does not store streams")

// openStreams loads every stream the journal holds and starts retention.
// Called by Open.
func (b *Broker) openStreams(ctx context.Context) error {
	r := &b.streams
	r.byName = map[string]*stream{}
	sj, ok := b.j.(StreamJournal)
	if !ok {
		return nil
	}
	r.j = sj
	states, err := sj.Streams(ctx)
	if err != nil {
		return fmt.Errorf("recover streams: %w", err)
	}
	for _, st := range states {
		r.byName[st.Name] = b.newStream(st)
		b.log.Info("stream recovered", "stream", st.Name, "first", st.First, "next", st.Next, "messages", st.Count, "bytes", st.Bytes, "cursors", len(st.Cursors))
	}
	b.wg.Add(1)
	go func() { defer b.wg.Done(); b.retention() }()
	return nil
}

func (b *Broker) newStream(st StreamState) *stream {
	c := b.cfg().Streams
	core := streamcore.New(streamcore.Config{PageMessages: c.PageMessages, PageBytes: c.PageBytes}, st.First, st.Next, st.Count, st.Bytes, st.Cursors)
	return &stream{b: b, name: st.Name, core: core, subs: map[streamcore.SubID]*subscription{}}
}

// streamExists reports whether stream name exists (for the create
// permission).
func (b *Broker) streamExists(name string) bool {
	b.streams.mu.Lock()
	defer b.streams.mu.Unlock()
	return b.streams.byName[name] != nil
}

// ErrTooManyStreams refuses a client's new stream beyond streams.max_streams.
var ErrTooManyStreams = errors.New("appliance: too many streams")

// openStream returns stream name, making it (in memory; the journal makes
// it with its first append) below streams.max_streams.
func (b *Broker) openStream(name string) (*stream, error) {
	r := &b.streams
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.j == nil || r.byName == nil {
		return nil, fmt.Errorf("%w: use /queue/ or /topic/ destinations", errNoStreams)
	}
	if st := r.byName[name]; st != nil {
		return st, nil
	}
	if len(r.byName) >= b.cfg().Streams.MaxStreams {
		return nil, fmt.Errorf("%w: %d streams exist (streams.max_streams): raise it, or use fewer stream names", ErrTooManyStreams, len(r.byName))
	}
	st := b.newStream(StreamState{Name: name})
	r.byName[name] = st
	return st, nil
}

func (b *Broker) streamList() []*stream {
	r := &b.streams
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*stream, 0, len(r.byName))
	for _, st := range r.byName {
		out = append(out, st)
	}
	return out
}

// --- appends --------------------------------------------------------------

// appendOp is the journal operation appending m to the stream.
func (st *stream) appendOp(m *Message) Op {
	return Op{Kind: OpAppend, Msg: m, Stream: &StreamOp{Name: st.name}}
}

// streamApp is a stream append of a transaction: its op's index.
type streamApp struct {
	st  *stream
	m   *Message
	idx int
}

// appended records a committed append (journal completion: signals only).
func (st *stream) appended(m *Message) {
	st.appends.Add(1)
	st.appendBytes.Add(uint64(m.Size()))
	st.mu.Lock()
	st.core.Appended(m.ID, int64(m.Size()))
	st.tail.push(m, st.b.cfg().Streams.TailBytes, st.b.mem)
	st.startPubLocked(m.ID)
	st.notifyPubLocked()
	reads := st.core.Take()
	st.mu.Unlock()
	st.startReads(reads)
}

// onStreamSend appends a SEND to a stream; the RECEIPT follows the commit
// and carries the offset (or duplicate:true and the first offset).
func (s *session) onStreamSend(f *stomp.Frame, name string) bool {
	st, err := s.b.openStream(name)
	if err != nil {
		s.fail(f, "stream not available", err.Error())
		return false
	}
	if s.b.checkDisk(false) {
		s.fail(f, "disk full", fmt.Sprintf("Free space in the data directory %s is below %d bytes (journal.min_free_bytes plus journal.wal_limit_bytes); stream %s accepts no messages until space is freed. Nothing was stored.", s.b.cfg().DataDir, s.b.diskFloor(), name))
		return false
	}
	m := s.streamMessage(f, name)
	if err := s.b.checkStreamSinks(name, m.Headers, m.Body); err != nil {
		s.fail(f, "message refused", err.Error())
		return false
	}
	if err := st.beginAppend(); err != nil {
		s.fail(f, "stream not available", err.Error())
		return false
	}
	receipt := f.Get("receipt")
	s.submit(&Batch{Ops: []Op{st.appendOp(m)}, Done: func(b *Batch, err error) {
		defer st.inflight.Done()
		s.b.journalResult(err)
		if err != nil {
			s.log.Error(notStored("message", err), "stream", name, "err", err)
			s.fail(f, notStored("message", err), err.Error())
			s.endReads(time.Now())
			return
		}
		op := &b.Ops[0]
		if op.Duplicate {
			s.b.stats.dedupHits.Add(1)
			if receipt != "" {
				s.send(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", receipt, "duplicate", "true", hdrStreamOffset, strconv.FormatUint(op.DupOf, 10)))
			}
			return
		}
		st.appended(m)
		if receipt != "" {
			s.send(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", receipt, hdrStreamOffset, strconv.FormatUint(m.ID, 10)))
		}
	}})
	return true
}

// streamMessage is a SEND's message for a stream: its headers, body and
// dedup id (dedup-id, _AMQ_DUPL_ID or Nats-Msg-Id, as for queues).
func (s *session) streamMessage(f *stomp.Frame, name string) *Message {
	m := &Message{Queue: name, Headers: userHeaders(f), Body: f.Body}
	s.rewriteReplyTo(m.Headers)
	for _, k := range []string{"dedup-id", "_AMQ_DUPL_ID", "Nats-Msg-Id"} {
		if v := f.Get(k); v != "" {
			m.DedupID = v
			break
		}
	}
	return m
}

// --- subscriptions ----------------------------------------------------------

// parseStreamStart reads x-stream-offset (streamcore.ParseStart) and
// resolves timestamp=T to the first offset at or after T.
func (s *session) parseStreamStart(v, name string) (streamcore.Start, error) {
	st, ts, isTS, err := streamcore.ParseStart(v)
	if err != nil || !isTS {
		return st, err
	}
	off, err := s.b.streams.j.StreamOffsetAt(s.b.ctx, name, ts*1000)
	if err != nil {
		return streamcore.Start{}, err
	}
	return streamcore.Start{Kind: streamcore.StartOffset, Offset: off}, nil
}

// subscribeStream starts stream subscription sub (its ack mode set); false:
// the session was failed.
func (s *session) subscribeStream(f *stomp.Frame, sub *subscription) bool {
	st, err := s.b.openStream(sub.name)
	if err != nil {
		s.fail(f, "stream not available", err.Error())
		return false
	}
	start, err := s.parseStreamStart(f.Get(hdrStreamOffset), sub.name)
	if err != nil {
		s.fail(f, "invalid x-stream-offset", err.Error())
		return false
	}
	cursor := f.Get(hdrStreamConsumer)
	if cursor != "" {
		if sub.ack != ackClient {
			s.fail(f, "invalid ack mode", fmt.Sprintf("%s needs ack:client (an ACK of offset N acknowledges N and every offset before it for the cursor); got ack:%s.", hdrStreamConsumer, sub.ack))
			return false
		}
		if len(cursor) > 255 {
			s.fail(f, "invalid "+hdrStreamConsumer, "A consumer name is at most 255 bytes.")
			return false
		}
	}
	prefetch := 0
	if sub.ack != ackAuto {
		prefetch = s.b.cfg().Queues.Prefetch
	}
	for _, k := range []string{"prefetch-count", "activemq.prefetchSize"} {
		if v := f.Get(k); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 65535 {
				s.fail(f, "invalid "+k, fmt.Sprintf("%s must be an integer from 1 to 65535; got %q.", k, v))
				return false
			}
			if sub.ack != ackAuto {
				prefetch = n
			}
			break
		}
	}
	s.b.streams.mu.Lock()
	s.b.streams.nextSub++
	sub.sid = s.b.streams.nextSub
	s.b.streams.mu.Unlock()
	sub.st = st
	st.mu.Lock()
	if st.deleting {
		st.mu.Unlock()
		s.fail(f, "stream not available", fmt.Sprintf("%v: %s; subscribe again once the delete is done.", ErrStreamDeleting, sub.name))
		return false
	}
	if cursor != "" {
		_, known := st.core.Cursor(cursor)
		if max := s.b.cfg().Streams.MaxCursors; !known && !st.core.CursorActive(cursor) && st.core.CursorCount() >= max {
			st.mu.Unlock()
			s.fail(f, "too many consumers", fmt.Sprintf("Stream %s has %d durable cursors (streams.max_cursors); a new %s name is refused. Reuse a name, raise streams.max_cursors, or delete the stream (herald stream delete %s).", sub.name, max, hdrStreamConsumer, sub.name))
			return false
		}
	}
	_, err = st.core.Subscribe(sub.sid, streamcore.AckMode(sub.ack), prefetch, start, cursor)
	if err != nil {
		st.mu.Unlock()
		if errors.Is(err, streamcore.ErrCursorInUse) {
			s.fail(f, "consumer name in use", fmt.Sprintf("Stream %s already has a subscriber with %s:%s; one consumer per name at a time. Retry once it has disconnected, or use another name.", sub.name, hdrStreamConsumer, cursor))
		} else {
			s.fail(f, "subscription refused", err.Error())
		}
		return false
	}
	st.subs[sub.sid] = sub
	sub.cursor = cursor
	s.subsMu.Lock()
	s.subs[sub.id] = sub
	s.subsMu.Unlock()
	s.nsubs.Add(1)
	reads := st.core.Take()
	st.mu.Unlock()
	st.startReads(reads)
	s.receipt(f)
	return true
}

// unsubscribe ends a stream subscription (UNSUBSCRIBE, disconnect).
func (st *stream) unsubscribe(sub *subscription) {
	st.mu.Lock()
	st.core.Unsubscribe(sub.sid)
	delete(st.subs, sub.sid)
	st.mu.Unlock()
}

// --- reads -------------------------------------------------------------------

func (st *stream) startReads(reads []streamcore.Read) {
	for _, rd := range reads {
		rd := rd
		if !st.b.goBackground(func() { st.read(rd) }) {
			return
		}
	}
}

// read runs one read the core asked for: it waits for room in the
// subscriber's connection output (stomp.max_output_bytes), reads a page
// from the journal, and queues the MESSAGEs the core says to write.
func (st *stream) read(rd streamcore.Read) {
	st.mu.Lock()
	sub := st.subs[rd.Sub]
	st.mu.Unlock()
	if sub == nil {
		return
	}
	s := sub.s
	if !s.waitOutputRoom() {
		return
	}
	st.mu.Lock()
	msgs, cached := st.tail.page(rd.From, rd.Limit, rd.MaxBytes)
	st.mu.Unlock()
	var err error
	if cached {
		st.tailHits.Add(1)
	} else {
		st.journalReads.Add(1)
		msgs, err = st.b.streams.j.StreamRead(st.b.ctx, st.name, rd.From, rd.Limit, rd.MaxBytes)
	}
	if err != nil {
		if st.b.ctx.Err() == nil {
			s.log.Error("stream read failed", "stream", st.name, "offset", rd.From, "err", err)
			s.drop("stream read failed", fmt.Sprintf("Reading stream %s at offset %d failed: %v. Subscribe again to retry.", st.name, rd.From, err))
		}
		return
	}
	var held int64
	entries := make([]streamcore.Entry, len(msgs))
	for i, m := range msgs {
		entries[i] = streamcore.Entry{Offset: m.ID, Size: int64(m.Size())}
		held += int64(m.Size())
	}
	if !cached { // a cached page is charged to the tail already
		st.b.mem.charge(held)
		defer st.b.mem.release(held)
	}
	st.mu.Lock()
	if st.subs[rd.Sub] != sub {
		st.core.Paged(rd.Sub, nil)
		st.mu.Unlock()
		return
	}
	i := 0 // deliveries come in offset order, a subsequence of msgs
	for _, d := range st.core.Paged(rd.Sub, entries) {
		for msgs[i].ID != d.Offset {
			i++
		}
		s.deliverQueue(sub.streamFrame(msgs[i], d), nil)
	}
	reads := st.core.Take()
	st.mu.Unlock()
	st.startReads(reads)
}

// waitOutputRoom waits until the connection's queued output is within
// stomp.max_output_bytes and the memory budget lets a connection holding
// that much take more (memBudget.over: a replay waits for the budget as a
// producer does, so many replays cannot hold more than the budget plus a
// page each); false when the session is ending.
func (s *session) waitOutputRoom() bool {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		s.outMu.Lock()
		if s.ending {
			s.outMu.Unlock()
			return false
		}
		held := s.outBytes
		if held <= s.b.cfg().Stomp.MaxOutputBytes && !s.b.mem.over(held) {
			s.outMu.Unlock()
			return true
		}
		ch := s.drainedCh()
		s.outMu.Unlock()
		s.b.mem.waiting.Add(1) // a release wakes us (memBudget.wake)
		s.b.mem.mu.Lock()
		room := s.b.mem.room
		s.b.mem.mu.Unlock()
		if t == nil {
			t = time.NewTimer(100 * time.Millisecond)
		} else {
			t.Reset(100 * time.Millisecond)
		}
		select {
		case <-ch:
		case <-room:
		case <-t.C: // the budget may have room without anyone waking us
		case <-s.b.stop:
			s.b.mem.waiting.Add(-1)
			return false
		}
		s.b.mem.waiting.Add(-1)
	}
}

// streamFrame is the MESSAGE of stream message m for subscription sub.
func (sub *subscription) streamFrame(m *Message, d streamcore.Delivery) *stomp.Frame {
	off := strconv.FormatUint(m.ID, 10)
	token := streamcore.AckToken(sub.sid, m.ID)
	// One allocation of the headers, sized for all of them.
	f := &stomp.Frame{Command: stomp.CmdMessage, Headers: make(stomp.Headers, 0, 7+len(m.Headers))}
	f.Headers = append(f.Headers,
		stomp.Header{Key: "subscription", Value: sub.id},
		stomp.Header{Key: "message-id", Value: token},
		stomp.Header{Key: "destination", Value: sub.dest},
		stomp.Header{Key: hdrStreamOffset, Value: off},
		stomp.Header{Key: hdrTimestamp, Value: strconv.FormatInt(m.Enqueued, 10)})
	if sub.ack != ackAuto {
		f.Headers = append(f.Headers, stomp.Header{Key: "ack", Value: token})
	}
	if d.Gap {
		f.Headers = append(f.Headers, stomp.Header{Key: hdrStreamGap, Value: strconv.FormatUint(d.GapFrom, 10)})
	}
	for _, h := range m.Headers {
		switch h.Key {
		case "subscription", "message-id", "destination", "ack", hdrStreamOffset, hdrTimestamp, hdrStreamGap:
			continue
		}
		f.Headers = append(f.Headers, h)
	}
	f.Body = m.Body
	return f
}

// --- acks ------------------------------------------------------------------------

// streamAck applies an ACK or NACK of a stream message in memory and
// returns the journal work of its cursor move. A NACK settles the message
// for the subscription (its credit comes back; a stream does not
// redeliver) without moving a durable cursor.
func (s *session) streamAck(token string, nack bool) (ackResult, bool) {
	id, off, ok := streamcore.ParseAckToken(token)
	if !ok {
		return ackResult{}, false
	}
	var sub *subscription
	for _, cand := range s.subs {
		if cand.kind == destStream && cand.sid == id {
			sub = cand
			break
		}
	}
	if sub == nil {
		s.b.stats.staleAcks.Add(1)
		return ackResult{stale: true}, true
	}
	st := sub.st
	st.mu.Lock()
	var mv *streamcore.CursorMove
	var held bool
	if nack {
		held = st.core.Nack(id, off)
	} else {
		mv, held = st.core.Ack(id, off)
	}
	reads := st.core.Take()
	st.mu.Unlock()
	st.startReads(reads)
	if !held {
		s.b.stats.staleAcks.Add(1)
	}
	if mv == nil {
		return ackResult{stale: true}, true
	}
	st.mu.Lock()
	st.cursorOpBegin(mv.Name)
	st.mu.Unlock()
	return ackResult{
		ops: []Op{{Kind: OpCursor, Stream: &StreamOp{Name: st.name, Cursor: mv.Name, Offset: mv.Offset}}},
		// Called once whatever happens to the op (committed, failed, or
		// its transaction given up).
		done: func(_ []Op, err error) {
			st.mu.Lock()
			if err == nil {
				st.core.CursorCommitted(mv.Name, mv.Offset)
			}
			st.cursorOpEnd(mv.Name)
			st.mu.Unlock()
		},
	}, true
}

// cursorOpBegin counts a move of cursor name submitted; under mu.
func (st *stream) cursorOpBegin(name string) {
	if st.cursorOps == nil {
		st.cursorOps = map[string]int{}
	}
	st.cursorOps[name]++
}

// cursorOpEnd counts a move of cursor name completed; under mu.
func (st *stream) cursorOpEnd(name string) {
	if st.cursorOps[name]--; st.cursorOps[name] <= 0 {
		delete(st.cursorOps, name)
		if st.cursorWake != nil {
			close(st.cursorWake)
			st.cursorWake = nil
		}
	}
}

// waitCursorOps waits until no move of cursor name (every cursor, for "")
// is between its submission and its completion.
func (st *stream) waitCursorOps(ctx context.Context, name string) error {
	for {
		st.mu.Lock()
		busy := st.cursorOps[name] > 0
		if name == "" {
			busy = len(st.cursorOps) > 0
		}
		if !busy {
			st.mu.Unlock()
			return nil
		}
		if st.cursorWake == nil {
			st.cursorWake = make(chan struct{})
		}
		w := st.cursorWake
		st.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the acknowledgements of stream %s being stored: %w", st.name, ctx.Err())
		}
	}
}

// --- retention ---------------------------------------------------------------------

// retention removes what each stream's retention ([streams], [[streams.policy]])
// no longer keeps, every streams.retention_interval, in transactions of at
// most streams.retention_batch messages: each waits for its commit before
// the next, so appends interleave with a large removal instead of waiting
// behind it.
func (b *Broker) retention() {
	for {
		t := time.NewTimer(b.cfg().Streams.RetentionInterval.Duration)
		select {
		case <-b.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		for _, st := range b.streamList() {
			for b.ctx.Err() == nil && st.retainStep() {
			}
		}
	}
}

// retainStep removes one batch of stream st's expired head; true when it
// removed a whole batch (there may be more).
func (st *stream) retainStep() bool {
	c := st.b.cfg().Streams
	pol := c.Retention(st.name)
	st.mu.Lock()
	// A reload's paging applies from here (each retention round).
	st.core.SetConfig(streamcore.Config{PageMessages: c.PageMessages, PageBytes: c.PageBytes})
	first, count, bytes, deleting := st.core.First(), st.core.Count(), st.core.Bytes(), st.deleting
	st.mu.Unlock()
	if count == 0 || deleting { // a trim after the delete would make the stream again
		return false
	}
	es, err := st.b.streams.j.StreamEntries(st.b.ctx, st.name, first, c.RetentionBatch)
	if err != nil {
		if st.b.ctx.Err() == nil {
			st.b.log.Warn("stream retention: read failed", "stream", st.name, "err", err)
		}
		return false
	}
	head := make([]streamcore.Aged, len(es))
	for i, e := range es {
		head[i] = streamcore.Aged{Offset: e.Offset, TS: e.TS, Size: e.Size}
	}
	upto, n := streamcore.PlanTrim(pol, head, count, bytes, st.b.now().UnixMilli())
	if n == 0 {
		return false
	}
	// Counted in inflight, as an append is: a delete that began since the
	// check above waits for it (a trim committed after the delete would
	// make the stream's row again).
	st.mu.Lock()
	if st.deleting {
		st.mu.Unlock()
		return false
	}
	st.inflight.Add(1)
	st.mu.Unlock()
	done := make(chan error, 1)
	start := time.Now()
	op := Op{Kind: OpTrim, Stream: &StreamOp{Name: st.name, Offset: upto, Limit: n}}
	st.b.j.Submit(&Batch{Ops: []Op{op}, Done: func(bt *Batch, err error) {
		defer st.inflight.Done()
		if err == nil {
			o := &bt.Ops[0]
			st.mu.Lock()
			st.core.Trimmed(o.Stream.First, o.Affected, o.Bytes)
			st.tail.trim(o.Stream.First)
			st.trimmedN.Add(uint64(o.Affected))
			reads := st.core.Take()
			st.mu.Unlock()
			st.startReads(reads)
			st.b.streams.mu.Lock()
			st.b.streams.trimmed += uint64(o.Affected)
			st.b.streams.mu.Unlock()
		}
		done <- err
	}})
	select {
	case err := <-done:
		if err != nil {
			st.b.log.Warn("stream retention: trim failed", "stream", st.name, "err", err)
			return false
		}
	case <-st.b.ctx.Done():
		return false
	}
	if n < c.RetentionBatch {
		return false
	}
	// More to remove: pause as long as this trim took, so that retention
	// takes at most about half of the journal writer's time and appends
	// get commits of their own between trims.
	t := time.NewTimer(time.Since(start))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-st.b.ctx.Done():
		return false
	}
}
