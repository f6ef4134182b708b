package appliance

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/appliance/stomp"
)

// connInfo is what CONNECT negotiated, published once for goroutines other
// than the session's reader.
type connInfo struct {
	version string
	login   string
}

// outItem is one frame waiting for the session's writer.
type outItem struct {
	f       *stomp.Frame
	autoAck *delivery // auto-ack delivery: delete once written
	topic   bool
	last    bool // close the connection after writing this

	// topic messages: their subscription, and how many of its messages
	// were dropped just before this one (slow_subscriber = "drop-oldest"),
	// written as the dropped-before header.
	sub   *subscription
	drops int
	stats *topicStats // its topic's counters (a drop counts there)
	size  int64       // bytes it weighs in the output budget
	// shared, for a live topic message: f is shared.f, which every
	// subscriber's item holds; the writer encodes this subscriber's head
	// and the shared tail (f is not modified).
	shared *topicShared
}

// frameSize is what a frame weighs in a connection's output budget and in
// the memory budget: what it holds in memory, not only its encoded size.
// A RECEIPT is about 30 bytes on the wire and 160 in memory (the frame,
// its headers, its place in the output queue), and a flood of small frames
// must be counted at what it costs.
func frameSize(f *stomp.Frame) int64 {
	n := len(f.Command) + len(f.Body) + frameOverhead
	for _, h := range f.Headers {
		n += len(h.Key) + len(h.Value) + headerOverhead
	}
	return int64(n)
}

// frameOverhead and headerOverhead are the memory a frame and each of its
// headers take beside their bytes (measured: a RECEIPT with one header
// holds about 163 bytes).
const (
	frameOverhead  = 128
	headerOverhead = 32
)

// session is one STOMP connection: a reader (the run goroutine), which
// handles frames in order, and a writer goroutine, which batches outgoing
// frames into few writes and sends heart-beats.
type session struct {
	b    *Broker
	id   uint64
	conn net.Conn
	r    *stomp.Reader
	log  *slog.Logger
	peer string

	// set by CONNECT, read-only afterwards. version is the reader
	// goroutine's copy; other goroutines (the writer, admin views) read info,
	// published once by CONNECT: nil before.
	version   string
	info      atomic.Pointer[connInfo]
	connected atomic.Bool
	hbSend    time.Duration // we beat at least this often
	hbRecv    time.Duration // the client beats at least this often

	// who CONNECT authenticated (authz.go), and the user whose connection
	// count holds this one (reader goroutine).
	ident   atomic.Pointer[auth.Identity]
	counted string

	outMu    sync.Mutex
	out      []outItem
	outBytes int64         // frames queued or being written (stomp.max_output_bytes)
	drained  chan struct{} // closed and replaced when the writer wrote a batch and drainWait
	// drainWait: a goroutine waits on drained (drainedCh); a write that
	// nobody waits for leaves the channel as it is (no close and
	// allocation per write).
	drainWait bool
	topicQ    int
	topicB    int64 // bytes of the topic messages queued (topics.subscriber_buffer_bytes)
	// dropped topic messages not yet announced, by subscription: the
	// subscription had no later message queued when they were dropped; its
	// next one carries the count.
	pendingDrops map[*subscription]int
	ending       bool // a last frame is queued: accept no more
	// head is the unwritten rest of a publisher's direct write (see
	// topic_direct.go): the writer writes it before anything else;
	// headSize is what its frames weigh in outBytes.
	head     []byte
	headSize int64
	// wmu is held by whoever writes to conn: the writer for each batch and
	// heart-beat, a publisher's goroutine for a direct write (TryLock).
	wmu sync.Mutex
	// direct: conn is a plain TCP socket, which a publisher's goroutine may
	// write to (not TLS, whose state a write timeout corrupts, nor a
	// WebSocket, whose writes are whole messages).
	direct    bool
	raw       *rawWriter   // conn's raw socket for direct writes; under wmu
	rbuf      []byte       // sendNow's encoding buffer; under wmu
	lastWrite atomic.Int64 // UnixNano of the last write to conn, for heart-beats
	// flushq: sessions whose output this session's reader filled after
	// their writer was idle, to write to at its next flush (reader
	// goroutine only; flushClients); dbuf is that flush's buffer.
	flushq []*session
	// corked: topic sinks this session's reader left a message open in
	// (TopicSinkBatcher.PublishFrom with more), flushed with flushq.
	corked   []TopicSinkBatcher
	flushAge int // frames read since flushq and corked were last flushed
	dbuf     []byte
	wake     chan struct{}
	writerWG sync.WaitGroup
	// stopW asks the writer to flush and end: set, then a wake (cleanup);
	// writerDone is closed when the writer has ended. The writer waits on
	// wake alone (a receive, not a select, per batch).
	stopW      atomic.Bool
	writerDone chan struct{}
	// The write deadline set last by a writer of the socket, and whether
	// the session was hurried then (armWriteDeadline). Under wmu.
	wdl      time.Time
	wdlHurry bool

	// reader goroutine only; subs is written under subsMu too, so that
	// SetAuth can read it from another goroutine.
	subsMu  sync.Mutex
	subs    map[string]*subscription
	txs     map[string]*transaction
	txBytes int64 // weight of every open transaction's frames (stomp.max_transaction_bytes)
	// bodyHeld is what the frame being read or handled holds of the memory
	// budget (its body as it arrives).
	bodyHeld int64
	// the read deadline in force is for waiting (what readError reports on
	// a timeout); connectBy is when CONNECT must be complete.
	waiting   readWait
	connectBy time.Time

	// readEnd, when non-zero, is the time (UnixNano) by which the reader
	// must stop because the session is ending; no later read deadline
	// overrides it.
	readEnd atomic.Int64

	jpending atomic.Int64 // journal batches submitted, not completed
	jmu      sync.Mutex
	jbytes   int64          // weight of those batches (stomp.max_journal_pending_bytes)
	jroom    chan struct{}  // closed and replaced each time one completes
	iq       intakeQ        // its turn in the journal intake (broker.intake)
	nsubs    atomic.Int32   // len(subs), readable by admin
	hurry    atomic.Bool    // being dropped: short write deadline
	temps    []string       // temporary queues this session owns; reader goroutine
	acks     []*stomp.Frame // ACKs read, waiting to be handled as a group (onAckGroup); reader goroutine
	done     chan struct{}

	// ackLost: an ACK or NACK without a receipt was not journaled (its
	// messages are delivered again); a DISCONNECT then gets an ERROR, not
	// the RECEIPT that says everything before it is durable. ackUnknown:
	// one met an I/O error at its commit (ErrOutcomeUnknown): it may be
	// stored, and the ERROR says so.
	ackLost, ackUnknown atomic.Bool

	started                              time.Time
	framesIn, framesOut, bytesIn, msgsIn atomic.Uint64
	msgsOut, slowDrops                   atomic.Uint64
	closeOnce                            sync.Once
	limitsOf                             *Config // the config whose frame limits r has (reader goroutine)
	// frameAt is when the reader came to the current frame's first octet,
	// frameDL the frame deadline last set (reader goroutine): see
	// frameStarted.
	frameAt time.Time
	frameDL time.Time
	// lastDest: the last destination sent to, parsed (reader goroutine;
	// see session.parseDest).
	lastDest parsedDest
}

