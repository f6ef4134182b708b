package multicast

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
)

// ReceiverConfig configures a Receiver. Zero values take the defaults.
type ReceiverConfig struct {
	Group     string // "239.255.0.1:7400"
	Interface string // interface to join on; "" = the interface of the route to the group
	Profile   Profile
	Mode      Mode
	Topics    []string // patterns; none or "" = all; '*' one dot segment, '>' the rest
	Key       []byte
	KeyID     uint8
	// NextKey, NextKeyID: a second key accepted (a key rotation: section 6, "Key rotation").
	NextKey   []byte
	NextKeyID uint8
	// Seal: accept only sealed datagrams (the channel has seal = true).
	Seal      bool
	Logger    *slog.Logger
	RcvBuf    int // socket receive buffer to ask for, default DefaultRcvBuf (16 MiB)
	EventsLen int // capacity of the Events channel, default 65536
	// SessionTimeout: without a key, how long the current session must be silent before another
	// session takes over; default DefaultSessionTimeout (3 s).
	SessionTimeout time.Duration
	// MaxBytes bounds the records the receiver holds (behind a hole or waiting for a catalog) and
	// its stream table; default DefaultReceiverMaxBytes (64 MiB).
	MaxBytes int
	// MaxReassembly bounds the fragments held for messages not yet complete; default
	// DefaultMaxReassembly (two messages of MaxMessage).
	MaxReassembly int
	// SlowConsumerWait is how long delivery waits for room in a full Events channel before it
	// drops messages as a slow-consumer gap; default DefaultSlowConsumerWait (1 s).
	SlowConsumerWait time.Duration
	// LateJoin: joining a session late, ask the sender for the last LateJoin messages of each
	// stream of Topics still in its window and deliver them first (section 4.10 of
	// docs/multicast-protocol.md); LateJoinAge: only those sent within this long. 0: none.
	LateJoin    int
	LateJoinAge time.Duration
}

// DefaultSlowConsumerWait: a full Events channel makes delivery wait this long (the socket buffer
// absorbs what arrives meanwhile) before messages are dropped as a slow-consumer gap.
const DefaultSlowConsumerWait = time.Second

// WarnInterval is the most often the receiver logs each kind of rejected datagram (authentication
// failures, datagrams ahead of the window, other sessions, foreign sources), with the count since
// the last warning.
const WarnInterval = 10 * time.Second

// ReceiverStats are the receiver's counters.
type ReceiverStats struct {
	Session           uint64
	Datagrams, Bytes  uint64 // accepted datagrams
	Messages          uint64 // delivered to Events (or dropped as a slow consumer)
	NAKs              uint64 // NAK datagrams sent
	NAKedSeqs         uint64
	Repairs           uint64 // repairs that filled a hole
	Gaps              uint64
	GapMessages       uint64
	Duplicates        uint64
	KernelDrops       uint64 // datagrams the kernel dropped for want of buffer (SO_RXQ_OVFL)
	AuthFailures      uint64
	Malformed         uint64
	Replays           uint64
	Ahead             uint64 // datagrams too far ahead of the receive window: not believed
	ForeignSource     uint64 // datagrams of the current session from another address
	OtherSession      uint64 // datagrams of another session while the current one was live
	Overflow          uint64 // records dropped for MaxBytes or MaxStreams (reported as gaps)
	CatalogConflicts  uint64 // CATALOG entries naming a known stream id with another topic (one is forged)
	StreamsEvicted    uint64 // streams evicted from a full stream table (MaxStreams or MaxBytes)
	WindowExpired     uint64 // missing datagrams given up: the leading edge ran MaxHole past them
	BudgetExpired     uint64 // missing datagrams given up: the repair budget passed, no repair coming
	SlowConsumerDrops uint64 // messages dropped because Events was full
	Sealed            uint64 // sealed datagrams dropped: no key to open them
	Fragments         uint64 // fragment records taken into a reassembly
	Reassembled       uint64 // messages completed from fragments
	Incomplete        int    // messages being reassembled now (some fragments still missing)
	ForgedFragments   uint64 // fragments dropped as contradicting the protocol or each other
	ReassemblyDrops   uint64 // messages dropped (reported as gaps) to stay within MaxReassembly
	Sessions          uint64
	HistoryRequests   uint64 // late join: history requests sent
	HistoryAnswers    uint64 // late join: answers taken
	HistoryRepairs    uint64 // late join: datagrams before the join point received
	HistoryUnanswered uint64 // late join: sessions joined without history (no answer in time)
	RcvBuf            int    // receive buffer granted by the kernel
}

