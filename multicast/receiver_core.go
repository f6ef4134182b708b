package multicast

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"
)

// ReceiverCoreConfig configures a ReceiverCore.
type ReceiverCoreConfig struct {
	Profile Profile
	Mode    Mode
	Filter  func(topic string) bool // nil: every topic
	Auth    *Auth                   // nil: no HMAC
	Rand    *rand.Rand              // required: NAK back-off and receiver id
	ID      uint64                  // receiver id carried in NAKs; 0 = random
}

// ReceiverCounters are the ReceiverCore's counts.
type ReceiverCounters struct {
	Datagrams, Bytes uint64
	Duplicates       uint64
	Malformed        uint64
	AuthFailures     uint64
	Replays          uint64 // out-of-window sequences and datagrams of superseded sessions
	NAKs             uint64 // NAK datagrams sent
	NAKedSeqs        uint64 // sequences asked for (counting repeats)
	CatalogRequests  uint64 // NAKs for sequence 0: records of an unknown stream arrived
	NCFs             uint64
	Repairs          uint64 // RDATA datagrams that filled a hole
	Messages         uint64
	Gaps             uint64
	GapMessages      uint64 // messages covered by gaps
	LostDatagrams    uint64
	Sessions         uint64
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
	expected uint64 // next stream sequence to deliver
	held     map[uint64]held
	tail     uint64 // last stream sequence announced by a HEARTBEAT...
	tailAt   uint64 // ...whose leading edge was this
}

// ReceiverCore is the sans-IO receiver: datagrams in (Handle), time in (Tick), events and NAKs out
// (Ready). It detects gaps, NAKs after a random back-off unless an NCF or repair is heard, gives up
// after the profile's retries or budget, and turns every loss into an in-order Gap. Not safe for
// concurrent use.
//
// The caller's duties:
//  1. Call Handle with every datagram received on the group, with the source address.
//  2. Call Tick at Deadline (or earlier; a zero Deadline means none is due).
//  3. After each call, take Ready: hand the events to the application in order and send each
//     Outgoing datagram by unicast UDP.
type ReceiverCore struct {
	cfg ReceiverCoreConfig
	t   timing
	id  uint64

	session uint64
	joined  bool
	join    uint64
	next    uint64          // every sequence below next is resolved (received or lost)
	leading uint64          // highest sequence known to exist
	done    map[uint64]bool // resolved sequences >= next: false received, true lost
	miss    map[uint64]*missing
	nextDue time.Time
	src     netip.AddrPort

	lossPassed bool // the frontier moved past a lost sequence: look for stream gaps
	lossEver   bool
	lossReason Reason

	streams map[uint32]*rstream
	slist   []*rstream
	retired []uint64
	nakSeq  uint64
	now     time.Time // of the call in progress
	catDue  time.Time // when to ask for the catalog (records of unknown streams are held)

	events []Event
	out    []Outgoing
	pkt    Packet
	keys   []uint64
	c      ReceiverCounters
}

// youngSession: a receiver that first hears a session at or below this sequence, while the sender
// still holds sequence 1, recovers the session from its start instead of joining late.
const youngSession = 64

// NewReceiverCore returns a receiver that joins whatever session it hears first.
func NewReceiverCore(cfg ReceiverCoreConfig) (*ReceiverCore, error) {
	if cfg.Rand == nil {
		return nil, fmt.Errorf("receiver core: nil Rand: %w", ErrBadConfig)
	}
	if err := cfg.Profile.validate(); err != nil {
		return nil, err
	}
	r := &ReceiverCore{cfg: cfg, t: cfg.Profile.timing(), id: cfg.ID}
	for r.id == 0 {
		r.id = cfg.Rand.Uint64()
	}
	r.reset()
	return r, nil
}

func (r *ReceiverCore) reset() {
	r.joined = false
	r.done = make(map[uint64]bool)
	r.miss = make(map[uint64]*missing)
	r.streams = make(map[uint32]*rstream)
	r.slist = nil
	r.nextDue = time.Time{}
	r.lossPassed, r.lossEver = false, false
}