func newSession(b *Broker, c net.Conn) *session {
	id := b.nextSession.Add(1)
	s := &session{
		b:          b,
		id:         id,
		conn:       c,
		peer:       c.RemoteAddr().String(),
		r:          stomp.NewReader(countingReader{c, nil}, b.readerLimits()),
		wake:       make(chan struct{}, 1),
		drained:    make(chan struct{}),
		jroom:      make(chan struct{}),
		writerDone: make(chan struct{}),
		subs:       map[string]*subscription{},
		txs:        map[string]*transaction{},
		done:       make(chan struct{}),
		started:    b.now(),
	}
	_, s.direct = c.(*net.TCPConn)
	var in io.Reader = c
	if tc, ok := c.(*net.TCPConn); ok {
		if rr := newRawConnReader(tc); rr != nil {
			in = rr
		}
	}
	s.r = stomp.NewReader(countingReader{in, &s.bytesIn}, b.readerLimits())
	s.log = b.log.With("session", id, "peer", s.peer)
	return s
}

type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n != nil {
		c.n.Add(uint64(n))
	}
	return n, err
}

// readWait is what the reader's current read deadline bounds.
type readWait uint8

const (
	waitConnect   readWait = iota // CONNECT (stomp.connect_timeout)
	waitHeartbeat                 // the client's next heart-beat or frame
	waitIdle                      // the next frame of a client without heart-beats (stomp.idle_timeout)
	waitFrame                     // the rest of a started frame (stomp.frame_timeout)
)