// Receiver joins a group on an interface and turns its datagrams into Events: messages in order per
// stream, gaps, session changes. It NAKs losses to the sender by unicast UDP.
type Receiver struct {
	cfg   ReceiverConfig
	log   *slog.Logger
	group netip.AddrPort

	mu     sync.Mutex // guards core, pend, and what Open sets up against Close and Stats
	core   *ReceiverCore
	pend   map[uint32][]Gap // slow-consumer gaps waiting for room in events: per stream, sorted, disjoint
	closed bool             // Close has run: Open gives up

	conn    *net.UDPConn // bound to the group
	raw     syscall.RawConn
	pc      *ipv4.PacketConn
	nakConn *net.UDPConn // unicast NAKs go out from here
	events  chan Event
	wake    chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	open    atomic.Bool
	once    sync.Once
	rcvBuf  int

	kernelDrops atomic.Uint64
	lastOvfl    uint32
	stalled     bool // the application took nothing for SlowConsumerWait: drop without waiting
	warn        map[error]*warnLimiter
	conflicts   uint64 // the core's CatalogConflicts when last logged
	slowDrops   atomic.Uint64
	sendErrors  atomic.Uint64
	stallRead   atomic.Int64 // tests: the read goroutine sleeps this many ns before its next read
}

// NewReceiver checks cfg and applies defaults. Open starts it.
func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	g, err := resolveGroup(cfg.Group)
	if err := errors.Join(err, cfg.Profile.validate()); err != nil {
		return nil, err
	}
	if cfg.Profile == "" {
		cfg.Profile = ProfileLowLatency
	}
	if cfg.RcvBuf == 0 {
		cfg.RcvBuf = DefaultRcvBuf
	}
	if cfg.EventsLen == 0 {
		cfg.EventsLen = 1 << 16
	}
	if cfg.SlowConsumerWait == 0 {
		cfg.SlowConsumerWait = DefaultSlowConsumerWait
	}
	if cfg.SessionTimeout < 0 || cfg.MaxBytes < 0 || cfg.MaxReassembly < 0 || cfg.SlowConsumerWait < 0 {
		return nil, fmt.Errorf("receiver: negative session timeout, max bytes or slow-consumer wait: %w", ErrBadConfig)
	}
	if (cfg.Seal || len(cfg.NextKey) > 0) && len(cfg.Key) == 0 {
		return nil, fmt.Errorf("receiver: sealing or a next key without a key: %w", ErrBadConfig)
	}
	if len(cfg.NextKey) > 0 && cfg.NextKeyID == cfg.KeyID {
		return nil, fmt.Errorf("receiver: the next key has the key id %d of the current one: %w", cfg.KeyID, ErrBadConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Receiver{cfg: cfg, group: g, log: cfg.Logger.With(logGroup, g.String()),
		events: make(chan Event, cfg.EventsLen), wake: make(chan struct{}, 1), pend: map[uint32][]Gap{},
		warn: map[error]*warnLimiter{}}, nil
}

// keys is the key ring's keys: Key (and NextKey). With a key, HMAC-signed and sealed datagrams
// are both accepted unless Seal requires sealing.
func (r *Receiver) keys() []Key {
	if len(r.cfg.Key) == 0 {
		return nil
	}
	ks := []Key{{ID: r.cfg.KeyID, Secret: r.cfg.Key}}
	if len(r.cfg.NextKey) > 0 {
		ks = append(ks, Key{ID: r.cfg.NextKeyID, Secret: r.cfg.NextKey})
	}
	return ks
}

// Events delivers messages, gaps and session changes in order. It is closed by Close.
func (r *Receiver) Events() <-chan Event { return r.events }

// Open binds to the group address (so other groups on the port are not received), joins on the
// interface, sizes the receive buffer and starts the goroutines.
func (r *Receiver) Open(ctx context.Context) error {
	if !r.open.CompareAndSwap(false, true) {
		return ErrAlreadyOpen
	}
	core, err := NewReceiverCore(ReceiverCoreConfig{Profile: r.cfg.Profile, Mode: r.cfg.Mode,
		Filter: topicFilter(r.cfg.Topics), Auth: NewAuth(r.cfg.Key, r.cfg.KeyID), Rand: newRand(),
		SessionTimeout: r.cfg.SessionTimeout, MaxBytes: r.cfg.MaxBytes, MaxReassembly: r.cfg.MaxReassembly,
		Keys: r.keys(), Seal: r.cfg.Seal, LateJoin: r.cfg.LateJoin, LateJoinAge: r.cfg.LateJoinAge, Topics: r.cfg.Topics})
	if err != nil {
		return err
	}
	ifi, addr, err := resolveInterface(r.cfg.Interface, r.group)
	if err != nil {
		return err
	}
	lc := net.ListenConfig{Control: receiverControl}
	c, err := lc.ListenPacket(ctx, "udp4", r.group.String())
	if err != nil {
		return fmt.Errorf("bind %s: %w", r.group, err)
	}
	conn := c.(*net.UDPConn)
	pc := ipv4.NewPacketConn(conn)
	if err := pc.JoinGroup(ifi, &net.UDPAddr{IP: r.group.Addr().AsSlice()}); err != nil {
		conn.Close()
		return fmt.Errorf("join %s on %s: %w", r.group.Addr(), ifi.Name, err)
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return fmt.Errorf("multicast socket: %w", err)
	}
	rcvBuf, err := setRcvBuf(raw, r.cfg.RcvBuf)
	if err != nil {
		r.log.Warn("multicast receive buffer", logErr, err)
	} else if rcvBuf < r.cfg.RcvBuf {
		r.log.Warn("multicast receive buffer smaller than asked: bursts will overflow it; raise net.core.rmem_max: sysctl -w net.core.rmem_max=16777216",
			"asked", r.cfg.RcvBuf, "granted", rcvBuf)
	}
	laddr := &net.UDPAddr{}
	if addr.IsValid() {
		laddr.IP = addr.AsSlice()
	}
	nc, err := net.ListenUDP("udp4", laddr)
	if err != nil {
		conn.Close()
		return fmt.Errorf("NAK socket: %w", err)
	}
	// Publish what Stats and Close read under mu; a Close that came first
	// wins (Events is closed already).
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		conn.Close()
		nc.Close()
		return ErrClosed
	}
	r.core, r.conn, r.pc, r.nakConn, r.rcvBuf, r.raw = core, conn, pc, nc, rcvBuf, raw
	ctx, r.cancel = context.WithCancel(ctx)
	r.log = r.log.With(logInterface, ifi.Name)
	r.wg.Add(2)
	r.mu.Unlock()
	r.log.Info("multicast receiver open", "rcvbuf", rcvBuf, "profile", r.cfg.Profile, "receiver", fmt.Sprintf("%016x", core.ID()))
	go r.readLoop(ctx)
	go r.tickLoop(ctx)
	return nil
}

