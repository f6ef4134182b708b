package multicast

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"
)

// Receiver bounds (docs/multicast-protocol.md, section 4). They are protocol constants: a receiver
// in another language must apply the same ones for the conformance vectors to pass.
const (
	// MaxHole is the receive window in datagrams: the receiver tracks sequences from its frontier
	// (every lower one resolved) to at most MaxHole-1 above it. A sequence or leading edge further
	// ahead than MaxHole above the highest believed one is not believed (see SessionTimeout); one
	// that moves the window gives up the oldest sequences still missing (reason expired).
	MaxHole = 1 << 14
	// DefaultSessionTimeout: without a key, the receiver leaves its session for another, or
	// believes a jump of more than MaxHole, only when the current session has sent nothing for
	// this long (three times the longest heartbeat interval).
	DefaultSessionTimeout = 3 * MaxHeartbeatInterval
	// DefaultReceiverMaxBytes bounds what the receiver holds: records waiting for a hole or a
	// catalog, and its stream table (topics included).
	DefaultReceiverMaxBytes = 64 << 20
	// MaxStreams is the most streams a receiver tracks per session.
	MaxStreams = 1 << 16
	// RetiredSessions is how many sessions a receiver remembers having left.
	RetiredSessions = 8
	// CandidateBytes: the datagrams of a session waiting to take over (without a key, while the
	// current one is live) are kept up to this many bytes and handled when it does, so a
	// restarted sender's first messages need no repair.
	CandidateBytes = 4 << 20
	heldOverhead   = 64  // accounted per held record, besides its payload
	streamOverhead = 160 // accounted per stream, besides its topic
	// DefaultMaxReassembly bounds the fragments a receiver holds for messages not yet complete
	// (two messages of MaxMessage). A message whose fragments do not fit is dropped and
	// reported as a gap.
	DefaultMaxReassembly = 2 * MaxMessage
	partialOverhead      = 96 // accounted per message being reassembled, besides its fragments
	pieceOverhead        = 48 // accounted per fragment held, besides its bytes
)

// Errors Handle returns for datagrams it drops (besides ErrAuth and the decode errors).
var (
	ErrAhead         = errors.New("multicast: sequence too far ahead of the receive window (not believed)")
	ErrForeignSource = errors.New("multicast: datagram of the current session from another source address")
	ErrOtherSession  = errors.New("multicast: datagram of another session while the current one is live")
	ErrStale         = errors.New("multicast: datagram of a retired session or outside the window")
)

// ReceiverCoreConfig configures a ReceiverCore.
type ReceiverCoreConfig struct {
	Profile Profile
	Mode    Mode
	Filter  func(topic string) bool // nil: every topic
	Auth    *Auth                   // nil: no HMAC (ignored when Keys are given)
	// Keys are the channel keys accepted (section 6): HMAC-signed or sealed datagrams under any
	// of them, with rotation (the key used before a new one is accepted for KeyOverlap more).
	Keys []Key
	// Seal: only sealed datagrams are accepted (requires Keys).
	Seal bool
	Rand *rand.Rand // required: NAK back-off and receiver id
	ID   uint64     // receiver id carried in NAKs; 0 = random
	// SessionTimeout: see DefaultSessionTimeout (the default when 0).
	SessionTimeout time.Duration
	// MaxBytes bounds held records and the stream table; DefaultReceiverMaxBytes when 0. Records
	// that do not fit are dropped and reported as gaps.
	MaxBytes int
	// MaxReassembly bounds the fragments held for incomplete messages, accounted as their bytes
	// + 48 per fragment + 96 per message; DefaultMaxReassembly when 0. A message whose
	// fragments do not fit is dropped and reported as a gap.
	MaxReassembly int
	// LateJoin: when the receiver joins a session late (not from its start), it asks the sender
	// for the last LateJoin messages of each stream matching Topics still in the sender's window
	// (a history request, section 4.10) and gets them first, repaired like any loss, then the
	// live messages. LateJoinAge: only those sent within this long (with LateJoin 0: all of
	// them). Both 0: no history.
	LateJoin    int
	LateJoinAge time.Duration
	// Topics are the patterns sent in a history request (none: every topic); Filter still
	// decides what is delivered.
	Topics []string
}

// ReceiverCounters are the ReceiverCore's counts.
type ReceiverCounters struct {
	Datagrams, Bytes uint64
	Duplicates       uint64
	Malformed        uint64
	AuthFailures     uint64
	Replays          uint64 // out-of-window sequences and datagrams of retired or older sessions
	Ahead            uint64 // datagrams further than MaxHole ahead of the window: not believed
	ForeignSource    uint64 // datagrams of the current session from another address than its sender's
	OtherSession     uint64 // datagrams of another session while the current one was live
	Overflow         uint64 // records dropped (and reported as gaps) to stay within MaxBytes or MaxStreams
	CatalogConflicts uint64 // CATALOG entries naming a known stream id with another topic (one is forged)
	StreamsEvicted   uint64 // streams evicted from a full stream table (MaxStreams or MaxBytes)
	// Missing datagrams given up (reason expired): WindowExpired because the leading edge ran
	// MaxHole past them, BudgetExpired because the repair budget passed with no repair coming.
	WindowExpired, BudgetExpired uint64
	Sealed                       uint64 // sealed datagrams dropped: no key to open them
	Fragments                    uint64 // fragment records taken into a reassembly
	Reassembled                  uint64 // messages completed from fragments
	ForgedFragments              uint64 // fragments dropped: total above MaxMessage, out of range, overlapping, another total
	ReassemblyDrops              uint64 // messages dropped (reported as gaps) to stay within MaxReassembly
	NAKs                         uint64 // NAK datagrams sent
	HistoryRequests              uint64 // history requests sent (late join)
	HistoryAnswers               uint64 // HISTORY answers taken
	HistoryRepairs               uint64 // datagrams before the join point received for the history
	HistoryUnanswered            uint64 // sessions whose history request got no answer in time: joined without history
	NAKedSeqs                    uint64 // sequences asked for (counting repeats)
	CatalogRequests              uint64 // NAKs for sequence 0: records of an unknown stream arrived
	NCFs                         uint64
	Repairs                      uint64 // RDATA datagrams that filled a hole
	Messages                     uint64
	Gaps                         uint64
	GapMessages                  uint64 // messages covered by gaps
	LostDatagrams                uint64
	Sessions                     uint64
}

// Outgoing is a datagram the caller must send by unicast UDP to To (a NAK to the sender).
type Outgoing struct {
	To netip.AddrPort
	B  []byte
}

type held struct {
	dg        uint64
	payload   []byte
	repaired  bool
	delivered bool // Skip mode: already handed out, kept as a marker
}

type rstream struct {
	id       uint32
	topic    string
	known    bool // named by a CATALOG
	wanted   bool
	started  bool
	expected uint64          // next stream sequence to deliver
	held     map[uint64]held // changed only by put, del and unhold, which keep hmin
	hmin     uint64          // the least key of held, while hminOK
	hminOK   bool
	tail     uint64              // last stream sequence announced by a HEARTBEAT...
	tailAt   uint64              // ...whose leading edge was this
	base     uint64              // stream sequences up to base were sent before the join point (HEARTBEAT)
	dropMin  uint64              // lowest record dropped for want of room before the stream started (0: none)
	queued   bool                // in ReceiverCore.gapq
	frags    map[uint64]*partial // messages being reassembled, by stream sequence
	ljStart  uint64              // a HISTORY answer says the stream starts here (0: none)
	// top is the highest stream sequence the session showed for it: a record, a fragment or a
	// record dropped for room. A session change reports what is missing up to it.
	top uint64
	low uint64 // the lowest stream sequence seen (0: none)
	// resume: the stream was evicted from the table after delivering up to resume-1 (see
	// ghost); a CATALOG entry naming it wanted makes it go on from there.
	resume uint64
	// The stream table's order of activity (newer, older: the neighbours; the table's newest
	// and oldest are ReceiverCore.newest and oldest), and the index in ReceiverCore.slist.
	newer, older *rstream
	idx          int
	// floor: the stream started where a HISTORY answer said (0: it did not); a record after the
	// join point below floor, arriving later, is reported as a gap up to floor, which it lowers.
	floor uint64
}

// seen notes that stream sequence seq of st exists.
func (st *rstream) seen(seq uint64) {
	if seq > st.top {
		st.top = seq
	}
	if st.low == 0 || seq < st.low {
		st.low = seq
	}
}

// put holds h as stream sequence seq.
func (st *rstream) put(seq uint64, h held) {
	st.held[seq] = h
	switch {
	case len(st.held) == 1:
		st.hmin, st.hminOK = seq, true
	case st.hminOK && seq < st.hmin:
		st.hmin = seq
	}
}