// run reads and handles frames until the connection ends, then cleans up.
// Frames that arrived before the client closed its socket are handled.
//
// Every read has a deadline: CONNECT within connect_timeout of the TCP
// connection; then the next frame or heart-beat within twice the negotiated
// heart-beat interval plus a second, or, without heart-beats, within
// idle_timeout; and once a frame has started, all of it within
// frame_timeout, so that a slow or stalled frame cannot hold the connection
// (and the memory of its body) forever.
func (s *session) run() {
	s.writerWG.Add(1)
	go s.writer()
	defer s.cleanup()
	s.connectBy = time.Now().Add(s.b.cfg().Stomp.ConnectTimeout.Duration)
	s.r.OnFrameStart(s.frameStarted)
	s.r.OnBody(s.bodyGrows)
	for {
		// The topic messages the frames handled so far queued for idle
		// subscribers are written once no whole frame is left to handle
		// (so that a burst goes out in one write per subscriber).
		if s.deferred() {
			if s.flushAge++; !s.r.FrameBuffered() || s.flushAge >= directMaxDefer {
				s.flushClients()
			}
		}
		// With input already buffered, ReadFrame does not wait before
		// the next frame starts (and frameStarted sets its deadline).
		if s.r.Buffered() == 0 {
			s.awaitNext()
		}
		f, err := s.r.ReadFrame()
		if err != nil {
			if len(s.acks) > 0 && !s.onAckGroup() {
				return
			}
			s.readError(err)
			return
		}
		if f == nil {
			continue // heart-beat
		}
		s.framesIn.Add(1)
		// ACKs read together are handled together (onAckGroup): while
		// another whole frame is already buffered, an ACK waits for it.
		if s.ackGroupable(f) {
			s.acks = append(s.acks, f)
			s.b.mem.release(s.bodyHeld)
			s.bodyHeld = 0
			if len(s.acks) < maxAckGroup && s.r.FrameBuffered() {
				continue
			}
			if !s.onAckGroup() {
				return
			}
			continue
		}
		if len(s.acks) > 0 && !s.onAckGroup() {
			return
		}
		if s.deferred() && !isTopicSend(f) {
			// Only a topic SEND may leave them waiting: anything else
			// may wait itself.
			s.flushClients()
		}
		if f.Command == stomp.CmdSend {
			s.waitMemory() // a SEND without a body weighs something too
		}
		ok := s.handle(f)
		s.b.mem.release(s.bodyHeld)
		s.bodyHeld = 0
		if !ok {
			return
		}
	}
}

// bodyGrows charges n more octets of the body being read to the memory
// budget, and holds the reader while the budget is spent.
func (s *session) bodyGrows(n int) {
	s.bodyHeld += int64(n)
	s.b.mem.charge(int64(n))
	s.waitMemory()
}

// waitMemory holds the reader while the broker's memory budget is spent
// (memory.budget_bytes; see memBudget.over): producers are not read until
// deliveries and acknowledgements free it. The frame in progress gets its
// frame_timeout again afterwards.
func (s *session) waitMemory() {
	if s.deferred() && s.b.mem.over(s.memHeld()) {
		s.flushClients() // what they hold is released as they are written
	}
	if s.b.mem.wait(s.memHeld, s.isEnding) {
		s.frameStartedAt(time.Now())
	}
}

// memHeld is what this connection holds of the memory budget: frames to
// write, open transactions, the body being read. Reader goroutine.
func (s *session) memHeld() int64 {
	s.outMu.Lock()
	out := s.outBytes
	s.outMu.Unlock()
	return out + s.txBytes + s.bodyHeld
}

// awaitNext sets the deadline for the next frame or heart-beat.
func (s *session) awaitNext() {
	switch {
	case !s.connected.Load():
		s.setReadDeadline(waitConnect, s.connectBy)
	case s.hbRecv > 0:
		// Tolerate late beats: twice the interval plus a second.
		s.setReadDeadline(waitHeartbeat, time.Now().Add(2*s.hbRecv+time.Second))
	case s.b.cfg().Stomp.IdleTimeout.Duration > 0:
		s.setReadDeadline(waitIdle, time.Now().Add(s.b.cfg().Stomp.IdleTimeout.Duration))
	default:
		s.setReadDeadline(waitIdle, time.Time{})
	}
}

// frameStarted runs when the reader comes to the first octet of a frame:
// the rest must follow within frame_timeout (and CONNECT still within its
// own deadline). Its time runs from now, not from the read that brought
// the octet: the reader may have waited since (memory, journal or output
// room), which is not the client's time.
//
// The deadline set is frame_timeout and a sixteenth from now, and a frame
// that starts while the one in force still gives it frame_timeout keeps
// it: a burst of frames sets it about once per sixteenth of frame_timeout
// rather than per frame (the poller's deadline update was a tenth of a
// flooded session's time). A stalled frame is therefore closed between
// frame_timeout and 17/16 of it after it started.
func (s *session) frameStarted() { s.frameStartedAt(time.Now()) }

