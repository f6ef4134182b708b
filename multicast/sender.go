package multicast

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
)

// Log attribute keys, defined once.
const (
	logGroup     = "group"
	logInterface = "interface"
	logSession   = "session"
	logErr       = "err"
)

// SenderConfig configures a Sender. Zero values take the defaults.
type SenderConfig struct {
	Group      string // "239.255.0.1:7400"
	Interface  string // interface name; "" = the interface of the route to the group
	TTL        int    // default 1: the datagrams stay on the LAN segment
	Profile    Profile
	RateLimit  int64 // bytes per second of original data, 0 = unlimited
	RepairRate int64 // bytes per second of repairs, default DefaultRepairRate
	// SourceRepairRate is one NAK source's share in bytes per second, default RepairRate/4.
	SourceRepairRate int64
	NAKSources       int // NAK sources tracked, default DefaultNAKSources
	// StreamIdle: a topic with no message for this long leaves the catalog (default
	// DefaultStreamIdle); its next message announces it again.
	StreamIdle time.Duration
	MaxStreams int // streams remembered, default DefaultMaxStreams (see SenderCoreConfig)
	Window     int // retransmit window in bytes, default DefaultWindow
	MTU        int // bytes per datagram, default DefaultMTU
	Key        []byte
	KeyID      uint8
	// Seal: encrypt every datagram under Key (docs/multicast-protocol.md, section 6, "Sealing").
	Seal bool
	// PrevKey, PrevKeyID: during a key rotation, NAKs signed with the key used before are
	// accepted too (receivers that have not yet heard the new key).
	PrevKey   []byte
	PrevKeyID uint8
	Logger    *slog.Logger
	// QueueBytes bounds the bytes of large messages (above QueueUnit) accepted by Publish and not
	// yet packed, so a few fragmented messages cannot hold gigabytes (default DefaultQueueBytes,
	// at least MaxMessage); Publish blocks while they would not fit. Small messages are bounded
	// by QueueLen.
	QueueBytes int
	// QueueLen bounds messages accepted by Publish and not yet packed; Publish blocks when it is
	// full (default 4096).
	QueueLen int
	// LoneInline: a lone message (published while nothing is queued, more than 50 µs after the
	// previous one) is packed and sent by Publish itself instead of the writer goroutine, one
	// goroutine hand-off less on the latency path (BenchmarkNetnsLatency: p50 0.57-0.65 of the
	// queued path). While another goroutine is writing datagrams, the message joins the
	// datagram being built and goes out right after that write: under load it degrades to
	// batching, never to a timer. Off by default; Profile.LoneInline is each profile's choice.
	LoneInline bool
}

// TopSourcesShown is how many NAK sources SenderStats lists.
const TopSourcesShown = 8

// SenderStats are the sender's counters.
type SenderStats struct {
	Session          uint64
	Datagrams, Bytes uint64 // sent, all types
	Messages         uint64
	NAKs             uint64 // accepted NAKs
	NAKsDropped      uint64 // rate-limited per source, replayed, malformed or for another session
	NCFs             uint64
	Repairs          uint64
	RepairBytes      uint64
	Lost             uint64           // datagram sequences announced unrepairable (NCF gone or LOSS)
	NAKsRefused      uint64           // sequences not answered: over a source's budget or the per-NAK limit
	NAKSources       int              // NAK sources tracked now
	TopSources       []NAKSourceStats // the busiest NAK sources by repair bytes, at most TopSourcesShown
	Streams          int              // topics (streams) of the session
	StreamsEvicted   uint64           // streams forgotten early to stay within MaxStreams (their catalog entries go)
	Heartbeats       uint64
	RateLimited      time.Duration
	AuthFailures     uint64
	SendErrors       uint64
	Leading          uint64
	Trailing         uint64
	WindowBytes      int
	Fragmented       uint64 // messages sent as fragments (larger than one datagram)
	Fragments        uint64 // fragment datagrams sent (originals, not repairs)
	HistoryRequests  uint64 // late-join history requests accepted
	HistoryAnswers   uint64 // HISTORY answers sent
	HistoryRefused   uint64 // history requests not answered (too soon, or over the byte budget)
	Inline           uint64 // messages packed by Publish itself (SenderConfig.LoneInline)
	Corked           uint64 // of those, messages PublishMore packed into a datagram left open for the next
}