// del drops held stream sequence seq. When it was the least (as in drain), the next least is
// looked for among the following sequences first: held records come in runs between holes.
func (st *rstream) del(seq uint64) {
	delete(st.held, seq)
	if seq != st.hmin || !st.hminOK {
		return
	}
	st.hminOK = false
	for k := seq + 1; k <= seq+minProbe && len(st.held) > 0; k++ {
		if _, ok := st.held[k]; ok {
			st.hmin, st.hminOK = k, true
			return
		}
	}
}

// holds reports whether st holds stream sequence seq: without a map lookup when seq is below
// the least one held (the common case of a record in order while others wait behind a hole).
func (st *rstream) holds(seq uint64) bool {
	if len(st.held) == 0 || st.hminOK && seq < st.hmin {
		return false
	}
	_, ok := st.held[seq]
	return ok
}

// minProbe is how many sequences after a dropped least one del tries before leaving the next
// least to a scan.
const minProbe = 256

// minHeld is the least stream sequence held (held not empty). It is kept as records come and
// go, and found by a scan only after del's probe missed: the receiver asks for it each time a
// hole is filled, and scanning every held record each time made a lossy receiver that fell
// behind fall further (two thirds of its CPU at 10% loss and 280k messages a second).
func (st *rstream) minHeld() uint64 {
	if !st.hminOK {
		st.hmin, st.hminOK = minKey(st.held), true
	}
	return st.hmin
}

// partial is a message being reassembled from its fragments.
type partial struct {
	total    uint32
	have     uint32  // bytes received
	pieces   []piece // sorted by offset, never overlapping
	dg       uint64  // the highest datagram sequence of its fragments
	repaired bool    // a fragment came in a repair
	dropped  bool    // did not fit MaxReassembly: its later fragments are dropped too
}

// pentry names a partial in ReceiverCore.pfifo (stale once the partial is gone).
type pentry struct {
	st  *rstream
	seq uint64
	pa  *partial
}

type piece struct {
	off  uint32
	data []byte
}

// hole is the receiver's state for one missing datagram.
type hole struct {
	due    time.Time // next NAK
	giveUp time.Time // zero until the first NAK is sent; then first NAK + budget
	tries  int
}

// ReceiverCore is the sans-IO receiver: datagrams in (Handle), time in (Tick), events and NAKs out
// (Ready). It detects gaps, NAKs after a random back-off unless an NCF or repair is heard, gives up
// after the profile's budget, and turns every loss into an in-order Gap. Not safe for concurrent
// use.
//
// The caller's duties:
//  1. Call Handle with every datagram received on the group, with the source address.
//  2. Call Tick at Deadline (or earlier; a zero Deadline means none is due).
//  3. After each call, take Ready: hand the events to the application in order and send each
//     Outgoing datagram by unicast UDP.
//  4. Call SetBehind(true) while datagrams are known to wait unread in the socket (a full batch
//     read), SetBehind(false) once caught up: give-ups wait while the repair may still be queued.
type ReceiverCore struct {
	cfg  ReceiverCoreConfig
	t    timing
	id   uint64
	ring *Keyring // with Keys: opens and verifies datagrams

	session   uint64
	joined    bool
	join      uint64
	next      uint64          // every sequence below next is resolved (received or lost)
	leading   uint64          // highest sequence known to exist
	done      map[uint64]bool // resolved sequences >= next: false received, true lost
	miss      map[uint64]*hole
	nextDue   time.Time
	src       netip.AddrPort // the current session's sender: NAKs go there, others are foreign
	heard     time.Time      // when the current session last sent a datagram we believed
	firstLost uint64         // lowest datagram of the session given up (0: none)
	behind    bool
	// lastRepair: when a repair last filled a datagram this receiver was missing (see
	// repairing).
	lastRepair time.Time

	cand struct { // the latest other session heard while the current one was live
		session uint64
		young   bool // first heard with trailing edge <= 1 (see otherSession)
		from    netip.AddrPort
		kept    []keptDatagram // its datagrams, replayed when it takes over (at most CandidateBytes)
		bytes   int
	}

	lossPassed bool // the frontier moved past a lost sequence: look for stream gaps
	lossEver   bool
	lossReason Reason

	streams  map[uint32]*rstream
	slist    []*rstream
	newest   *rstream         // the stream with a record, fragment or first CATALOG entry last
	oldest   *rstream         // the stream idle the longest: eviction looks from here
	ghosts   map[uint32]ghost // streams evicted from a full table (at most MaxStreams)
	ghostq   []uint32         // ghosts' ids in the order they were made
	waiting  []*rstream       // known, wanted, not started: the start is decided by the frontier
	tried    uint64           // the frontier when waiting streams were last tried
	gapq     []*rstream       // streams with a hole or tail the frontier has not reached yet
	resolved uint64           // the frontier when gapq was last looked at
	bytes    int              // held payloads, topics and overheads
	fbytes   int              // fragments of incomplete messages and their overheads (MaxReassembly)
	pfifo    []pentry         // partials in the order they were started: the oldest is evicted first
	nparts   int              // partials in the streams' frags maps
	retired  []uint64
	nakSeq   uint64
	now      time.Time // of the call in progress
	catDue   time.Time // when to ask for the catalog (records of unknown streams are held)

	lj struct { // late join: the history before the join point (section 4.10)
		active   bool // streams that began before the join wait for the history
		pending  bool // a request is out, no answer yet
		due      time.Time
		since    time.Time        // the first request
		firstReq uint64           // NAK counter of the session's first request
		hist     map[uint64]*hole // datagrams below the join point to NAK for the history
	}

	events []Event
	out    []Outgoing
	pkt    Packet
	keys   []uint64
	c      ReceiverCounters
}

// keptDatagram is a candidate session's datagram, authenticated (and opened) when it came, and
// the key ring's key that opened it (-1: none).
type keptDatagram struct {
	b   []byte
	key int
}

// youngSession: a receiver that first hears a session at or below this sequence, while the sender
// still holds sequence 1, recovers the session from its start instead of joining late. (A
// receiver that was following a session recovers the next one from its start whatever the
// sequence, while the sender holds sequence 1: see otherSession.)
const youngSession = 64

// NewReceiverCore returns a receiver that joins whatever session it hears first.
func NewReceiverCore(cfg ReceiverCoreConfig) (*ReceiverCore, error) {
	if cfg.Rand == nil {
		return nil, fmt.Errorf("receiver core: nil Rand: %w", ErrBadConfig)
	}
	if err := cfg.Profile.validate(); err != nil {
		return nil, err
	}
	if cfg.SessionTimeout < 0 || cfg.MaxBytes < 0 || cfg.MaxReassembly < 0 {
		return nil, fmt.Errorf("receiver core: negative session timeout or max bytes: %w", ErrBadConfig)
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultReceiverMaxBytes
	}
	if cfg.MaxReassembly == 0 {
		cfg.MaxReassembly = DefaultMaxReassembly
	}
	ring, err := NewKeyring(cfg.Keys, cfg.Seal)
	if err != nil {
		return nil, err
	}
	r := &ReceiverCore{cfg: cfg, t: cfg.Profile.timing(), id: cfg.ID, ring: ring}
	for r.id == 0 {
		r.id = cfg.Rand.Uint64()
	}
	r.reset()
	return r, nil
}

func (r *ReceiverCore) reset() {
	r.joined = false
	r.done = make(map[uint64]bool)
	r.miss = make(map[uint64]*hole)
	r.streams = make(map[uint32]*rstream)
	r.slist, r.waiting, r.gapq = nil, nil, nil
	r.newest, r.oldest, r.ghosts, r.ghostq = nil, nil, nil, nil
	r.bytes, r.fbytes = 0, 0
	r.pfifo, r.nparts = nil, 0
	r.nextDue, r.catDue = time.Time{}, time.Time{}
	r.lossPassed, r.lossEver = false, false
	r.firstLost = 0
	r.lj.active, r.lj.pending, r.lj.hist = false, false, nil
	r.lj.due, r.lj.since, r.lj.firstReq = time.Time{}, time.Time{}, 0
	r.dropCandidate()
}

func (r *ReceiverCore) dropCandidate() {
	r.cand.session, r.cand.young, r.cand.kept, r.cand.bytes = 0, false, nil, 0
}

// keyed reports whether datagrams are authenticated (a key: HMAC or sealing).
func (r *ReceiverCore) keyed() bool { return r.cfg.Auth != nil || r.ring != nil }

// ID is the receiver id sent in NAKs.
func (r *ReceiverCore) ID() uint64 { return r.id }

// Session is the current session id (0 before the first datagram).
func (r *ReceiverCore) Session() uint64 { return r.session }