// frameStartedAt is frameStarted at now.
func (s *session) frameStartedAt(now time.Time) {
	s.frameAt = now
	s.syncLimits() // a reload may have changed them (reload.go)
	ft := s.b.cfg().Stomp.FrameTimeout.Duration
	if ft <= 0 {
		return
	}
	d := now.Add(ft)
	if !s.connected.Load() && s.connectBy.Before(d) {
		s.setReadDeadline(waitConnect, s.connectBy)
		return
	}
	if s.waiting == waitFrame && !s.frameDL.Before(d) && s.frameDL.Sub(d) <= ft/16 {
		return // the deadline in force gives the frame its frame_timeout
	}
	s.frameDL = d.Add(ft / 16)
	s.setReadDeadline(waitFrame, s.frameDL)
}

// setReadDeadline sets the read deadline (zero: none) for w, unless the
// session is ending and must stop reading sooner.
func (s *session) setReadDeadline(w readWait, t time.Time) {
	s.b.stats.readDeadlines.Add(1)
	s.waiting = w
	s.conn.SetReadDeadline(t)
	// endReads stores before it sets the deadline: if it ran after the
	// load below, its deadline is the later one set.
	if e := s.readEnd.Load(); e != 0 && (t.IsZero() || e < t.UnixNano()) {
		s.conn.SetReadDeadline(time.Unix(0, e))
	}
}

// endReads makes the reader stop by t (any goroutine): the session is ending.
func (s *session) endReads(t time.Time) {
	s.readEnd.Store(t.UnixNano())
	s.conn.SetReadDeadline(t)
}

func (s *session) readError(err error) {
	s.outMu.Lock()
	ending := s.ending
	s.outMu.Unlock()
	if ending {
		return // an ERROR is already on its way
	}
	var pe *stomp.Error
	var ne net.Error
	switch {
	case errors.As(err, &pe):
		s.log.Warn("protocol error; closing connection", "err", pe.Reason)
		if pe.Limit != "" {
			// The reader's limit names are those of stomp.Limits.
			key := map[string]string{"max_body": "stomp.max_body_bytes"}[pe.Limit]
			if key == "" {
				key = "stomp." + pe.Limit
			}
			s.fail(nil, pe.Reason+" ("+key+")", "The frame exceeds "+key+"; the connection is closed. Send smaller frames, or raise "+key+" in the server's configuration.")
			break
		}
		s.fail(nil, pe.Reason, "The frame could not be decoded; the connection is closed.")
	case errors.As(err, &ne) && ne.Timeout():
		cfg := &s.b.cfg().Stomp
		switch s.waiting {
		case waitFrame:
			s.log.Warn("frame not complete in time; closing connection", "frame_timeout", cfg.FrameTimeout.Duration)
			s.fail(nil, "frame timeout", fmt.Sprintf("A frame was started but not complete within %s (stomp.frame_timeout); the connection is closed.", cfg.FrameTimeout.Duration))
		case waitHeartbeat:
			// The peer is taken for dead: its last frames get the short
			// deadline of a dropped session, not stomp.write_timeout.
			s.hurry.Store(true)
			s.conn.SetWriteDeadline(time.Now().Add(lastWriteTimeout))
			s.log.Warn("peer silent past its heart-beat interval; closing connection", "heartbeat", s.hbRecv)
			s.fail(nil, "heart-beat timeout", fmt.Sprintf("Nothing received for more than twice the negotiated heart-beat interval (%s).", s.hbRecv))
		case waitIdle:
			s.log.Info("idle connection without heart-beats; closing it", "idle_timeout", cfg.IdleTimeout.Duration)
			s.fail(nil, "idle timeout", fmt.Sprintf("Nothing received for %s on a connection without client heart-beats (stomp.idle_timeout); the connection is closed. Negotiate heart-beats in CONNECT (for example heart-beat:10000,10000) to stay connected while idle.", cfg.IdleTimeout.Duration))
		default:
			s.log.Warn("no CONNECT frame in time; closing connection")
			s.fail(nil, "connect timeout", "Send CONNECT first.")
		}
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
	case errors.Is(err, io.ErrUnexpectedEOF):
		s.log.Info("connection closed inside a frame")
	default:
		s.log.Debug("read failed", "err", err)
	}
}

// shutdown ends the session from outside (server stop, admin close).
func (s *session) shutdown(reason string) {
	s.drop(reason, "")
}