func (r *Receiver) readLoop(ctx context.Context) {
	defer r.wg.Done()
	ms := make([]ipv4.Message, 32)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, MaxDatagram)}
		ms[i].OOB = make([]byte, 64)
	}
	dio := newDatagramIO(r.pc, r.raw, len(ms))
	for {
		for i := range ms {
			ms[i].OOB = ms[i].OOB[:cap(ms[i].OOB)]
		}
		if d := r.stallRead.Swap(0); d > 0 {
			time.Sleep(time.Duration(d)) // tests: a receiver process that gets no CPU for a while
		}
		n, err := dio.readBatch(ms)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			r.log.Warn("multicast read failed", logErr, err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		r.mu.Lock()
		now := time.Now()
		before := r.core.Deadline()
		r.core.SetBehind(n == len(ms)) // a full batch: more may wait in the socket
		for _, m := range ms[:n] {
			if v, ok := rxqOverflow(m.OOB[:m.NN]); ok && v != r.lastOvfl {
				r.kernelDrops.Add(uint64(v - r.lastOvfl))
				r.lastOvfl = v
			}
			from, _ := m.Addr.(*net.UDPAddr)
			if from == nil {
				continue
			}
			if err := r.core.Handle(now, from.AddrPort(), m.Buffers[0][:m.N]); err != nil {
				r.rejected(now, from.AddrPort(), err)
			}
			if r.core.c.CatalogConflicts != r.conflicts {
				r.conflict(now, from.AddrPort())
			}
		}
		after := r.core.Deadline()
		r.flushLocked(ctx)
		r.mu.Unlock()
		if !after.IsZero() && (before.IsZero() || after.Before(before)) {
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}
	}
}

func (r *Receiver) tickLoop(ctx context.Context) {
	defer r.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		d := r.core.Deadline()
		r.mu.Unlock()
		wait := time.Hour
		if !d.IsZero() {
			wait = max(time.Until(d), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C:
			r.mu.Lock()
			if r.raw != nil && unreadDatagram(r.raw) {
				// Datagrams wait unread (this process got no CPU for a while, or the read
				// goroutine is behind): a repair may be among them, so give-ups wait.
				r.core.SetBehind(true)
			}
			r.core.Tick(time.Now())
			r.flushLocked(ctx)
			r.mu.Unlock()
		}
		timer.Stop()
	}
}