// ID is the receiver id sent in NAKs.
func (r *ReceiverCore) ID() uint64 { return r.id }

// Session is the current session id (0 before the first datagram).
func (r *ReceiverCore) Session() uint64 { return r.session }

// Counters returns the counts so far.
func (r *ReceiverCore) Counters() ReceiverCounters { return r.c }

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
		if !st.known && len(st.held) > 0 {
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
	r.out = append(r.out, Outgoing{To: r.src, B: r.cfg.Auth.Sign(b)})
}

// Handle processes one datagram from the group (or a unicast from the sender).
func (r *ReceiverCore) Handle(now time.Time, from netip.AddrPort, b []byte) error {
	if !r.cfg.Auth.Verify(b) {
		r.c.AuthFailures++
		return ErrAuth
	}
	p := &r.pkt
	if err := Decode(b, p); err != nil {
		r.c.Malformed++
		return err
	}
	if p.Type == TypeNAK {
		return nil // another receiver's NAK: not for us
	}
	r.c.Datagrams++
	r.c.Bytes += uint64(len(b))
	r.now = now
	if p.Type.Sequenced() && (p.Seq < p.Trailing || p.Seq-p.Trailing > 1<<24 || p.Seq == 0) {
		r.c.Replays++
		return nil
	}
	if !r.joined || p.Session != r.session {
		if p.Flags&FlagRepair != 0 {
			return nil // a repair for others is no place to start a session
		}
		if slices.Contains(r.retired, p.Session) ||
			(r.joined && r.cfg.Auth != nil && p.Session>>32 < r.session>>32) {
			r.c.Replays++
			return nil
		}
		r.switchSession(p)
	}
	r.src = from
	r.trail(p.Trailing)
	switch p.Type {
	case TypeData, TypeRData, TypeCatalog:
		seq := p.Seq
		if _, ok := r.done[seq]; ok || seq < r.next || (seq <= r.leading && r.miss[seq] == nil) {
			r.c.Duplicates++
			return nil
		}
		r.learn(now, seq-1)
		if m := r.miss[seq]; m != nil {
			delete(r.miss, seq)
			r.c.Repairs++
		}
		if seq > r.leading {
			r.leading = seq
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
				r.record(r.stream(rec.Stream), rec.Seq, seq, rec.Payload, repaired)
			}
		}
	case TypeHeartbeat:
		r.learn(now, p.Leading)
		for _, s := range p.Streams {
			st := r.stream(s.Stream)
			if s.Seq >= st.tail {
				st.tail, st.tailAt = s.Seq, p.Leading
			}
		}
		r.lossPassed = r.lossPassed || r.lossEver
	case TypeNCF:
		r.c.NCFs++
		r.learn(now, p.Seq)
		for _, rg := range p.Ranges {
			r.eachMissing(rg, func(q uint64, m *missing) {
				switch p.Status {
				case NCFWillSend:
					m.ncf, m.due = true, now.Add(r.t.ncfWait+r.backoff())
				case NCFDelayed:
					m.ncf, m.due = true, now.Add(4*r.t.ncfWait+r.backoff())
				case NCFGone:
					r.lose(q, ReasonGone)
				}
			})
		}
	case TypeLoss:
		r.learn(now, p.Seq)
		reason := p.Reason
		if reason == 0 || reason > ReasonSlowConsumer {
			reason = ReasonGone
		}
		for _, rg := range p.Ranges {
			r.eachMissing(rg, func(q uint64, _ *missing) { r.lose(q, reason) })
		}
	}
	r.advance()
	return nil
}