type pubMsg struct {
	topic   string
	payload []byte
	tokens  int // QueueUnit tokens of s.qtok it holds
}

// Publish queue byte bound (SenderConfig.QueueBytes).
const (
	DefaultQueueBytes = 64 << 20
	QueueUnit         = 4 << 10 // messages above this take QueueBytes tokens of this size
)

// Sender multicasts published messages on one channel (a session) and answers NAKs. It is the
// socket shell around SenderCore. Safe for concurrent use.
type Sender struct {
	cfg   SenderConfig
	log   *slog.Logger
	group netip.AddrPort

	mu   sync.Mutex // guards core, and what Open sets up against Close and Stats
	core *SenderCore

	conn *net.UDPConn
	pc   *ipv4.PacketConn
	// wio writes for the goroutine sending (sendLocked), rio the NAK reader's repairs written
	// while another write runs, nio reads NAKs (rawio_linux.go).
	wio, rio, nio *datagramIO
	pubq          chan pubMsg
	// inflight counts messages in pubq or taken from it and not yet packed: a Publish packs
	// and sends its message itself (no goroutine hand-off on the latency path) only when it is 0,
	// so a publisher's messages keep their order.
	inflight atomic.Int64
	// Datagrams are written outside mu, so that NAKs are handled while a write waits (a write
	// to the group can take milliseconds on a loaded host, and the receivers' repair budget is
	// 200 ms). sendq holds what was taken from the core, in order, not yet written; one
	// goroutine at a time (sending) writes it. Guarded by mu.
	sendq    [][]byte
	sendqB   int // bytes (capacity) in sendq: at most maxSendq, so no window buffer in it is reused
	spare    [][]byte
	sending  bool
	draining bool // writeLoop is packing queued messages: it flushes the datagram itself
	// corked: an inline PublishMore left the datagram being packed open for its caller's next
	// message; sendLocked does not flush it (Flush, the next Publish or writeLoop does).
	// corkedHint mirrors it for a look without mu.
	corked     bool
	corkedHint atomic.Bool
	room       *sync.Cond // on mu: a write ended
	maxSendq   int
	kick       chan struct{} // an inline Publish moved the core's deadline: writeLoop re-arms its timer
	armed      time.Time     // guarded by mu: the deadline writeLoop's timer is set for
	lmu        sync.Mutex
	lone       loneRule      // guarded by lmu: which messages are lone (the rest go through pubq)
	qtok       chan struct{} // QueueBytes in QueueUnit tokens, held by queued large messages
	qacq       sync.Mutex    // one Publish acquires tokens at a time: no two wait holding some
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	open       atomic.Bool // Open was called
	running    atomic.Bool // Open succeeded: Publish may use what it set up
	closed     chan struct{}
	once       sync.Once

	sendErrors atomic.Uint64
	inline     atomic.Uint64 // messages packed by Publish itself (LoneInline)
	kicks      atomic.Uint64 // writer wake-ups asked by inline Publishes (tests)
	corkedMsgs atomic.Uint64 // messages an inline PublishMore left in an open datagram (tests)
	stall      atomic.Int64  // tests: the next write of sendq first sleeps this many ns
}