// Counters returns the counts so far.
func (r *ReceiverCore) Counters() ReceiverCounters { return r.c }

// ReceiverState is the size of a ReceiverCore's state, for tests and stats.
type ReceiverState struct {
	Tracked int // resolved-above-frontier plus missing sequences: at most MaxHole
	Streams int // at most MaxStreams
	Bytes   int // held records and stream table, accounted: at most MaxBytes
	Held    int // records held
	// Reassembly is the fragments of incomplete messages, accounted: at most MaxReassembly.
	Reassembly int
	Partials   int // messages being reassembled (or dropped, waiting for their gap)
}

// State returns the size of the core's state.
func (r *ReceiverCore) State() ReceiverState {
	s := ReceiverState{Tracked: len(r.done) + len(r.miss) + len(r.lj.hist), Streams: len(r.streams), Bytes: r.bytes}
	s.Reassembly = r.fbytes
	for _, st := range r.slist {
		s.Held += len(st.held)
		s.Partials += len(st.frags)
	}
	return s
}

// SetBehind tells the core whether datagrams wait unread in the socket. While behind, a missing
// sequence is not given up for its budget: its repair may be among the unread datagrams.
func (r *ReceiverCore) SetBehind(b bool) { r.behind = b }

// repairing reports whether repairs keep coming: one filled a datagram this receiver was
// missing within the last budget. The sender is then working through this receiver's NAKs
// (a sender over a NAK source's byte budget leaves unanswered what it cannot repair yet, and
// the receiver asks again), so a missing datagram is not given up for its budget meanwhile;
// the sender's trailing edge (gone) and MaxHole still bound the wait.
func (r *ReceiverCore) repairing(now time.Time) bool {
	return !r.lastRepair.IsZero() && now.Sub(r.lastRepair) < r.t.budget
}

// Ready returns the events for the application, in order, and the datagrams to send. Both slices
// are valid until the next call on the core.
func (r *ReceiverCore) Ready() ([]Event, []Outgoing) {
	e, o := r.events, r.out
	r.events, r.out = r.events[:0], r.out[:0]
	if cap(r.events) > 1<<16 {
		r.events = nil // do not keep a burst's worth of bodies alive
	}
	return e, o
}

// Deadline is when Tick should next run; zero when nothing is pending.
func (r *ReceiverCore) Deadline() time.Time { return r.nextDue }

func (r *ReceiverCore) setDue(t time.Time) {
	if r.nextDue.IsZero() || t.Before(r.nextDue) {
		r.nextDue = t
	}
}

// unknownStreams reports whether records wait for a CATALOG.
func (r *ReceiverCore) unknownStreams() bool {
	for _, st := range r.slist {
		if !st.known && (len(st.held) > 0 || len(st.frags) > 0) {
			return true
		}
	}
	return false
}

// sendNAK queues a NAK for ranges to the sender.
func (r *ReceiverCore) sendNAK(rs []Range) {
	r.nakSeq++
	b, _ := AppendPacket(make([]byte, 0, HeaderSize+12+16*len(rs)+TagSize), &Packet{
		PacketHeader: PacketHeader{Type: TypeNAK, Session: r.session, Seq: r.nakSeq},
		Receiver:     r.id, Ranges: rs})
	auth := r.cfg.Auth
	if r.ring != nil {
		auth = r.ring.Auth()
	}
	r.out = append(r.out, Outgoing{To: r.src, B: auth.Sign(b)})
}

// edges checks a datagram's sequence and trailing edge against each other: the window rule of
// section 4. Sequenced: 0 < trailing <= seq and seq - trailing <= 2^24. Control (seq is the
// leading edge, trailing may be leading + 1 when the window is empty): trailing <= seq + 1 and
// seq + 1 - trailing <= 2^24.
func edges(p *Packet) bool {
	top := p.Seq
	if p.Type.Sequenced() {
		if p.Seq == 0 {
			return false
		}
	} else {
		top++
	}
	return p.Trailing <= top && top-p.Trailing <= 1<<24
}

// Handle processes one datagram from the group (or a unicast from the sender).
func (r *ReceiverCore) Handle(now time.Time, from netip.AddrPort, b []byte) error {
	key := -1 // the ring's key that opened b: current once b is taken as new (section 6)
	if r.ring != nil {
		ob, err := r.ring.Open(b, now)
		if err != nil {
			r.c.AuthFailures++
			return err
		}
		b, key = ob, r.ring.last
	} else if !r.cfg.Auth.Verify(b) {
		r.c.AuthFailures++
		return ErrAuth
	}
	return r.handle(now, from, b, key)
}

// handle processes an authenticated datagram b (opened, when it was sealed) that key opened
// (-1: no key ring).
func (r *ReceiverCore) handle(now time.Time, from netip.AddrPort, b []byte, key int) error {
	p := &r.pkt
	if err := Decode(b, p); err != nil {
		if errors.Is(err, ErrSealed) {
			r.c.Sealed++ // sealed, and we have no key: counted, never guessed at
			return err
		}
		r.c.Malformed++
		return err
	}
	if p.Type == TypeNAK || p.Type == TypeHistoryRequest {
		return nil // another receiver's NAK or history request: not for us
	}
	r.now = now
	if !edges(p) || p.Seq == math.MaxUint64 {
		r.c.Replays++
		return ErrStale
	}
	if !r.joined || p.Session != r.session {
		kept, keptFrom, err := r.otherSession(now, from, p, b, key)
		if err != nil {
			return err
		}
		r.takeKey(key, now) // it started a session
		if len(kept) > 0 {
			// The new session's datagrams heard while the old one was live come first (they
			// were authenticated when they came).
			b = append([]byte(nil), b...)
			for _, d := range kept {
				r.handle(now, keptFrom, d.b, d.key)
			}
			if err := Decode(b, p); err != nil {
				return err
			}
			r.now = now
			if p.Seq <= r.leading && r.miss[p.Seq] == nil && p.Type.Sequenced() {
				r.c.Duplicates++
				return nil
			}
		}
	} else if from != r.src {
		r.c.ForeignSource++
		return ErrForeignSource
	}
	if p.Seq > r.leading && p.Seq-r.leading > MaxHole {
		if now.Sub(r.heard) < r.cfg.SessionTimeout {
			r.c.Ahead++
			return ErrAhead
		}
		// The session was silent for the timeout: we were cut off, the jump is real. What the
		// window leaves behind is lost.
	}
	r.c.Datagrams++
	r.c.Bytes += uint64(len(b))
	r.heard = now
	r.trail(p.Trailing, ReasonGone)
	if len(r.lj.hist) > 0 {
		r.histTrail(p.Trailing)
	}
	switch p.Type {
	case TypeData, TypeRData, TypeCatalog:
		seq := p.Seq
		if r.lj.hist[seq] != nil {
			r.takeKey(key, now)
			r.historyData(p)
			break
		}
		if _, ok := r.done[seq]; ok || seq < r.next || (seq <= r.leading && r.miss[seq] == nil) {
			r.c.Duplicates++
			return nil
		}
		r.takeKey(key, now) // a sequence we did not have
		if seq > r.leading {
			r.learn(now, seq-1)
			if seq-r.next >= MaxHole {
				r.windowTrail(seq - MaxHole + 1)
			}
			r.leading = seq
		} else if r.miss[seq] != nil {
			delete(r.miss, seq)
			if p.Flags&FlagRepair != 0 {
				r.c.Repairs++
				r.lastRepair = now
			}
		}
		if seq == r.next && len(r.done) == 0 {
			r.next++
		} else {
			r.done[seq] = false
		}
		repaired := p.Flags&FlagRepair != 0
		if p.Type == TypeCatalog {
			r.catalog(p.Catalog)
		} else {
			for _, rec := range p.Records {
				st := r.stream(rec.Stream)
				if !rec.Frag {
					r.record(st, rec.Seq, seq, rec.Payload, repaired, false)
				} else if pa := r.fragment(st, &rec, seq, repaired); pa != nil {
					r.record(st, rec.Seq, pa.dg, pa.assemble(), pa.repaired, true)
				}
			}
		}
	case TypeHeartbeat:
		r.learn(now, p.Seq)
		for _, s := range p.Streams {
			// A HEARTBEAT creates no stream, except one sent before the join point (the one
			// that started the session): what it announces then was sent before the join (4.3).
			// Made-up ids would otherwise fill the table without a record.
			st := r.streams[s.Stream]
			if st == nil && p.Seq < r.join {
				st = r.newStream(s.Stream, false)
			}
			if st == nil {
				continue
			}
			if p.Seq < r.join && s.Seq > st.base {
				st.base = s.Seq // sent before we joined: not ours to recover
			}
			if s.Seq >= st.tail {
				st.tail, st.tailAt = s.Seq, p.Seq
			}
		}
		r.lossPassed = true // tails may be resolved now
	case TypeNCF:
		r.c.NCFs++
		r.learn(now, p.Seq)
		bo := r.backoff() // one draw per NCF: the sequences it names stay together
		promised := func(m *hole) {
			switch p.Status {
			case NCFWillSend:
				m.due = now.Add(r.t.ncfWait + bo)
			case NCFDelayed:
				m.due = now.Add(4*r.t.ncfWait + bo)
				// The sender promised it: the budget runs again from now.
				m.giveUp = later(m.giveUp, now.Add(r.t.budget))
			}
		}
		for _, rg := range p.Ranges {
			r.eachMissing(rg, func(q uint64, m *hole) {
				if p.Status == NCFGone {
					r.lose(q, ReasonGone)
				} else {
					promised(m)
				}
			})
			if p.Status == NCFGone {
				r.eachHist(rg, ReasonGone)
			} else {
				r.eachHistHole(rg, promised) // history holes are NAKed like any other (4.10)
			}
		}
	case TypeLoss:
		r.learn(now, p.Seq)
		reason := p.Reason
		if reason == 0 || reason > ReasonSlowConsumer {
			reason = ReasonGone
		}
		for _, rg := range p.Ranges {
			r.eachMissing(rg, func(q uint64, _ *hole) { r.lose(q, reason) })
			r.eachHist(rg, reason)
		}
	case TypeHistory:
		r.learn(now, p.Seq)
		r.history(now, p)
	}
	r.advance()
	return nil
}