// cleanup runs once the reader stops: the writer flushes what is queued,
// subscriptions end (their unacked messages return to their queues), open
// transactions are discarded, and the connection closes.
func (s *session) cleanup() {
	// Stop the writer first: once it has flushed, every MESSAGE it wrote has
	// had its auto-ack applied, so ending the subscriptions below returns
	// exactly the messages that never reached the socket.
	if s.deferred() {
		s.flushClients()
	}
	s.outMu.Lock()
	s.ending = true
	s.outMu.Unlock()
	// Locks are given up at once: their release does not depend on what
	// the writer still flushes, which can take up to stomp.write_timeout
	// for a peer that stopped reading, while the next waiter (and the
	// holder's fencing token) would wait on a dead connection.
	s.releaseLocks()
	s.stopW.Store(true)
	select {
	case s.wake <- struct{}{}: // seen by the writer after the store
	case <-s.writerDone:
	}
	s.writerWG.Wait()
	// What was never written, open transactions and a body half read
	// leave the memory budget with the session.
	s.outMu.Lock()
	s.b.mem.release(s.outBytes)
	s.outBytes = 0
	s.outMu.Unlock()
	s.b.mem.release(s.txBytes + s.bodyHeld)
	s.txBytes, s.bodyHeld = 0, 0
	for _, sub := range s.subs {
		s.endSubscription(sub)
	}
	s.subsMu.Lock()
	s.subs = nil
	s.subsMu.Unlock()
	s.txs = nil
	s.dropTemps()
	s.releaseUser()
	s.conn.Close()
	close(s.done)
}

// releaseLocks ends the session's lock subscriptions (held or waiting),
// ahead of its other subscriptions.
func (s *session) releaseLocks() {
	var locks []*subscription
	s.subsMu.Lock()
	for id, sub := range s.subs {
		if sub.kind == destLock {
			locks = append(locks, sub)
			delete(s.subs, id)
		}
	}
	s.subsMu.Unlock()
	for _, sub := range locks {
		s.endSubscription(sub)
	}
}

// lastWriteTimeout bounds the writes of a session that is being dropped (a
// slow subscriber, a server shutdown): its last frames get a short chance,
// and its unacknowledged queue messages go back to their queues soon.
const lastWriteTimeout = 5 * time.Second

func (s *session) writeTimeout() time.Duration {
	if s.hurry.Load() {
		return min(lastWriteTimeout, s.b.cfg().Stomp.WriteTimeout.Duration)
	}
	return s.b.cfg().Stomp.WriteTimeout.Duration
}

// drop ends the session from outside its reader: an ERROR saying why, a
// short deadline for the writes still pending, and the reader woken.
func (s *session) drop(msg, detail string) {
	s.hurry.Store(true)
	s.conn.SetWriteDeadline(time.Now().Add(lastWriteTimeout))
	s.fail(nil, msg, detail)
	s.endReads(time.Now())
}

// isEnding reports whether the session is closing (its last frame queued or
// its connection gone).
func (s *session) isEnding() bool {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	return s.ending
}

// --- output -------------------------------------------------------------