// NewSender checks cfg and applies defaults. Open starts it.
func NewSender(cfg SenderConfig) (*Sender, error) {
	var errs []error
	g, err := resolveGroup(cfg.Group)
	errs = append(errs, err, cfg.Profile.validate())
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 0 || cfg.TTL > 255 {
		errs = append(errs, fmt.Errorf("TTL %d: %w", cfg.TTL, ErrBadConfig))
	}
	if cfg.Seal && len(cfg.Key) == 0 {
		errs = append(errs, fmt.Errorf("seal without a key: %w", ErrBadConfig))
	}
	if len(cfg.PrevKey) > 0 && (len(cfg.Key) == 0 || cfg.PrevKeyID == cfg.KeyID) {
		errs = append(errs, fmt.Errorf("a previous key needs a current key with another key id: %w", ErrBadConfig))
	}
	if cfg.Profile == "" {
		cfg.Profile = ProfileLowLatency
	}
	if cfg.QueueLen == 0 {
		cfg.QueueLen = 4096
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.QueueBytes == 0 {
		cfg.QueueBytes = DefaultQueueBytes
	}
	if cfg.QueueBytes < MaxMessage {
		return nil, fmt.Errorf("QueueBytes %d below MaxMessage %d: %w", cfg.QueueBytes, MaxMessage, ErrBadConfig)
	}
	s := &Sender{cfg: cfg, group: g, closed: make(chan struct{}), pubq: make(chan pubMsg, cfg.QueueLen), kick: make(chan struct{}, 1),
		qtok:     make(chan struct{}, cfg.QueueBytes/QueueUnit),
		maxSendq: max(cmp.Or(cfg.Window, DefaultWindow)/4, 1),
		log:      cfg.Logger.With(logGroup, g.String())}
	s.room = sync.NewCond(&s.mu)
	return s, nil
}

func newRand() *rand.Rand {
	var seed [32]byte
	crand.Read(seed[:])
	return rand.New(rand.NewChaCha8(seed))
}

// Open creates the socket, starts a new session and the sender's goroutines. They stop on Close
// or when ctx ends.
func (s *Sender) Open(ctx context.Context) error {
	if !s.open.CompareAndSwap(false, true) {
		return ErrAlreadyOpen
	}
	core, err := NewSenderCore(SenderCoreConfig{Profile: s.cfg.Profile, MTU: s.cfg.MTU, Window: s.cfg.Window,
		RateLimit: s.cfg.RateLimit, RepairRate: s.cfg.RepairRate, SourceRepairRate: s.cfg.SourceRepairRate,
		NAKSources: s.cfg.NAKSources, StreamIdle: s.cfg.StreamIdle,
		MaxStreams: s.cfg.MaxStreams, Auth: NewAuth(s.cfg.Key, s.cfg.KeyID), PrevAuth: NewAuth(s.cfg.PrevKey, s.cfg.PrevKeyID),
		Seal: s.sealer(),
		Rand: newRand(), Start: time.Now()})
	if err != nil {
		return err
	}
	ifi, addr, err := resolveInterface(s.cfg.Interface, s.group)
	if err != nil {
		return err
	}
	laddr := &net.UDPAddr{}
	if addr.IsValid() {
		laddr.IP = addr.AsSlice()
	}
	conn, err := net.ListenUDP("udp4", laddr)
	if err != nil {
		return fmt.Errorf("sender socket on %s: %w", ifi.Name, err)
	}
	pc := ipv4.NewPacketConn(conn)
	rc, rerr := conn.SyscallConn()
	if err := errors.Join(pc.SetMulticastInterface(ifi), pc.SetMulticastTTL(s.cfg.TTL),
		pc.SetMulticastLoopback(true), rerr); err != nil {
		conn.Close()
		return fmt.Errorf("sender socket options on %s: %w", ifi.Name, err)
	}
	// Publish what Stats, Session and Close read under mu; a Close that
	// came first wins.
	s.mu.Lock()
	select {
	case <-s.closed:
		s.mu.Unlock()
		conn.Close()
		return ErrClosed
	default:
	}
	core.HoldBuffers(true) // datagrams are written outside mu (sendLocked)
	s.core, s.conn, s.pc = core, conn, pc
	s.wio, s.rio, s.nio = newDatagramIO(pc, rc, 64), newDatagramIO(pc, rc, 64), newDatagramIO(pc, rc, 16)
	ctx, s.cancel = context.WithCancel(ctx)
	s.log = s.log.With(logInterface, ifi.Name, logSession, FormatSession(core.Session()))
	s.wg.Add(2)
	s.mu.Unlock()
	s.log.Info("multicast sender open", "source", conn.LocalAddr().String(), "ttl", s.cfg.TTL, "profile", s.cfg.Profile)
	go s.writeLoop(ctx)
	go s.readLoop(ctx)
	s.running.Store(true)
	return nil
}

// FormatSession is how a session id is written in logs and tools: 16 hex
// digits.
func FormatSession(id uint64) string { return fmt.Sprintf("%016x", id) }

// Session returns the session id (0 before Open).
func (s *Sender) Session() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.core == nil {
		return 0
	}
	return s.core.Session()
}