// eachMissing calls f for the missing sequences in rg, in order.
func (r *ReceiverCore) eachMissing(rg Range, f func(uint64, *missing)) {
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

func (r *ReceiverCore) switchSession(p *Packet) {
	old := r.session
	if r.joined {
		r.flushSession()
		r.retired = append(r.retired, old)
		if len(r.retired) > 8 {
			r.retired = r.retired[1:]
		}
	}
	r.reset()
	r.session, r.joined = p.Session, true
	r.c.Sessions++
	r.events = append(r.events, SessionChange{Old: old, New: p.Session})
	first := p.Seq // a sequenced datagram: start with it
	if !p.Type.Sequenced() {
		first = p.Seq + 1 // control datagrams carry the leading edge: start after it
	}
	if p.Trailing <= 1 && first <= youngSession {
		first = 1 // we were there (or nearly) when it began: recover the session from its start
	}
	r.join, r.next, r.leading = first, first, first-1
}

// flushSession delivers what the old session left, with gaps for its holes.
func (r *ReceiverCore) flushSession() {
	for _, st := range r.slist {
		if !st.known || !st.wanted || !st.started {
			continue
		}
		for len(st.held) > 0 {
			m := minKey(st.held)
			if m > st.expected {
				r.gap(st, st.expected, m-1, ReasonSessionRestart)
				st.expected = m
			}
			r.drain(st)
		}
		if st.tail >= st.expected {
			r.gap(st, st.expected, st.tail, ReasonSessionRestart)
			st.expected = st.tail + 1
		}
	}
}

// trail applies the sender's trailing edge: anything older that is still missing is gone.
func (r *ReceiverCore) trail(t uint64) {
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
		r.lossReason, r.lossEver, r.lossPassed = ReasonGone, true, true
	}
	r.next = t
	if r.leading < t-1 {
		r.leading = t - 1
	}
}

// learn records that every sequence up to l exists: the unseen ones are missing.
func (r *ReceiverCore) learn(now time.Time, l uint64) {
	if l <= r.leading {
		return
	}
	from := r.leading + 1
	r.leading = l
	if l-from > 1<<18 { // far too many to NAK: give the oldest up at once
		cut := l - 1<<18
		for q := from; q < cut; q++ {
			r.done[q] = true
		}
		r.c.LostDatagrams += cut - from
		r.lossReason, r.lossEver = ReasonExpired, true
		from = cut
	}
	// One back-off for the whole hole found at once, so a burst costs one NAK with one range.
	due := now.Add(r.backoff())
	for q := from; q <= l; q++ {
		r.miss[q] = &missing{detected: now, due: due}
	}
	if r.nextDue.IsZero() || due.Before(r.nextDue) {
		r.nextDue = due
	}
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
}

// advance moves the frontier over resolved sequences and reports stream gaps it uncovers.
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
	if r.lossPassed {
		r.lossPassed = false
		for _, st := range r.slist {
			r.resolve(st)
		}
	}
}

// resolve reports the holes of st that the frontier proves lost.
func (r *ReceiverCore) resolve(st *rstream) {
	if !st.known || !st.wanted || !st.started {
		return
	}
	for len(st.held) > 0 {
		m := minKey(st.held)
		h := st.held[m]
		if m <= st.expected || h.dg >= r.next {
			break
		}
		r.gap(st, st.expected, m-1, r.lossReason)
		st.expected = m
		r.drain(st)
	}
	if len(st.held) == 0 && st.tail >= st.expected && st.tailAt < r.next {
		r.gap(st, st.expected, st.tail, r.lossReason)
		st.expected = st.tail + 1
	}
}

func (r *ReceiverCore) gap(st *rstream, from, to uint64, reason Reason) {
	r.c.Gaps++
	r.c.GapMessages += to - from + 1
	r.events = append(r.events, Gap{Topic: st.topic, Stream: st.id, From: from, To: to, Reason: reason, Session: r.session})
}

func (r *ReceiverCore) stream(id uint32) *rstream {
	st := r.streams[id]
	if st == nil {
		st = &rstream{id: id, held: make(map[uint64]held)}
		r.streams[id] = st
		r.slist = append(r.slist, st)
	}
	return st
}