// takeKey tells the key ring that the datagram opened under its key i was taken as new: the
// rotation rule (section 6) may make that key current. Datagrams dropped after they were opened
// (replays, duplicates, stale sessions) and control datagrams do not.
func (r *ReceiverCore) takeKey(i int, now time.Time) {
	if r.ring != nil {
		r.ring.use(i, now)
	}
}

func later(a, b time.Time) time.Time {
	if a.IsZero() || b.After(a) {
		return b
	}
	return a
}

// otherSession decides what a datagram of a session other than the current one does: start it
// (the first session heard; with a key, a session not older than the current one; without a key,
// once the current session has been silent for the session timeout), or nothing.
// It returns the datagrams of the new session kept while it waited, to be handled first.
func (r *ReceiverCore) otherSession(now time.Time, from netip.AddrPort, p *Packet, b []byte, key int) ([]keptDatagram, netip.AddrPort, error) {
	if p.Flags&FlagRepair != 0 {
		r.c.Replays++
		return nil, from, ErrStale // a repair for others is no place to start a session
	}
	if slices.Contains(r.retired, p.Session) ||
		(r.joined && r.keyed() && p.Session>>32 < r.session>>32) {
		r.c.Replays++
		return nil, from, ErrStale
	}
	// Young: the receiver was there (or nearly) when the session began, and recovers it from its
	// start. A receiver that was following a session was there when the sender restarted,
	// whatever it lost of the new session's first datagrams: while the sender still holds
	// sequence 1 they are repaired, not left behind as a late join.
	young := p.Trailing <= 1 && (p.Seq <= youngSession || r.joined)
	// With a key, a session whose start second is later is a restart: taken at once. One
	// with the same start second (a sender restarted twice within a second) may be the older
	// one, replayed: it is taken only as one would be without a key.
	sameSecond := r.keyed() && p.Session>>32 == r.session>>32
	if r.joined && (!r.keyed() || sameSecond) && now.Sub(r.heard) < r.cfg.SessionTimeout {
		// The current session is live: one datagram of another (unauthenticated, or of the same
		// start second) does not retire it. Keep the candidate's datagrams (bounded) and
		// whether it was young when first heard, so a restarted sender loses nothing.
		if r.cand.session != p.Session || r.cand.from != from {
			r.dropCandidate()
			r.cand.session, r.cand.young, r.cand.from = p.Session, young, from
		}
		if r.cand.bytes+len(b) <= CandidateBytes {
			r.cand.kept = append(r.cand.kept, keptDatagram{append([]byte(nil), b...), key})
			r.cand.bytes += len(b)
		}
		r.c.OtherSession++
		return nil, from, ErrOtherSession
	}
	var kept []keptDatagram
	keptFrom := from
	if r.cand.session == p.Session && r.cand.from == from {
		young = young || r.cand.young
		kept = r.cand.kept
		if len(kept) > 0 {
			// Start the session from its earliest datagram we kept.
			var first Packet
			if Decode(kept[0].b, &first) == nil {
				p = &first
			}
		}
	}
	r.switchSession(p, from, young)
	return kept, keptFrom, nil
}

// eachMissing calls f for the missing sequences in rg, in order.
func (r *ReceiverCore) eachMissing(rg Range, f func(uint64, *hole)) {
	if rg.To-rg.From < uint64(len(r.miss)) {
		for q := rg.From; ; q++ {
			if m := r.miss[q]; m != nil {
				f(q, m)
			}
			if q == rg.To {
				break
			}
		}
		return
	}
	r.keys = sortedKeys(r.miss, r.keys)
	for _, q := range r.keys {
		if rg.Contains(q) {
			if m := r.miss[q]; m != nil {
				f(q, m)
			}
		}
	}
}

func (r *ReceiverCore) switchSession(p *Packet, from netip.AddrPort, young bool) {
	old := r.session
	if r.joined {
		r.flushSession()
		r.retired = append(r.retired, old)
		if len(r.retired) > RetiredSessions {
			r.retired = r.retired[1:]
		}
	}
	r.reset()
	r.session, r.joined, r.src = p.Session, true, from
	r.c.Sessions++
	r.events = append(r.events, SessionChange{Old: old, New: p.Session})
	first := p.Seq // a sequenced datagram: start with it
	if !p.Type.Sequenced() {
		first = p.Seq + 1 // control datagrams carry the leading edge: start after it
	}
	start := first
	if young {
		first = 1 // we were there (or nearly) when it began: recover the session from its start
	}
	r.join, r.next, r.leading = first, first, first-1
	if start-first >= MaxHole {
		// Recovered from 1 but heard first beyond the window: what the window cannot hold is
		// lost (reported as gaps once records show it), the rest is NAKed as usual.
		r.learn(r.now, start-1)
	}
	if (r.cfg.LateJoin > 0 || r.cfg.LateJoinAge > 0) && first > 1 {
		// Joined late: ask for the history before the join point; the streams that began
		// before it wait for the answer (or for HistoryWait without one).
		r.lj.active, r.lj.pending, r.lj.due = true, true, r.now
		r.setDue(r.now)
	}
}

// flushSession delivers what the old session left, with gaps for its holes: every stream
// sequence it showed (a record held, a message partly reassembled, a record dropped for room, a
// HEARTBEAT tail) that was not delivered is reported, reason session-restart.
//
// A stream no CATALOG named (revision 7) cannot be told wanted or not: what it showed, and what
// the ghosts of such streams dropped, is reported with an empty topic.
func (r *ReceiverCore) flushSession() {
	for _, st := range r.slist {
		switch {
		case st.known && st.wanted:
			r.flushStream(st, ReasonSessionRestart)
		case !st.known && st.top != 0:
			r.unnamedGap(st.id, st.low, st.top, ReasonSessionRestart)
		}
	}
	for _, id := range r.ghostq {
		if g, ok := r.ghosts[id]; ok {
			delete(r.ghosts, id)
			if g.drop != 0 {
				r.unnamedGap(id, g.drop, g.top, ReasonSessionRestart)
			}
		}
	}
}

// unnamedGap reports stream sequences from-to of stream id, which no CATALOG named: a Gap with
// an empty topic (the receiver cannot tell whether its filter wants it).
func (r *ReceiverCore) unnamedGap(id uint32, from, to uint64, reason Reason) {
	if from == 0 {
		from = 1
	}
	to = max(to, from)
	r.c.Gaps++
	r.c.GapMessages += to - from + 1
	r.events = append(r.events, Gap{Stream: id, From: from, To: to, Reason: reason, Session: r.session})
}

// flushStream delivers what the known, wanted stream st holds, with gaps (reason) for its holes
// and for what it showed beyond: it will get nothing more (the session ended, or it is evicted).
func (r *ReceiverCore) flushStream(st *rstream, reason Reason) {
	if !st.started {
		m, dg, ok := r.lowest(st)
		if !ok {
			return
		}
		// Its start was never decided: what it held comes with a gap before it when a datagram
		// between the join and its first record was lost.
		st.started, st.expected = true, m
		if r.firstLost != 0 && r.firstLost < dg {
			st.expected = min(st.base+1, m)
		}
	}
	for len(st.held) > 0 {
		m := st.minHeld()
		if m > st.expected {
			r.gap(st, st.expected, m-1, reason)
			st.expected = m
		}
		r.drain(st)
	}
	if last := max(st.tail, st.top); last >= st.expected {
		r.gap(st, st.expected, last, reason)
		st.expected = last + 1
	}
	r.dropPartials(st, math.MaxUint64)
}