// LocalAddr is the sender's source address: NAKs go there.
func (s *Sender) LocalAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn.LocalAddr()
}

// sealer is the core's Sealer: nil unless Seal.
func (s *Sender) sealer() *Sealer {
	if !s.cfg.Seal {
		return nil
	}
	return NewSealer(Key{ID: s.cfg.KeyID, Secret: s.cfg.Key})
}

// MaxMessageSize is the largest message (as AppendMessage encodes it: headers and body) Publish
// accepts: MaxMessage. A message too large for one datagram goes as fragments.
func (s *Sender) MaxMessageSize() int { return MaxMessage }

// Publish queues one message. It blocks only when the queue is full (the rate limit or a slow
// network holds it back) and returns ErrClosed after Close.
func (s *Sender) Publish(topic string, headers []Header, body []byte) error {
	return s.publish(time.Now(), topic, headers, body, false)
}

// PublishAt is Publish for a caller that has just read the clock (now), and PublishMore when
// more is set.
func (s *Sender) PublishAt(now time.Time, topic string, headers []Header, body []byte, more bool) error {
	return s.publish(now, topic, headers, body, more)
}

// PublishMore is Publish for a caller that already holds its next message (a STOMP reader with
// another SEND frame buffered): a message Publish would pack and send at once is packed, and its
// datagram left open for that next message, so that both leave in one datagram without a
// goroutine hand-off. The caller must call Flush once it has published what it held, and before
// it waits for anything: the open datagram leaves only then (or with another publisher's).
func (s *Sender) PublishMore(topic string, headers []Header, body []byte) error {
	return s.publish(time.Now(), topic, headers, body, true)
}

// Flush sends the datagram a PublishMore left open, if it is still open.
func (s *Sender) Flush() {
	if !s.corkedHint.Load() {
		return
	}
	s.mu.Lock()
	s.corked = false
	s.corkedHint.Store(false)
	if !s.sending && !s.draining && s.core.Packing() {
		now := time.Now()
		s.core.Flush(now)
		s.sendLocked()
	} // else: the goroutine writing flushes it when its write ends, or writeLoop when it drains
	s.unlockKick()
}