func (s *session) push(it outItem) bool {
	s.outMu.Lock()
	if s.ending {
		s.outMu.Unlock()
		return false
	}
	it.size = frameSize(it.f)
	s.outBytes += it.size
	s.b.mem.charge(it.size)
	s.out = append(s.out, it)
	if it.last {
		s.ending = true
	}
	s.outMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// send queues a control frame (RECEIPT, CONNECTED).
func (s *session) send(f *stomp.Frame) { s.push(outItem{f: f}) }

// deliverQueue queues a MESSAGE from a queue; bounded by prefetch credit.
// autoAck, when set, is deleted from its queue once the frame is written.
func (s *session) deliverQueue(f *stomp.Frame, autoAck *delivery) {
	s.push(outItem{f: f, autoAck: autoAck})
}

// deliverTopic queues a MESSAGE of topic subscription sub; false when the
// subscriber is too slow and the message was dropped.
//
// With slow_subscriber = "drop-oldest" a full buffer drops the oldest queued
// topic message instead, and every dropped message is announced exactly once,
// by the dropped-before header of the next message of the same subscription:
// one already queued, else the next one queued for it. Never a silent gap.
func (s *session) deliverTopic(sub *subscription, st *topicStats, f *stomp.Frame) bool {
	return s.queueTopic(sub, st, f, nil, nil)
}

// deliverTopicShared is deliverTopic for a message shared by its
// subscribers (see topicShared). from, when not nil, is the publisher's
// session: if this message is the first in s's empty output, s goes on
// from's flush list (flushClients) instead of its writer being woken.
func (s *session) deliverTopicShared(sub *subscription, st *topicStats, t *topicShared, from *session) bool {
	return s.queueTopic(sub, st, &t.f, t, from)
}

func (s *session) queueTopic(sub *subscription, st *topicStats, f *stomp.Frame, shared *topicShared, from *session) bool {
	limit, byteLimit := s.b.cfg().Topics.SubscriberBuffer, s.b.cfg().Topics.SubscriberBufferBytes
	size := frameSize(f)
	if shared != nil {
		size += int64(len(sub.id)) + 2*headerOverhead // its own headers
	}
	s.outMu.Lock()
	if s.ending {
		s.outMu.Unlock()
		return false
	}
	for s.topicQ >= limit || (s.topicQ > 0 && s.topicB+size > byteLimit) {
		if s.b.cfg().Topics.SlowSubscriber != "drop-oldest" {
			s.outMu.Unlock()
			s.slowDrops.Add(1)
			s.b.stats.slowDrops.Add(1)
			s.log.Warn("slow subscriber dropped", "buffered", limit, "buffered_bytes", byteLimit)
			s.drop("slow consumer", fmt.Sprintf("More than %d topic messages or %d bytes were waiting for this connection (topics.subscriber_buffer, topics.subscriber_buffer_bytes); it is closed so that other subscribers are not slowed.", limit, byteLimit))
			return false
		}
		if !s.dropOldestTopicLocked() {
			break
		}
		s.slowDrops.Add(1)
		s.b.stats.slowDrops.Add(1)
	}
	it := outItem{f: f, topic: true, sub: sub, stats: st, size: size, shared: shared}
	if n := s.pendingDrops[sub]; n > 0 {
		it.drops = n
		delete(s.pendingDrops, sub)
	}
	first := len(s.out) == 0
	s.out = append(s.out, it)
	s.topicQ++
	s.topicB += size
	s.outBytes += size
	s.b.mem.charge(size)
	s.outMu.Unlock()
	if from != nil && s.direct {
		// Whoever queues into an empty output gets it written: the
		// publisher's flush (or, failing that, this writer's wake-up)
		// takes everything queued behind it too.
		if first {
			from.flushq = append(from.flushq, s)
		}
		return true
	}
	s.signal()
	return true
}

// signal wakes the writer.
func (s *session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// dropOldestTopicLocked removes the oldest queued topic message and hands
// its count (itself and the drops it carried) to the next message of its
// subscription. s.outMu is held.
func (s *session) dropOldestTopicLocked() bool {
	for i := range s.out {
		it := s.out[i]
		if !it.topic {
			continue
		}
		lost := it.drops + 1
		if it.stats != nil {
			it.stats.dropped.Add(1)
		}
		s.out = append(s.out[:i], s.out[i+1:]...)
		s.topicQ--
		s.topicB -= it.size
		s.outBytes -= it.size
		s.b.mem.release(it.size)
		for j := i; j < len(s.out); j++ {
			if s.out[j].topic && s.out[j].sub == it.sub {
				s.out[j].drops += lost
				return true
			}
		}
		if s.pendingDrops == nil {
			s.pendingDrops = map[*subscription]int{}
		}
		s.pendingDrops[it.sub] += lost
		return true
	}
	return false
}

// forgetDrops discards the unannounced drops of an ended subscription: it
// gets no next message.
func (s *session) forgetDrops(sub *subscription) {
	s.outMu.Lock()
	delete(s.pendingDrops, sub)
	s.outMu.Unlock()
}

// fail queues an ERROR frame (the last frame of the session).
func (s *session) fail(req *stomp.Frame, msg, detail string) {
	f := stomp.NewFrame(stomp.CmdError, "message", msg)
	if req != nil {
		if r := req.Get("receipt"); r != "" {
			f.Headers.Add("receipt-id", r)
		}
	}
	if detail != "" {
		f.Headers.Add("content-type", "text/plain")
		f.Body = []byte(detail)
	}
	s.push(outItem{f: f, last: true})
}

func (s *session) writer() {
	defer s.writerWG.Done()
	defer close(s.writerDone)
	bw := bufio.NewWriterSize(s.conn, 64<<10)
	var buf []byte
	var items []outItem
	var acks []*delivery
	var tick <-chan time.Time
	var ticker *time.Ticker
	s.lastWrite.Store(time.Now().UnixNano())
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	stopping := false
	var hb time.Duration
	hbKnown := false
	for {
		// hbSend is written by the reader before connected is set: read it
		// only after seeing connected.
		if ticker == nil && !hbKnown && s.connected.Load() {
			hbKnown, hb = true, s.hbSend
			if hb > 0 {
				ticker = time.NewTicker(hb / 2)
				tick = ticker.C
			}
		}
		if !stopping {
			if tick == nil {
				<-s.wake
			} else {
				select {
				case <-s.wake:
				case <-tick:
				}
			}
			stopping = s.stopW.Load()
		}
		// The socket is this goroutine's until the batch is written: a
		// publisher's direct write (topic_direct.go) cannot start meanwhile,
		// and the rest of one that timed out (head) goes first.
		s.wmu.Lock()
		s.outMu.Lock()
		items, s.out = s.out, items[:0]
		head, headSize := s.head, s.headSize
		s.head, s.headSize = nil, 0
		// The batch taken leaves topics.subscriber_buffer*: the bound is
		// on what waits for the writer, and one batch being written can
		// hold as much again (design.md, the budgets table). Counting it
		// until written was tried and stranded dropped-before counts.
		s.topicQ, s.topicB = 0, 0
		s.outMu.Unlock()
		if len(items) == 0 && head == nil {
			if stopping {
				bw.Flush()
				s.wmu.Unlock()
				return
			}
			if hb > 0 && time.Since(time.Unix(0, s.lastWrite.Load())) >= hb*3/4 {
				s.armWriteDeadline()
				if _, err := s.conn.Write([]byte{'\n'}); err != nil {
					s.wmu.Unlock()
					s.writeFailed(err)
					return
				}
				s.lastWrite.Store(time.Now().UnixNano())
			}
			s.wmu.Unlock()
			continue
		}
		s.armWriteDeadline()
		version := "" // before CONNECT: as the reader decodes
		if ci := s.info.Load(); ci != nil {
			version = ci.version
		}
		last := false
		var err error
		if head != nil {
			_, err = bw.Write(head)
		}
		for _, it := range items {
			if err != nil {
				break
			}
			if it.shared != nil {
				// Its own head, then the tail all its subscribers share
				// (straight into the buffered writer).
				buf = it.shared.appendHead(buf[:0], it.sub, it.drops, version)
				if _, err = bw.Write(buf); err != nil {
					break
				}
				if _, err = bw.Write(it.shared.tail(version)); err != nil {
					break
				}
			} else {
				buf = appendItem(buf[:0], &it, version)
				if _, err = bw.Write(buf); err != nil {
					break
				}
			}
			s.framesOut.Add(1)
			if it.f.Command == stomp.CmdMessage {
				s.msgsOut.Add(1)
			}
			if it.last {
				last = true
				break
			}
		}
		if err == nil {
			err = bw.Flush()
		}
		s.wmu.Unlock()
		if err != nil {
			s.writeFailed(err)
			return
		}
		s.lastWrite.Store(time.Now().UnixNano())
		acks = acks[:0]
		written := headSize
		for i := range items {
			if items[i].autoAck != nil {
				acks = append(acks, items[i].autoAck)
			}
			written += items[i].size
			items[i] = outItem{}
		}
		s.wrote(written)
		if len(acks) > 0 {
			autoAcked(acks)
			clear(acks) // each holds its message (and body) alive
		}
		if cap(buf) > maxWriterBuf {
			buf = nil // one large frame's encoding is not kept for the next
		}
		if last {
			// ERROR sent: end the session. Give the peer a moment to read
			// it before the reset that unread input would cause.
			if tc, ok := s.conn.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			s.endReads(time.Now().Add(100 * time.Millisecond))
			return
		}
	}
}

// armWriteDeadline gives the write about to start at least
// writeTimeout: the deadline set last (wdl) is kept while it is still
// between writeTimeout and 9/8 of it away, otherwise one 9/8 of it away is
// set. Setting a deadline re-arms a runtime timer under the poller's
// locks, a few microseconds per write at thousands of writes a second;
// this way a busy connection's writer sets one about every eighth of
// write_timeout. Others change the deadline in two ways: a dropped
// session's shorter one, set with hurry (so the first write after hurry
// always sets its own: wdlHurry), and rawWrite's clearing of one that
// passed, which clears wdl too. s.wmu is held.
func (s *session) armWriteDeadline() {
	now := time.Now()
	wt := s.writeTimeout()
	hurry := s.hurry.Load()
	if left := s.wdl.Sub(now); left >= wt && left <= wt+wt/8 && hurry == s.wdlHurry {
		return
	}
	s.wdl, s.wdlHurry = now.Add(wt+wt/8), hurry
	s.conn.SetWriteDeadline(s.wdl)
}

// maxWriterBuf is the most encoding buffer a session's writer keeps
// between batches: one frame of max_body_bytes would otherwise stay
// allocated (and uncounted) for as long as the connection lasts.
const maxWriterBuf = 64 << 10

// appendItem appends the encoding of an unshared frame (its
// dropped-before header set first: the frame is the writer's now, no other
// goroutine holds it).
func appendItem(buf []byte, it *outItem, version string) []byte {
	if it.drops > 0 {
		it.f.Headers.Set("dropped-before", strconv.Itoa(it.drops))
	}
	return stomp.AppendFrame(buf, it.f, version)
}

// wrote takes n written bytes off the output budget and wakes a reader
// waiting for room (see waitOutput).
func (s *session) wrote(n int64) {
	s.outMu.Lock()
	// A direct write (topic_direct.go) reports its bytes after it let go
	// of the socket, and the session's cleanup may have released all of
	// outBytes, these included, in between: release only what is left.
	n = min(n, s.outBytes)
	s.outBytes -= n
	s.b.mem.release(n)
	if s.drainWait {
		s.drainWait = false
		close(s.drained)
		s.drained = make(chan struct{})
	}
	s.outMu.Unlock()
}

// drainedCh returns the channel the writer closes after its next write,
// for a goroutine about to wait for room. s.outMu is held.
func (s *session) drainedCh() <-chan struct{} {
	s.drainWait = true
	return s.drained
}

// waitOutput holds the reader while the frames waiting for the writer
// weigh more than stomp.max_output_bytes: a client that sends but does not
// read (its RECEIPTs, its MESSAGEs) is not read either (TCP backpressure)
// until the writer's write timeout ends it. Ending: the session is ending.
func (s *session) waitOutput() (ending bool) {
	limit := s.b.cfg().Stomp.MaxOutputBytes
	counted := false
	for {
		s.outMu.Lock()
		if s.outBytes <= limit || s.ending {
			ending = s.ending
			s.outMu.Unlock()
			return ending
		}
		ch := s.drainedCh()
		s.outMu.Unlock()
		if !counted {
			counted = true
			s.b.stats.outputWaits.Add(1)
		}
		if s.deferred() {
			s.flushClients() // the reader waits
		}
		<-ch
	}
}

func (s *session) writeFailed(err error) {
	s.log.Info("write failed; closing connection", "err", err)
	s.outMu.Lock()
	s.ending = true
	s.out = nil
	s.head = nil
	close(s.drained) // a reader waiting for room goes on, and ends
	s.drained = make(chan struct{})
	s.drainWait = false
	s.outMu.Unlock()
	s.conn.Close()
}

// --- receipts and journal ordering --------------------------------------

// batchWeight is what a batch weighs in its session's share of the journal
// intake: its messages' bytes and a fixed cost per operation.
func batchWeight(b *Batch) int64 {
	w := int64(0)
	for i := range b.Ops {
		w += 256
		if m := b.Ops[i].Msg; m != nil {
			w += int64(m.Size())
		}
	}
	return w
}

// submit sends a batch to the journal, counting it so later receipts wait.
// The reader calls it. Batches go to the journal through the broker's
// intake, round-robin between connections. A session's batches not yet
// committed weigh at most stomp.max_journal_pending_bytes (one batch always
// goes): past that the reader waits for its earlier batches to commit and
// stops reading the socket meanwhile (TCP backpressure), so a producer that
// floods SENDs without receipts holds bounded memory.
func (s *session) submit(b *Batch) {
	w := batchWeight(b)
	if limit := s.b.cfg().Stomp.MaxJournalPendingBytes; limit > 0 {
		counted := false
		for {
			s.jmu.Lock()
			if s.jbytes == 0 || s.jbytes+w <= limit {
				s.jbytes += w
				s.jmu.Unlock()
				break
			}
			ch := s.jroom
			s.jmu.Unlock()
			if !counted {
				counted = true
				s.b.stats.journalWaits.Add(1)
			}
			if s.deferred() {
				s.flushClients() // the reader waits
			}
			<-ch
		}
	} else {
		s.jmu.Lock()
		s.jbytes += w
		s.jmu.Unlock()
	}
	s.jpending.Add(1)
	done := b.Done
	b.Done = func(b *Batch, err error) {
		if done != nil {
			done(b, err)
		}
		s.jpending.Add(-1)
		s.jmu.Lock()
		s.jbytes -= w
		close(s.jroom)
		s.jroom = make(chan struct{})
		s.jmu.Unlock()
	}
	s.b.intake.add(&s.iq, b, w)
}

// ackFailed records that an ACK or NACK without a receipt failed with err.
func (s *session) ackFailed(err error) {
	if errors.Is(err, ErrOutcomeUnknown) {
		s.ackUnknown.Store(true)
	}
	s.ackLost.Store(true)
}

// drainJournal waits until every journal batch this session submitted has
// completed.

func (s *session) drainJournal() {
	if s.jpending.Load() == 0 {
		return
	}
	done := make(chan struct{})
	s.submit(&Batch{Ops: []Op{{Kind: OpBarrier}}, Done: func(*Batch, error) { close(done) }})
	<-done
}

// receipt answers f's receipt header, after every journal batch this
// session submitted before it has completed.
func (s *session) receipt(f *stomp.Frame, extra ...stomp.Header) {
	id := f.Get("receipt")
	if id == "" {
		return
	}
	r := stomp.NewFrame(stomp.CmdReceipt, "receipt-id", id)
	r.Headers = append(r.Headers, extra...)
	if s.jpending.Load() == 0 {
		s.sendOwn(r)
		return
	}
	s.submit(&Batch{Ops: []Op{{Kind: OpBarrier}}, Done: func(b *Batch, err error) { s.receiptDone(b, r) }})
}