// lowest is the lowest stream sequence st holds, has partly reassembled or dropped for room, and
// the datagram it came in (math.MaxUint64 for a dropped record: not known). ok is false when
// there is none.
func (r *ReceiverCore) lowest(st *rstream) (seq, dg uint64, ok bool) {
	if len(st.held) > 0 {
		seq = st.minHeld()
		dg, ok = st.held[seq].dg, true
	}
	for q, pa := range st.frags {
		if !ok || q < seq {
			seq, dg, ok = q, pa.dg, true
		}
	}
	if st.dropMin != 0 && (!ok || st.dropMin < seq) {
		seq, dg, ok = st.dropMin, math.MaxUint64, true
	}
	return seq, dg, ok
}

// trail moves the frontier to t: anything older that is still missing is lost for reason.
// windowTrail moves the receive window's bottom to t (MaxHole below the leading edge): what is
// still missing below it is given up, reason expired.
func (r *ReceiverCore) windowTrail(t uint64) {
	before := r.c.LostDatagrams
	r.trail(t, ReasonExpired)
	r.c.WindowExpired += r.c.LostDatagrams - before
}

func (r *ReceiverCore) trail(t uint64, reason Reason) {
	if t <= r.next {
		return
	}
	lost := t - r.next
	drop := func(q uint64) {
		if v, ok := r.done[q]; ok {
			if !v {
				lost--
			}
			delete(r.done, q)
		}
		delete(r.miss, q)
	}
	if t-r.next <= uint64(len(r.done)+len(r.miss)) { // a short step: look the range up
		for q := r.next; q < t; q++ {
			drop(q)
		}
	} else {
		for q := range r.done {
			if q < t {
				drop(q)
			}
		}
		for q := range r.miss {
			if q < t {
				drop(q)
			}
		}
	}
	if lost > 0 {
		r.c.LostDatagrams += lost
		r.lossReason, r.lossEver, r.lossPassed = reason, true, true
		if r.firstLost == 0 {
			r.firstLost = r.next
		}
	}
	r.next = t
	if r.leading < t-1 {
		r.leading = t - 1
	}
}

// learn records that every sequence up to l exists: the unseen ones are missing. The window
// keeps at most MaxHole sequences above the frontier: older ones still missing are given up.
func (r *ReceiverCore) learn(now time.Time, l uint64) {
	if l <= r.leading {
		return
	}
	if l-r.next >= MaxHole {
		r.windowTrail(l - MaxHole + 1)
	}
	from := r.leading + 1
	r.leading = l
	// One back-off for the whole hole found at once, so a burst costs one NAK with one range.
	due := now.Add(r.backoff())
	for q := from; q <= l; q++ {
		r.miss[q] = &hole{due: due}
	}
	r.setDue(due)
}

// backoff draws the wait before a first NAK from the truncated exponential distribution of
// RFC 5740 (NORM) section 5.5.2: most receivers wait long, few answer early, so the first NAK's
// NCF reaches the others before their timers fire. lambda = ln(group size) + 1 for a group of 100.
func (r *ReceiverCore) backoff() time.Duration {
	const lambda = 5.605 // ln(100) + 1
	x := r.cfg.Rand.Float64()
	t := math.Log(x*(math.Exp(lambda)-1)+1) / lambda
	return time.Duration(t * float64(r.t.nakBackoff))
}

func (r *ReceiverCore) lose(q uint64, reason Reason) {
	delete(r.miss, q)
	r.done[q] = true
	r.c.LostDatagrams++
	r.lossReason, r.lossEver = reason, true
	if r.firstLost == 0 || q < r.firstLost {
		r.firstLost = q
	}
}

// advance moves the frontier over resolved sequences, decides the start of streams that wait
// for it and reports the stream gaps it uncovers.
func (r *ReceiverCore) advance() {
	for len(r.done) > 0 {
		lost, ok := r.done[r.next]
		if !ok {
			break
		}
		if lost {
			r.lossPassed = true
		}
		delete(r.done, r.next)
		r.next++
	}
	if (r.next != r.tried || r.lossPassed) && len(r.waiting) > 0 {
		r.tried = r.next
		w := r.waiting[:0]
		for _, st := range r.waiting {
			if !r.tryStart(st) {
				w = append(w, st)
			}
		}
		clear(r.waiting[len(w):])
		r.waiting = w
	}
	if r.lossPassed {
		r.lossPassed = false
		for _, st := range r.slist {
			r.resolve(st)
		}
	} else if r.next != r.resolved && len(r.gapq) > 0 {
		q := r.gapq
		r.gapq = nil
		for _, st := range q {
			st.queued = false
			r.resolve(st)
		}
	}
	r.resolved = r.next
}

// await queues st to be resolved again when the frontier moves.
func (r *ReceiverCore) await(st *rstream) {
	if !st.queued {
		st.queued = true
		r.gapq = append(r.gapq, st)
	}
}

// tryStart decides where a stream that began before the join starts: at the first record in the
// datagrams from the join point on, once every datagram up to that record's is resolved. If one
// of them was lost, it may have carried earlier records: the stream starts after the last
// sequence a HEARTBEAT announced before the join (or at 1), and the difference is a gap. It
// reports whether the stream started.
func (r *ReceiverCore) tryStart(st *rstream) bool {
	if st.started || !st.known || !st.wanted {
		return true
	}
	if r.lj.active {
		return false // the history before the join point decides
	}
	if st.ljStart != 0 {
		if m, _, ok := r.lowest(st); ok && m < st.ljStart {
			// A record after the join point below the start the answer named: the sender's
			// records after the join are all above it, so the answer is not the sender's (a
			// forgery, without a key). Start by the rule of 4.3, never above what came live.
			st.ljStart = 0
		} else {
			// The sender said where its history starts: deliver from there (what is missing
			// from it is a gap once every history datagram is resolved).
			st.started, st.expected, st.floor = true, st.ljStart, st.ljStart
			r.drain(st)
			r.lossPassed = true
			return true
		}
	}
	if len(st.held) == 0 && st.dropMin == 0 {
		if st.tail <= st.base || st.tailAt >= r.next {
			return false
		}
		if r.firstLost == 0 || r.firstLost > st.tailAt {
			st.base = st.tail // every record up to the tail came before the join
			return false
		}
		st.started, st.expected = true, st.base+1
		r.lossPassed = true
		return true
	}
	m := st.dropMin
	var dg uint64
	if len(st.held) > 0 {
		k := st.minHeld()
		dg = st.held[k].dg
		if m == 0 || k < m {
			m = k
		}
	}
	if dg >= r.next {
		return false // a datagram before it is still missing: it may hold earlier records
	}
	st.started, st.expected = true, m
	if r.firstLost != 0 && r.firstLost < dg {
		st.expected = min(st.base+1, m)
	}
	r.drain(st)
	r.lossPassed = true
	return true
}

// resolve reports the holes of st that the frontier proves lost.
func (r *ReceiverCore) resolve(st *rstream) {
	if !st.known || !st.wanted || !st.started {
		return
	}
	reason := r.lossReason
	if reason == 0 {
		reason = ReasonExpired // records dropped for room: the only loss without a lost datagram
	}
	for len(st.held) > 0 {
		m := st.minHeld()
		h := st.held[m]
		if m <= st.expected || h.dg >= r.next {
			break
		}
		r.gap(st, st.expected, m-1, reason)
		st.expected = m
		r.drain(st)
	}
	if len(st.held) == 0 && st.tail >= st.expected && st.tailAt < r.next {
		r.gap(st, st.expected, st.tail, reason)
		st.expected = st.tail + 1
	}
	if len(st.held) > 0 || st.tail >= st.expected {
		r.await(st) // a hole whose datagrams are not all resolved yet
	}
}

func (r *ReceiverCore) gap(st *rstream, from, to uint64, reason Reason) {
	if len(st.frags) > 0 {
		r.dropPartials(st, to)
	}
	r.c.Gaps++
	r.c.GapMessages += to - from + 1
	r.events = append(r.events, Gap{Topic: st.topic, Stream: st.id, From: from, To: to, Reason: reason, Session: r.session})
}

// stream returns the stream with id, creating it, as the newest: a record, a fragment or a
// CATALOG entry of it came. nil when the stream table is full and nothing can be evicted.
func (r *ReceiverCore) stream(id uint32) *rstream {
	st := r.streams[id]
	if st == nil {
		return r.newStream(id, true)
	}
	r.touch(st)
	return st
}