// unlockKick releases mu after an inline send and wakes the writer only if its timer is now
// late (a datagram sent moves the heartbeat later): a wake-up per message costs another
// thread's time, tens of µs on a busy host, beside the one sending.
func (s *Sender) unlockKick() {
	kick := s.core.Deadline().Before(s.armed)
	s.mu.Unlock()
	if kick {
		s.kicks.Add(1)
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

func (s *Sender) publish(now time.Time, topic string, headers []Header, body []byte, more bool) error {
	if !s.running.Load() {
		select {
		case <-s.closed:
			return ErrClosed
		default:
		}
		return ErrNotOpen
	}
	if topic == "" {
		return ErrEmptyTopic
	}
	p, err := AppendMessage(make([]byte, 0, MessageSize(headers, body)), headers, body)
	if err != nil {
		return err
	}
	if len(p) > s.MaxMessageSize() {
		return fmt.Errorf("%d byte message on %s: %w", len(p), topic, ErrTooLarge)
	}
	select {
	case <-s.closed:
		return ErrClosed
	default:
	}
	m := pubMsg{topic: topic, payload: p}
	// A lone message (nothing queued, the previous Publish more than inlineGap ago, the core
	// free): pack and send it here, at once. The writer goroutine would cost a wake-up (tens of
	// microseconds on a busy host) before the datagram leaves. Messages of a burst go to the
	// writer, which packs what piles up into full datagrams.
	//
	// A message that follows one PublishMore left in an open datagram goes the same way (into
	// that datagram), lone or not: the writer goroutine would only flush it later.
	s.lmu.Lock()
	lone := s.lone.publish(now.UnixNano())
	s.lmu.Unlock()
	if (lone || s.corkedHint.Load()) && s.cfg.LoneInline && s.inflight.Load() == 0 && s.mu.TryLock() {
		if s.inflight.Load() == 0 && s.core.Backlog() <= maxBacklog && (lone || s.corked && s.core.Packing()) {
			select {
			case <-s.closed:
				s.mu.Unlock()
				return ErrClosed
			default:
			}
			s.inline.Add(1)
			// Packed open (corked): sendLocked writes only the datagrams this one filled.
			s.corked = true
			s.publishLocked(now, m)
			s.corked = more && s.core.Packing()
			s.corkedHint.Store(s.corked)
			if s.corked {
				s.corkedMsgs.Add(1)
			} else if !s.sending && !s.draining {
				s.core.Flush(now)
				s.sendLocked()
			} // else: another goroutine is writing; it flushes this datagram when its write ends
			s.unlockKick()
			return nil
		}
		s.mu.Unlock()
	}
	if len(p) > QueueUnit {
		if err := s.acquire(&m); err != nil {
			return err
		}
	}
	s.inflight.Add(1)
	select {
	case s.pubq <- m:
		return nil
	case <-s.closed:
		s.inflight.Add(-1)
		s.releaseTokens(m.tokens)
		return ErrClosed
	}
}

// maxBacklog: while more bytes than this wait for the rate limit, Publish blocks.
const maxBacklog = 1 << 20

// inlineGap: a Publish less than this after the previous one is part of a burst and goes
// through the writer goroutine (batched). quietGap: a burst ends after this long without a
// Publish; a pause shorter than that (a publisher descheduled in the middle of a burst) does
// not end it.
const (
	inlineGap = 50 * time.Microsecond
	quietGap  = time.Millisecond
	burstRun  = 5 // gaps below inlineGap in a row that make a burst
)

// loneRule decides which published messages are lone, to be sent by Publish itself
// (SenderConfig.LoneInline): one more than inlineGap after the previous one, unless it follows a
// burst that has not ended yet. A burst is more than burstRun messages less than inlineGap apart
// (fewer are a paced publisher catching up after a late wake-up: the next spaced message is lone
// again); it ends after quietGap of silence or two gaps of inlineGap or more in a row, so that a
// pause inside it (a publisher descheduled for 100 µs) does not split its datagrams. So a steady
// 10,000/s goes out message by message at once, and a burst's first message goes at once while
// the rest are packed together by the writer. Deterministic: times in, decisions out.
type loneRule struct {
	last  int64 // unix ns of the last Publish
	short int   // gaps below inlineGap in a row
	burst bool  // in a burst: no lone message until it ends
	long  int   // gaps of inlineGap or more in a row since the burst's last short one
}

func (r *loneRule) publish(now int64) bool {
	gap := now - r.last
	r.last = now
	switch {
	case gap < int64(inlineGap):
		r.short++
		if r.short >= burstRun {
			r.burst, r.long = true, 0
		}
		return false
	case r.burst && gap < int64(quietGap):
		r.short = 0
		r.long++
		if r.long < 2 {
			return false
		}
	}
	r.short, r.burst, r.long = 0, false, 0
	return true
}

// writeLoop packs queued messages (flushing when the queue drains), and runs the core's timers.
func (s *Sender) writeLoop(ctx context.Context) {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		s.armed = s.core.Deadline()
		d := time.Until(s.armed)
		backlog := s.core.Backlog()
		s.mu.Unlock()
		timer.Reset(max(d, 0))
		q := s.pubq
		if backlog > maxBacklog {
			q = nil // the rate limit holds data back: let Publish block
		}
		select {
		case <-ctx.Done():
			return
		case m := <-q:
			s.mu.Lock()
			now := time.Now()
			s.draining = true
			s.publishLocked(now, m)
			s.inflight.Add(-1)
			for n := 0; n < 1024 && s.core.Backlog() <= maxBacklog; n++ {
				select {
				case m = <-s.pubq:
					s.publishLocked(now, m)
					s.inflight.Add(-1)
					continue
				default:
				}
				break
			}
			s.draining = false
			s.core.Flush(now) // the queue drained: send now, no timer on the latency path
			s.sendLocked()
			s.mu.Unlock()
		case <-timer.C:
			s.mu.Lock()
			s.core.Tick(time.Now())
			s.sendLocked()
			s.mu.Unlock()
		case <-s.kick:
			s.mu.Lock()
			if !s.sending && len(s.sendq) > 0 {
				s.sendLocked() // what the NAK reader queued (NCF, LOSS, CATALOG)
			}
			s.mu.Unlock()
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// acquire takes the QueueBytes tokens of a large message, waiting while they are held by
// messages not yet packed.
func (s *Sender) acquire(m *pubMsg) error {
	n := (len(m.payload) + QueueUnit - 1) / QueueUnit
	s.qacq.Lock()
	defer s.qacq.Unlock()
	for m.tokens < n {
		select {
		case s.qtok <- struct{}{}:
			m.tokens++
		case <-s.closed:
			s.releaseTokens(m.tokens)
			m.tokens = 0
			return ErrClosed
		}
	}
	return nil
}

func (s *Sender) releaseTokens(n int) {
	for ; n > 0; n-- {
		<-s.qtok
	}
}

func (s *Sender) publishLocked(now time.Time, m pubMsg) {
	s.releaseTokens(m.tokens)
	if err := s.core.Publish(now, m.topic, m.payload); err != nil {
		s.log.Warn("multicast publish dropped", "topic", m.topic, logErr, err)
		return
	}
	s.sendLocked()
}

// takeLocked moves what the core has ready to sendq. Call with s.mu held.
func (s *Sender) takeLocked() {
	for _, b := range s.core.Ready() {
		s.sendq = append(s.sendq, b)
		s.sendqB += cap(b)
	}
}

// sendLocked writes what the core has ready, in order. Call with s.mu held: it is released
// while writing (NAKs are handled meanwhile) and held again on return. When another goroutine
// is writing, the datagrams join sendq and that goroutine writes them next; this one returns at
// once unless sendq is full (then it waits for room). The writing goroutine also flushes a
// datagram that an inline Publish packed meanwhile, so it leaves with the next write.
func (s *Sender) sendLocked() {
	s.takeLocked()
	if s.sending {
		for s.sending && s.sendqB > s.maxSendq {
			s.room.Wait()
		}
		return
	}
	s.sending = true
	for {
		if !s.draining && !s.corked && s.core.Packing() {
			s.core.Flush(time.Now())
			s.takeLocked()
		}
		if len(s.sendq) == 0 {
			break
		}
		batch := s.sendq
		s.sendq, s.sendqB = s.spare[:0], 0
		s.mu.Unlock()
		if d := s.stall.Swap(0); d > 0 {
			time.Sleep(time.Duration(d)) // tests: a write that waits in the kernel
		}
		s.write(s.wio, batch)
		s.mu.Lock()
		clear(batch)
		s.spare = batch[:0]
		s.room.Broadcast()
	}
	s.sending = false
	s.core.Recycle() // everything taken from the core is written
	s.room.Broadcast()
}

// write multicasts out in order through io (the writing goroutine's).
func (s *Sender) write(io *datagramIO, out [][]byte) {
	for len(out) > 0 {
		k, err := io.writeBatch(out, s.group)
		if err == nil {
			return
		}
		// The datagram at out[k] failed: count it, and go on with the rest.
		s.sendErrors.Add(1)
		if s.sendErrors.Load()%1000 == 1 {
			s.log.Warn("multicast send failed", logErr, err)
		}
		out = out[k+1:]
	}
}

// readLoop receives NAKs on the sender's socket.
func (s *Sender) readLoop(ctx context.Context) {
	defer s.wg.Done()
	ms := make([]ipv4.Message, 16)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, MaxDatagram)}
	}
	for {
		n, err := s.nio.readBatch(ms)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("multicast sender read failed", logErr, err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		now := time.Now()
		for _, m := range ms[:n] {
			from, _ := m.Addr.(*net.UDPAddr)
			if from == nil {
				continue
			}
			s.core.Step(now, from.AddrPort(), m.Buffers[0][:m.N])
		}
		// The repairs go out now, from here. The rest (NCF, LOSS, CATALOG) joins sendq for the
		// writer: they go in order with DATA, as they carry the leading edge (written ahead of
		// DATA still queued, they would make every receiver NAK it). An RDATA carries the
		// sequence it repairs, which receivers already know of, so overtaking DATA does not
		// matter. This goroutine never becomes the writer itself: a writer writes until sendq
		// is empty, and publishers can keep it full for as long as they publish, while NAKs
		// wait unread (a lossy receiver got no repair for 200 ms and gave up, on two loaded
		// cores).
		var rdata [][]byte
		for _, b := range s.core.Ready() {
			if Type(b[3]) == TypeRData {
				rdata = append(rdata, b)
			} else {
				s.sendq = append(s.sendq, b)
				s.sendqB += cap(b)
			}
		}
		s.mu.Unlock()
		s.write(s.rio, rdata)
		// The writer takes what joined sendq (unless it is writing; then it takes it next), and
		// learns the deadline of repairs held back by the repair budget.
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// Stats returns the counters.
func (s *Sender) Stats() SenderStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.core == nil {
		return SenderStats{}
	}
	c := s.core.Counters()
	return SenderStats{Session: s.core.Session(), Datagrams: c.Datagrams, Bytes: c.Bytes, Messages: c.Messages,
		NAKs: c.NAKs, NAKsDropped: c.NAKsDropped, NCFs: c.NCFs, Repairs: c.Repairs, RepairBytes: c.RepairBytes,
		Heartbeats: c.Heartbeats, RateLimited: c.RateLimited, AuthFailures: c.AuthFailures,
		SendErrors: s.sendErrors.Load(), Leading: c.Leading, Trailing: c.Trailing, WindowBytes: c.WindowBytes,
		Lost: c.Lost, NAKsRefused: c.NAKsRefused, NAKSources: c.NAKSources, TopSources: s.core.TopSources(TopSourcesShown),
		Streams: c.Streams, StreamsEvicted: c.StreamsEvicted, Fragmented: c.Fragmented, Fragments: c.Fragments,
		HistoryRequests: c.HistoryRequests, HistoryAnswers: c.HistoryAnswers, HistoryRefused: c.HistoryRefused,
		Inline: s.inline.Load(), Corked: s.corkedMsgs.Load()}
}

// Close stops the goroutines, sends what is queued and closes the socket. It is idempotent.
func (s *Sender) Close() error {
	var err error
	s.once.Do(func() {
		close(s.closed)
		s.mu.Lock()
		cancel := s.cancel // nil: never opened, or Open sees closed and gives up
		s.mu.Unlock()
		if cancel == nil {
			return
		}
		cancel()
		s.conn.SetReadDeadline(time.Now())
		s.wg.Wait()
		// Pack and send what Publish accepted, then a last heartbeat so receivers see the tail.
		s.mu.Lock()
		now := time.Now()
		for {
			select {
			case m := <-s.pubq:
				s.publishLocked(now, m)
				continue
			default:
			}
			break
		}
		s.core.Flush(now)
		s.core.heartbeat()
		s.sendLocked()
		for s.sending { // an inline Publish still writing: the heartbeat goes after it
			s.room.Wait()
		}
		s.mu.Unlock()
		err = s.conn.Close()
		st := s.Stats()
		s.log.Info("multicast sender closed", "datagrams", st.Datagrams, "messages", st.Messages, "naks", st.NAKs, "repairs", st.Repairs)
	})
	return err
}