// warnLimiter lets one warning through per interval, with the count since the last one.
type warnLimiter struct {
	last time.Time
	n    uint64
}

// note counts one occurrence at now and reports whether to log, with the count to log.
func (w *warnLimiter) note(now time.Time, every time.Duration) (uint64, bool) {
	w.n++
	if !w.last.IsZero() && now.Sub(w.last) < every {
		return 0, false
	}
	n := w.n
	w.last, w.n = now, 0
	return n, true
}

// rejected logs a rejected datagram, at most once per WarnInterval per kind. Call with r.mu held.
func (r *Receiver) rejected(now time.Time, from netip.AddrPort, err error) {
	var msg string
	switch {
	case errors.Is(err, ErrAuth):
		msg = "multicast datagrams failed authentication (wrong key or key id, or forged): check the key and key id match the channel's"
	case errors.Is(err, ErrAhead):
		msg = "multicast datagrams far ahead of the receive window ignored (a forger, or a sender restarted with the same session id)"
	case errors.Is(err, ErrOtherSession):
		msg = "multicast datagrams of another session ignored while the current one is live (a forger, or a second sender on the group: use a key)"
	case errors.Is(err, ErrSealed):
		msg = "multicast datagrams are sealed (the channel has seal = true) and this receiver has no key: give it the channel's key file"
	case errors.Is(err, ErrForeignSource):
		msg = "multicast datagrams of the current session from another address ignored (a forger: use a key)"
	default:
		return // malformed or stale: counted only
	}
	key := errors.Unwrap(err)
	if key == nil {
		key = err
	}
	w := r.warn[key]
	if w == nil {
		w = &warnLimiter{}
		r.warn[key] = w
	}
	if n, ok := w.note(now, WarnInterval); ok {
		r.log.Warn(msg, "count", n, "since", WarnInterval.String(), "last_from", from.String())
	}
}

// errCatalogConflict keys the warning of CATALOG conflicts.
var errCatalogConflict = errors.New("catalog conflict")

// conflict logs the CATALOG conflicts the core counted since the last call (a stream id named
// with two topics: one of them is forged), at most once per WarnInterval. Call with r.mu held.
func (r *Receiver) conflict(now time.Time, from netip.AddrPort) {
	n := r.core.c.CatalogConflicts - r.conflicts
	r.conflicts = r.core.c.CatalogConflicts
	w := r.warn[errCatalogConflict]
	if w == nil {
		w = &warnLimiter{}
		r.warn[errCatalogConflict] = w
	}
	w.n += n - 1
	if n, ok := w.note(now, WarnInterval); ok {
		r.log.Warn("multicast CATALOG entries name a known stream id with another topic (a forger: use a key); the stream is delivered if either topic matches",
			"count", n, "since", WarnInterval.String(), "last_from", from.String())
	}
}

// flushLocked sends NAKs and hands events over. A full Events channel drops messages and reports
// them as a slow-consumer gap before the stream's next event. Call with r.mu held.
func (r *Receiver) flushLocked(ctx context.Context) {
	events, out := r.core.Ready()
	for _, o := range out {
		if _, err := r.nakConn.WriteToUDPAddrPort(o.B, o.To); err != nil {
			if r.sendErrors.Add(1)%100 == 1 {
				r.log.Warn("NAK send failed", "to", o.To.String(), logErr, err)
			}
		}
	}
	for _, e := range events {
		r.emit(ctx, e)
	}
}

func (r *Receiver) emit(ctx context.Context, e Event) {
	var stream uint32
	switch e := e.(type) {
	case SessionChange:
		for _, gs := range r.pend { // the old session's dropped tail comes first
			for _, g := range gs {
				select {
				case r.events <- g:
				case <-ctx.Done():
				}
			}
		}
		clear(r.pend)
		select { // never drop a session change
		case r.events <- e:
		case <-ctx.Done():
		}
		return
	case Message:
		stream = e.Stream
	case Gap:
		stream = e.Stream
	}
	if gs := r.pend[stream]; len(gs) > 0 {
		for len(gs) > 0 {
			if !r.send(ctx, gs[0]) {
				r.pend[stream] = gs
				r.drop(e)
				return
			}
			gs = gs[1:]
		}
		delete(r.pend, stream)
	}
	if !r.send(ctx, e) {
		r.drop(e)
	}
}