// newStream adds a stream for id to the table, evicting another when it is full: as the newest
// (active), or as the oldest (only announced). nil when nothing can be evicted.
func (r *ReceiverCore) newStream(id uint32, active bool) *rstream {
	if !r.makeRoom() {
		return nil
	}
	st := &rstream{id: id, held: make(map[uint64]held), idx: len(r.slist)}
	r.streams[id] = st
	r.slist = append(r.slist, st)
	r.bytes += streamOverhead
	if active {
		r.link(st, nil, r.newest)
	} else {
		r.link(st, r.oldest, nil)
	}
	if g, ok := r.ghosts[id]; ok {
		delete(r.ghosts, id)
		st.resume, st.floor = g.resume, g.floor
		st.dropMin = g.drop
		if g.top != 0 {
			st.seen(g.top)
			st.seen(g.drop)
		}
	}
	return st
}

// link puts st between newer and older in the order of activity (nil: the end).
func (r *ReceiverCore) link(st, newer, older *rstream) {
	st.newer, st.older = newer, older
	if newer != nil {
		newer.older = st
	} else {
		r.newest = st
	}
	if older != nil {
		older.newer = st
	} else {
		r.oldest = st
	}
}

// unlink takes st out of the order of activity.
func (r *ReceiverCore) unlink(st *rstream) {
	if st.newer != nil {
		st.newer.older = st.older
	} else {
		r.newest = st.older
	}
	if st.older != nil {
		st.older.newer = st.newer
	} else {
		r.oldest = st.newer
	}
	st.newer, st.older = nil, nil
}

// touch makes st the newest.
func (r *ReceiverCore) touch(st *rstream) {
	if r.newest != st {
		r.unlink(st)
		r.link(st, nil, r.newest)
	}
}

// ghost is what the receiver keeps of a stream it evicted from a full table, so that its loss
// is reported and its delivery goes on if it comes back: resume (with floor) for a stream that
// was delivering, the lowest (drop) and highest (top) stream sequence of the records dropped
// with a stream not yet named by a CATALOG.
type ghost struct {
	resume, floor, drop, top uint64
}

// evictScan is how many of the streams idle the longest eviction looks at.
const evictScan = 64

// makeRoom evicts streams until one more fits the table (MaxStreams, MaxBytes), and reports
// whether it does. Among the evictScan streams idle the longest, it evicts first one that no
// CATALOG named and that holds nothing (an id a HEARTBEAT announced, or a forger made up),
// then the one idle the longest that holds nothing, then the one idle the longest: a stream
// holding records is flushed as at a session change (its holes reported as gaps, reason
// expired), and the records of a stream no CATALOG named yet are dropped and remembered as a
// ghost (reported if the stream is named later). The stream table never refuses a stream.
func (r *ReceiverCore) makeRoom() bool {
	for len(r.streams) >= MaxStreams || r.bytes+streamOverhead > r.cfg.MaxBytes {
		var empty, any *rstream
		st := r.oldest
		for i := 0; i < evictScan && st != nil; i, st = i+1, st.newer {
			if !r.holdsNothing(st) {
				if any == nil {
					any = st
				}
				continue
			}
			if !st.known {
				empty = st
				break
			}
			if empty == nil {
				empty = st
			}
		}
		switch {
		case empty != nil:
			r.evict(empty)
		case any != nil:
			r.evict(any)
		default:
			return false // an empty table that MaxBytes cannot hold one stream in
		}
	}
	return true
}

// holdsNothing reports whether st can be forgotten without a loss: it holds no record, no
// fragment, no record dropped or announced that is still to be reported, and does not wait for
// its start.
func (r *ReceiverCore) holdsNothing(st *rstream) bool {
	if len(st.held) > 0 || len(st.frags) > 0 || st.dropMin != 0 || st.queued {
		return false
	}
	if !st.known || !st.wanted {
		return true
	}
	return st.started && st.tail < st.expected && st.top < st.expected
}

// evict forgets st (the table is full), reporting what it would lose.
func (r *ReceiverCore) evict(st *rstream) {
	r.c.StreamsEvicted++
	var g ghost
	switch {
	case st.known && st.wanted:
		r.flushStream(st, ReasonExpired)
		g.resume, g.floor = st.expected, st.floor
	case !st.known:
		if m, _, ok := r.lowest(st); ok {
			g.drop, g.top = m, st.top
		}
		r.unhold(st)
	}
	if g != (ghost{}) {
		if r.ghosts == nil {
			r.ghosts = make(map[uint32]ghost)
		}
		r.ghosts[st.id] = g
		r.ghostq = append(r.ghostq, st.id)
		for len(r.ghosts) > MaxStreams || len(r.ghostq) > 2*MaxStreams {
			// The oldest ghost (or a stale entry) goes. One of a stream no CATALOG named
			// reports what it dropped now: it could not be reported later.
			id := r.ghostq[0]
			if og, ok := r.ghosts[id]; ok && og.drop != 0 {
				r.unnamedGap(id, og.drop, og.top, ReasonExpired)
			}
			delete(r.ghosts, id)
			r.ghostq = r.ghostq[1:]
		}
	}
	delete(r.streams, st.id)
	last := r.slist[len(r.slist)-1]
	r.slist[st.idx], last.idx = last, st.idx
	r.slist[len(r.slist)-1] = nil
	r.slist = r.slist[:len(r.slist)-1]
	r.unlink(st)
	r.bytes -= streamOverhead
	if st.known {
		r.bytes -= len(st.topic)
	}
	// The waiting list and the gap queue may still name it: nothing more to do for it there.
	st.known, st.wanted, st.started = true, false, true
}

func (r *ReceiverCore) catalog(entries []CatalogEntry) {
	for _, e := range entries {
		st := r.streams[e.Stream] // a periodic CATALOG names every stream: not activity
		if st == nil {
			st = r.newStream(e.Stream, true)
		}
		if st == nil {
			r.c.Overflow++
			continue
		}
		if st.known {
			if e.Topic != st.topic {
				r.conflict(st, e)
			}
			continue
		}
		if r.bytes+len(e.Topic) > r.cfg.MaxBytes {
			r.c.Overflow++
			continue
		}
		r.bytes += len(e.Topic)
		st.known, st.topic = true, e.Topic
		r.touch(st)
		st.wanted = r.cfg.Filter == nil || r.cfg.Filter(e.Topic)
		if !st.wanted {
			r.unhold(st)
			continue
		}
		if st.resume != 0 {
			r.resumeStream(st)
			continue
		}
		r.start(st, e.First)
	}
}

// resumeStream goes on with a stream evicted from a full table that came back: from where it
// was (what it held below that was delivered already).
func (r *ReceiverCore) resumeStream(st *rstream) {
	st.started, st.expected = true, st.resume
	for q, h := range st.held {
		if q < st.expected {
			r.bytes -= len(h.payload) + heldOverhead
			st.del(q)
			r.c.Duplicates++
		}
	}
	r.dropPartials(st, st.expected-1)
	if st.dropMin != 0 && st.dropMin < st.expected {
		st.dropMin = 0
	}
	r.drain(st)
	r.lossPassed = true
}

// start decides where a wanted stream that a CATALOG entry (first: its first datagram) just
// named starts.
func (r *ReceiverCore) start(st *rstream, first uint64) {
	if first >= r.join {
		st.started, st.expected = true, 1 // we were there when it began
		if st.dropMin != 0 {
			r.lossPassed = true
		}
		r.drain(st) // held records were kept raw; turn them into deliveries in order
		r.lossPassed = r.lossPassed || r.lossEver
		return
	}
	if !r.tryStart(st) {
		r.waiting = append(r.waiting, st)
	}
}

// conflict handles a CATALOG entry naming a known stream id with another topic. The sender
// never renames a stream, so one of the two is forged (without a key); which one cannot be told.
// It is counted, and the stream is delivered if either name matches the filter: a stream the
// first name made unwanted becomes wanted under the later one, and what it showed while its
// records were dropped as unwanted is reported as a gap. A forged entry can thus make a stream
// be delivered (as it can inject messages), never silence one.
func (r *ReceiverCore) conflict(st *rstream, e CatalogEntry) {
	r.c.CatalogConflicts++
	if st.wanted || !r.cfg.Filter(e.Topic) {
		return
	}
	if r.bytes+len(e.Topic)-len(st.topic) > r.cfg.MaxBytes {
		r.c.Overflow++
		return
	}
	r.bytes += len(e.Topic) - len(st.topic)
	st.topic, st.wanted = e.Topic, true
	if st.top == 0 {
		r.start(st, e.First) // nothing dropped yet
		return
	}
	from := uint64(1)
	if e.First < r.join {
		from = st.low // it began before the join: what came before its first record is not ours
	}
	st.started, st.expected = true, from
	r.gap(st, from, st.top, ReasonExpired)
	st.expected = st.top + 1
}