func (r *ReceiverCore) catalog(entries []CatalogEntry) {
	for _, e := range entries {
		st := r.stream(e.Stream)
		if st.known {
			continue
		}
		st.known, st.topic = true, e.Topic
		st.wanted = r.cfg.Filter == nil || r.cfg.Filter(e.Topic)
		if !st.wanted {
			clear(st.held)
			continue
		}
		switch {
		case e.First >= r.join:
			st.started, st.expected = true, 1 // we were there when it began
		case len(st.held) > 0:
			st.started, st.expected = true, minKey(st.held) // late join
		}
		if st.started {
			// Held records were kept raw; turn them into deliveries in order.
			r.drain(st)
			r.lossPassed = r.lossPassed || r.lossEver
		}
	}
}

// record handles one record of datagram dg.
func (r *ReceiverCore) record(st *rstream, seq, dg uint64, payload []byte, repaired bool) {
	if !st.known {
		if r.catDue.IsZero() {
			r.catDue = r.now.Add(r.backoff())
			r.setDue(r.catDue)
		}
		if _, ok := st.held[seq]; !ok && len(st.held) < 1<<14 {
			st.held[seq] = held{dg: dg, payload: clone(payload), repaired: repaired}
		}
		return
	}
	if !st.wanted {
		return
	}
	if !st.started {
		st.started, st.expected = true, seq
	}
	if seq < st.expected {
		r.c.Duplicates++
		return
	}
	if _, ok := st.held[seq]; ok {
		r.c.Duplicates++
		return
	}
	if seq == st.expected {
		r.deliver(st, seq, payload, repaired)
		st.expected++
		r.drain(st)
		return
	}
	if r.cfg.Mode == Skip {
		r.deliver(st, seq, payload, repaired)
		st.held[seq] = held{dg: dg, delivered: true}
		return
	}
	st.held[seq] = held{dg: dg, payload: clone(payload), repaired: repaired}
}

// drain delivers held records from st.expected on.
func (r *ReceiverCore) drain(st *rstream) {
	for len(st.held) > 0 {
		h, ok := st.held[st.expected]
		if !ok {
			return
		}
		delete(st.held, st.expected)
		if !h.delivered {
			r.deliver(st, st.expected, h.payload, h.repaired)
		}
		st.expected++
	}
}

func (r *ReceiverCore) deliver(st *rstream, seq uint64, payload []byte, repaired bool) {
	hs, body, err := DecodeMessage(payload)
	if err != nil {
		r.c.Malformed++
		r.gap(st, seq, seq, ReasonGone)
		return
	}
	r.c.Messages++
	r.events = append(r.events, Message{Topic: st.topic, Stream: st.id, StreamSeq: seq, Headers: hs,
		Body: clone(body), Repaired: repaired, Session: r.session})
}

// Tick sends due NAKs and gives up on what has run out of retries or time.
func (r *ReceiverCore) Tick(now time.Time) {
	if r.nextDue.IsZero() || now.Before(r.nextDue) {
		return
	}
	r.keys = sortedKeys(r.miss, r.keys)
	var ask []uint64
	r.nextDue = time.Time{}
	for _, q := range r.keys {
		m := r.miss[q]
		if now.Before(m.due) {
			if r.nextDue.IsZero() || m.due.Before(r.nextDue) {
				r.nextDue = m.due
			}
			continue
		}
		if m.tries >= r.t.nakTries || now.Sub(m.detected) >= r.t.budget {
			r.lose(q, ReasonExpired)
			continue
		}
		ask = append(ask, q)
		m.tries++
		m.due = now.Add(r.t.nakRetry<<min(m.tries-1, 6) + r.backoff()) // 4, 8, 16 ms...: a busy sender is not flooded
		if r.nextDue.IsZero() || m.due.Before(r.nextDue) {
			r.nextDue = m.due
		}
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