// send hands e to the application. When Events is full it waits up to SlowConsumerWait (what
// arrives meanwhile waits in the socket buffer, and repairs cover what overflows it): a reader
// that is slower than a burst loses nothing. Only one that takes nothing for that long is a slow
// consumer: then nothing waits until it takes an event again.
func (r *Receiver) send(ctx context.Context, e Event) bool {
	select {
	case r.events <- e:
		r.stalled = false
		return true
	default:
	}
	if r.stalled {
		return false
	}
	t := time.NewTimer(r.cfg.SlowConsumerWait)
	defer t.Stop()
	select {
	case r.events <- e:
		return true
	case <-t.C:
		r.stalled = true
		return false
	case <-ctx.Done():
		return false
	}
}

func (r *Receiver) drop(e Event) {
	var g Gap
	switch e := e.(type) {
	case Message:
		r.slowDrops.Add(1)
		g = Gap{Topic: e.Topic, Stream: e.Stream, From: e.StreamSeq, To: e.StreamSeq, Session: e.Session}
	case Gap:
		g = e
	}
	g.Reason = ReasonSlowConsumer
	r.pend[g.Stream] = addGap(r.pend[g.Stream], g)
}

// addGap adds g to gs (sorted, disjoint ranges of one stream), merging it with the ranges it
// overlaps or touches only: in skip mode a repair delivered later may lie between two dropped
// messages, and a Gap never covers a delivered sequence (section 4.5).
func addGap(gs []Gap, g Gap) []Gap {
	from1, to1 := g.From, g.To // the sequences g touches
	if from1 > 0 {
		from1--
	}
	if to1 < math.MaxUint64 {
		to1++
	}
	lo, _ := slices.BinarySearchFunc(gs, from1, func(x Gap, q uint64) int { return cmp.Compare(x.To, q) })
	hi := lo
	for hi < len(gs) && gs[hi].From <= to1 {
		g.From, g.To = min(g.From, gs[hi].From), max(g.To, gs[hi].To)
		hi++
	}
	return slices.Replace(gs, lo, hi, g)
}

// Stats returns the counters.
func (r *Receiver) Stats() ReceiverStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.core == nil {
		return ReceiverStats{}
	}
	c := r.core.Counters()
	return ReceiverStats{Session: r.core.Session(), Datagrams: c.Datagrams, Bytes: c.Bytes, Messages: c.Messages,
		NAKs: c.NAKs, NAKedSeqs: c.NAKedSeqs, Repairs: c.Repairs, Gaps: c.Gaps, GapMessages: c.GapMessages,
		Duplicates: c.Duplicates, KernelDrops: r.kernelDrops.Load(), AuthFailures: c.AuthFailures,
		Malformed: c.Malformed, Replays: c.Replays, Ahead: c.Ahead, ForeignSource: c.ForeignSource,
		OtherSession: c.OtherSession, Overflow: c.Overflow, CatalogConflicts: c.CatalogConflicts, StreamsEvicted: c.StreamsEvicted, WindowExpired: c.WindowExpired, BudgetExpired: c.BudgetExpired, SlowConsumerDrops: r.slowDrops.Load(), Sessions: c.Sessions,
		Sealed: c.Sealed, Reassembled: c.Reassembled, ForgedFragments: c.ForgedFragments, ReassemblyDrops: c.ReassemblyDrops,
		Fragments: c.Fragments, Incomplete: r.core.State().Partials,
		HistoryRequests: c.HistoryRequests, HistoryAnswers: c.HistoryAnswers, HistoryRepairs: c.HistoryRepairs,
		HistoryUnanswered: c.HistoryUnanswered, RcvBuf: r.rcvBuf}
}

// Close leaves the group, stops the goroutines and closes Events. It is idempotent.
func (r *Receiver) Close() error {
	var err error
	r.once.Do(func() {
		r.mu.Lock()
		r.closed = true
		cancel := r.cancel // nil: never opened, or Open sees closed and gives up
		r.mu.Unlock()
		if cancel == nil {
			close(r.events)
			return
		}
		cancel()
		err = errors.Join(r.conn.Close(), r.nakConn.Close())
		r.wg.Wait()
		close(r.events)
		st := r.Stats()
		r.log.Info("multicast receiver closed", "datagrams", st.Datagrams, "messages", st.Messages, "gaps", st.Gaps,
			"naks", st.NAKs, "kernel_drops", st.KernelDrops)
	})
	return err
}