// unhold drops every record st holds, and its fragments.
func (r *ReceiverCore) unhold(st *rstream) {
	for _, h := range st.held {
		r.bytes -= len(h.payload) + heldOverhead
	}
	clear(st.held)
	st.hminOK = false
	r.dropPartials(st, math.MaxUint64)
}

// fragment takes one fragment record of datagram dg into its message's reassembly. It returns
// the partial when the message is complete (taken out of the stream's reassemblies: the caller
// delivers it like a record), else nil. A fragment that contradicts the others or the protocol's
// bounds is dropped and counted (ForgedFragments); a message whose fragments do not fit
// MaxReassembly is dropped, and its stream sequence becomes a hole reported as a Gap.
func (r *ReceiverCore) fragment(st *rstream, rec *Record, dg uint64, repaired bool) *partial {
	if st == nil {
		r.c.Overflow++ // the stream table is full
		return nil
	}
	if st.known && !st.wanted {
		return nil
	}
	if _, ok := st.held[rec.Seq]; ok || (st.started && rec.Seq < st.expected) {
		if !st.started || !r.belowFloor(st, rec.Seq, dg) {
			r.c.Duplicates++
		}
		return nil
	}
	n := uint64(len(rec.Payload))
	if rec.Total == 0 || rec.Total > MaxMessage || n == 0 || uint64(rec.Offset)+n > uint64(rec.Total) {
		r.c.ForgedFragments++
		return nil
	}
	st.seen(rec.Seq)
	pa := st.frags[rec.Seq]
	if pa == nil {
		if !r.reassemblyRoom(partialOverhead, nil) {
			r.c.ReassemblyDrops++
			r.c.Overflow++
			r.dropped(st, rec.Seq)
			return nil
		}
		if st.frags == nil {
			st.frags = make(map[uint64]*partial)
		}
		pa = &partial{total: rec.Total}
		st.frags[rec.Seq] = pa
		r.nparts++
		r.pfifo = append(r.pfifo, pentry{st, rec.Seq, pa})
		r.fbytes += partialOverhead
		if !st.known && r.catDue.IsZero() {
			r.catDue = r.now.Add(r.backoff())
			r.setDue(r.catDue)
		}
	}
	if pa.dropped {
		return nil
	}
	if rec.Total != pa.total {
		r.c.ForgedFragments++
		return nil
	}
	// The pieces are sorted by offset and never overlap: find where this one goes.
	i, _ := slices.BinarySearchFunc(pa.pieces, rec.Offset, func(p piece, off uint32) int {
		return cmpU32(p.off, off)
	})
	if i < len(pa.pieces) && pa.pieces[i].off == rec.Offset && uint64(len(pa.pieces[i].data)) == n {
		r.c.Duplicates++ // the same fragment again
		return nil
	}
	if (i > 0 && uint64(pa.pieces[i-1].off)+uint64(len(pa.pieces[i-1].data)) > uint64(rec.Offset)) ||
		(i < len(pa.pieces) && uint64(rec.Offset)+n > uint64(pa.pieces[i].off)) {
		r.c.ForgedFragments++ // overlaps another fragment
		return nil
	}
	// In the usual case the fragments come in order: the last piece grows (its capacity at most
	// what is left of the message), so a message costs one buffer, not one per fragment.
	grow := i == len(pa.pieces) && i > 0 && uint64(pa.pieces[i-1].off)+uint64(len(pa.pieces[i-1].data)) == uint64(rec.Offset)
	var newCap int
	cost := min(16*int(n), int(pa.total-rec.Offset)) + pieceOverhead
	if grow {
		last := pa.pieces[i-1].data
		newCap = cap(last)
		if need := len(last) + int(n); need > newCap {
			newCap = min(max(4*newCap, need), int(pa.total-pa.pieces[i-1].off))
		}
		cost = newCap - cap(last)
	}
	if !r.reassemblyRoom(cost, pa) {
		// It cannot fit: drop the whole message (a gap), keep a marker so its other fragments
		// do not start it again.
		r.c.ReassemblyDrops++
		r.c.Overflow++
		r.freePieces(pa)
		pa.dropped = true
		r.dropped(st, rec.Seq)
		return nil
	}
	r.c.Fragments++
	r.fbytes += cost
	if grow {
		last := &pa.pieces[i-1]
		if newCap > cap(last.data) {
			d := make([]byte, len(last.data), newCap)
			copy(d, last.data)
			last.data = d
		}
		last.data = append(last.data, rec.Payload...)
	} else {
		pa.pieces = slices.Insert(pa.pieces, i, piece{off: rec.Offset, data: rec.Payload[:0:0]})
		p := &pa.pieces[i]
		// Room for 16 such fragments (at most the rest of the message): what a fragment claims
		// makes the receiver allocate at most 16 times its size.
		c := min(16*int(n), int(pa.total-rec.Offset))
		p.data = append(make([]byte, 0, c), rec.Payload...)
	}
	pa.have += uint32(n)
	pa.dg = max(pa.dg, dg)
	pa.repaired = pa.repaired || repaired
	if pa.have != pa.total {
		return nil
	}
	// Complete: the pieces do not overlap and sum to total, so they cover it exactly.
	r.freePieces(pa)
	r.fbytes -= partialOverhead
	delete(st.frags, rec.Seq)
	r.nparts--
	r.c.Reassembled++
	return pa
}

// reassemblyRoom makes room for cost more bytes of reassembly by evicting the partials started
// before the others (keep, the one asking, is never evicted): a burst of forged fragments
// cannot hold the reassembly for ever. An evicted message is dropped and reported as a gap of its
// stream sequence. It reports whether cost fits.
func (r *ReceiverCore) reassemblyRoom(cost int, keep *partial) bool {
	for r.fbytes+cost > r.cfg.MaxReassembly && len(r.pfifo) > 0 {
		e := r.pfifo[0]
		if e.pa == keep {
			if len(r.pfifo) == 1 {
				break
			}
			r.pfifo = append(r.pfifo[1:], e) // keep its place behind the others
			continue
		}
		r.pfifo[0] = pentry{}
		r.pfifo = r.pfifo[1:]
		if e.st.frags[e.seq] != e.pa {
			continue // completed or forgotten already
		}
		if !e.pa.dropped {
			r.c.ReassemblyDrops++
			r.c.Overflow++
			r.dropped(e.st, e.seq)
		}
		e.pa.dropped = true
		r.freePieces(e.pa)
		r.fbytes -= partialOverhead
		delete(e.st.frags, e.seq)
		r.nparts--
	}
	if len(r.pfifo) > 2*r.nparts+64 { // drop the entries of partials that are gone
		live := r.pfifo[:0]
		for _, e := range r.pfifo {
			if e.st.frags[e.seq] == e.pa {
				live = append(live, e)
			}
		}
		clear(r.pfifo[len(live):])
		r.pfifo = live
	}
	return r.fbytes+cost <= r.cfg.MaxReassembly
}

func cmpU32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// assemble returns the message of a complete partial.
func (pa *partial) assemble() []byte {
	if len(pa.pieces) == 1 {
		return pa.pieces[0].data // fragments in order: already whole
	}
	b := make([]byte, pa.total)
	for _, p := range pa.pieces {
		copy(b[p.off:], p.data)
	}
	return b
}

// freePieces gives back the accounting of pa's pieces (the pieces stay for assemble).
func (r *ReceiverCore) freePieces(pa *partial) {
	for _, p := range pa.pieces {
		r.fbytes -= cap(p.data) + pieceOverhead
	}
	if pa.dropped || pa.have != pa.total {
		pa.pieces = nil
	}
}

// dropPartials forgets the reassemblies of st up to stream sequence upTo: their sequence was
// delivered or reported as a gap.
func (r *ReceiverCore) dropPartials(st *rstream, upTo uint64) {
	for q, pa := range st.frags {
		if q <= upTo {
			r.freePieces(pa)
			r.fbytes -= partialOverhead
			delete(st.frags, q)
			r.nparts--
		}
	}
}

// dropped notes that record seq of st was dropped for want of room: a hole of the stream that
// resolve reports as a gap (reason expired unless a datagram loss says otherwise).
func (r *ReceiverCore) dropped(st *rstream, seq uint64) {
	st.seen(seq)
	if !st.started && (st.dropMin == 0 || seq < st.dropMin) {
		st.dropMin = seq
	}
	r.lossPassed, r.lossEver = true, true
	if r.lossReason == 0 {
		r.lossReason = ReasonExpired
	}
	if st.started {
		r.await(st)
	}
}

// hold keeps a record for later; when it does not fit in MaxBytes it is dropped: a hole in the
// stream that resolve reports as a gap.
func (r *ReceiverCore) hold(st *rstream, seq uint64, h held) {
	cost := len(h.payload) + heldOverhead
	if r.bytes+cost > r.cfg.MaxBytes {
		r.c.Overflow++
		r.dropped(st, seq)
		return
	}
	r.bytes += cost
	st.put(seq, h)
}

// record handles one record of datagram dg. owned: payload is the core's own (a reassembled
// message), kept and delivered without a copy; else it aliases the datagram.
func (r *ReceiverCore) record(st *rstream, seq, dg uint64, payload []byte, repaired, owned bool) {
	if st == nil {
		r.c.Overflow++ // the stream table is full
		return
	}
	st.seen(seq)
	if !st.known || (st.wanted && !st.started) {
		if !st.known && r.catDue.IsZero() {
			r.catDue = r.now.Add(r.backoff())
			r.setDue(r.catDue)
		}
		if _, ok := st.held[seq]; !ok {
			r.hold(st, seq, held{dg: dg, payload: keepPayload(payload, owned), repaired: repaired})
		}
		return
	}
	if !st.wanted {
		return
	}
	if seq < st.expected {
		if !r.belowFloor(st, seq, dg) {
			r.c.Duplicates++
		}
		return
	}
	if st.holds(seq) {
		r.c.Duplicates++
		return
	}
	if seq == st.expected {
		r.deliver(st, seq, payload, repaired, owned)
		st.expected++
		r.drain(st)
		return
	}
	if r.cfg.Mode == Skip {
		if r.bytes+heldOverhead > r.cfg.MaxBytes {
			r.hold(st, seq, held{dg: dg, delivered: true}) // no room: dropped, a gap later
			return
		}
		r.deliver(st, seq, payload, repaired, owned)
		r.hold(st, seq, held{dg: dg, delivered: true})
		r.await(st)
		return
	}
	r.hold(st, seq, held{dg: dg, payload: keepPayload(payload, owned), repaired: repaired})
	r.await(st)
}

// belowFloor reports a record of datagram dg after the join point below where a HISTORY answer
// started st (a forged answer: the sender's records after the join are above it) as a gap from
// it up to the floor, which it lowers: it cannot be delivered in order any more, and is never
// dropped silently. It reports whether it did.
func (r *ReceiverCore) belowFloor(st *rstream, seq, dg uint64) bool {
	if seq >= st.floor || dg < r.join {
		return false
	}
	r.gap(st, seq, st.floor-1, ReasonExpired)
	st.floor = seq
	return true
}

// drain delivers held records from st.expected on.
func (r *ReceiverCore) drain(st *rstream) {
	for st.holds(st.expected) {
		h := st.held[st.expected]
		st.del(st.expected)
		r.bytes -= len(h.payload) + heldOverhead
		if !h.delivered {
			r.deliver(st, st.expected, h.payload, h.repaired, true) // held payloads are copies
		}
		st.expected++
	}
}

// deliver hands out one message; owned: payload is the core's own and no longer used, so the
// body needs no copy.
func (r *ReceiverCore) deliver(st *rstream, seq uint64, payload []byte, repaired, owned bool) {
	hs, body, err := DecodeMessage(payload)
	if err != nil {
		r.c.Malformed++
		r.gap(st, seq, seq, ReasonGone)
		return
	}
	if len(st.frags) > 0 && seq == st.expected {
		// In order: nothing below it can still be reassembled (skip mode delivers ahead of
		// holes whose fragments may still come).
		r.dropPartials(st, seq)
	}
	if !owned {
		body = clone(body)
	}
	r.c.Messages++
	r.events = append(r.events, Message{Topic: st.topic, Stream: st.id, StreamSeq: seq, Headers: hs,
		Body: body, Repaired: repaired, Session: r.session})
}

// retryWait is how long after its tries-th NAK a missing datagram is asked for again: the
// profile's retry interval, doubling, capped at a quarter of the budget; while the receiver is
// behind its socket, that quarter at once. The answer to the last NAK may then wait unread among
// the datagrams, and asking again soon only spends the sender's repair budget for this receiver
// on duplicates (a receiver 30 ms behind asked 3-4 times for each hole, the sender refused the
// rest of its NAKs, and holes went unrepaired until the leading edge ran MaxHole past them).
func (r *ReceiverCore) retryWait(tries int) time.Duration {
	if r.behind {
		return r.t.budget / 4
	}
	return min(r.t.nakRetry<<min(tries-1, 16), r.t.budget/4)
}

// Tick sends due NAKs and gives up on what has run out of time. A missing sequence is given up
// once the profile's budget has passed since its first NAK (while the receiver is not behind
// its socket); retries back off as retryWait says.
func (r *ReceiverCore) Tick(now time.Time) {
	if r.nextDue.IsZero() || now.Before(r.nextDue) {
		return
	}
	r.now = now
	r.keys = sortedKeys(r.miss, r.keys)
	var ask []uint64
	r.nextDue = time.Time{}
	bo := r.backoff() // one draw per Tick: what is NAKed together stays together
	if len(r.lj.hist) > 0 {
		// History datagrams (below the join point, so before every other sequence): NAKed
		// and given up like any missing datagram.
		hk := sortedKeys(r.lj.hist, nil)
		for _, q := range hk {
			m := r.lj.hist[q]
			if m == nil {
				continue // the late join ended on the way
			}
			if now.Before(m.due) {
				r.setDue(m.due)
				continue
			}
			if !m.giveUp.IsZero() && !now.Before(m.giveUp) {
				if !r.behind && !r.repairing(now) {
					r.histLose(q, ReasonExpired)
					r.c.BudgetExpired++
					continue
				}
				m.giveUp = now.Add(4 * r.t.nakRetry)
			}
			ask = append(ask, q)
			if m.giveUp.IsZero() {
				m.giveUp = now.Add(r.t.budget)
			}
			m.tries++
			m.due = now.Add(r.retryWait(m.tries) + bo)
			if m.due.After(m.giveUp) {
				m.due = m.giveUp
			}
			r.setDue(m.due)
		}
	}
	for _, q := range r.keys {
		m := r.miss[q]
		if now.Before(m.due) {
			r.setDue(m.due)
			continue
		}
		if !m.giveUp.IsZero() && !now.Before(m.giveUp) {
			if !r.behind && !r.repairing(now) {
				r.lose(q, ReasonExpired)
				r.c.BudgetExpired++
				continue
			}
			// The repair may wait unread in the socket, or come once the sender has
			// repaired what it was asked before.
			m.giveUp = now.Add(4 * r.t.nakRetry)
		}
		ask = append(ask, q)
		if m.giveUp.IsZero() {
			m.giveUp = now.Add(r.t.budget)
		}
		m.tries++
		m.due = now.Add(r.retryWait(m.tries) + bo)
		if m.due.After(m.giveUp) {
			m.due = m.giveUp
		}
		r.setDue(m.due)
	}
	if len(ask) > 0 && r.src.IsValid() {
		rs := toRanges(nil, ask)
		for len(rs) > 0 {
			k := min(len(rs), maxRanges)
			r.sendNAK(rs[:k])
			r.c.NAKs++
			rs = rs[k:]
		}
		r.c.NAKedSeqs += uint64(len(ask))
	}
	if r.lj.pending {
		if !now.Before(r.lj.due) && r.src.IsValid() {
			if r.lj.since.IsZero() {
				r.lj.since = now
			}
			if now.Sub(r.lj.since) >= r.historyWait() {
				r.c.HistoryUnanswered++ // an older sender, or the answers were lost: no history
				r.ljFinish()
			} else {
				r.sendHistoryRequest()
				r.lj.due = now.Add(historyRetry)
			}
		}
		if r.lj.pending {
			r.setDue(r.lj.due)
		}
	}
	if !r.catDue.IsZero() {
		switch {
		case !r.unknownStreams():
			r.catDue = time.Time{}
		case !now.Before(r.catDue) && r.src.IsValid():
			r.sendNAK([]Range{{0, 0}}) // sequence 0: "send the catalog"
			r.c.CatalogRequests++
			r.catDue = now.Add(r.t.ncfWait + r.backoff())
			fallthrough
		default:
			r.setDue(r.catDue)
		}
	}
	r.advance()
}

func minKey[V any](m map[uint64]V) uint64 {
	first, k := true, uint64(0)
	for q := range m {
		if first || q < k {
			k, first = q, false
		}
	}
	return k
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// keepPayload is payload to hold: itself when the core owns it, else a copy.
func keepPayload(payload []byte, owned bool) []byte {
	if owned {
		return payload
	}
	return clone(payload)
}
