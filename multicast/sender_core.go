package multicast

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"
)

// Catalog defaults (docs/multicast-protocol.md, section 3, "Catalog").
const (
	DefaultStreamIdle = 10 * time.Minute // a stream idle this long (data out of the window) is forgotten
	DefaultMaxStreams = 100000           // streams remembered; least recently used forgotten early
)

// SenderCoreConfig configures a SenderCore. Zero values take the defaults.
type SenderCoreConfig struct {
	Profile    Profile
	MTU        int   // payload bytes per datagram (header and tag included), default DefaultMTU
	Window     int   // retransmit window in bytes, default DefaultWindow
	RateLimit  int64 // bytes per second of original data, 0 = unlimited
	RepairRate int64 // bytes per second of repairs, default DefaultRepairRate
	// SourceRepairRate is the repair budget of one NAK source (an IP address) in bytes per
	// second, default RepairRate/4: one host cannot take the whole repair budget.
	SourceRepairRate int64
	NAKSources       int // NAK sources tracked, default DefaultNAKSources (least recently heard evicted)
	CatalogInterval  time.Duration
	// StreamIdle: a stream with no message for this long, whose last record has left the window,
	// leaves the catalog and is forgotten (the topic's next message starts a new stream, with a
	// new id, from stream sequence 1). Default DefaultStreamIdle.
	StreamIdle time.Duration
	// MaxStreams bounds the streams the sender remembers: past it, the least recently used
	// stream whose data has left the window is forgotten at once (as after StreamIdle). Streams
	// with data in the window are never forgotten, so the bound is MaxStreams or what the window
	// holds, whichever is more. Default DefaultMaxStreams.
	MaxStreams int
	Auth       *Auth // nil: no HMAC
	// Seal: seal every datagram sent (section 6, "Sealing") instead of signing it; NAKs are
	// still verified with Auth (the same key's HMAC).
	Seal *Sealer
	// PrevAuth: NAKs signed with this key (the one used before a rotation) are accepted too.
	PrevAuth *Auth
	Rand     *rand.Rand // required: session id, nothing else
	Start    time.Time  // the sender's start; its unix seconds go into the session id
}

// SenderCounters are the SenderCore's own counts (the shell adds socket counts).
type SenderCounters struct {
	Datagrams, Bytes     uint64 // everything handed out by Ready
	DataDatagrams        uint64
	Messages             uint64
	Fragmented           uint64 // messages sent as fragments (too large for one datagram)
	Fragments            uint64 // fragment datagrams (originals)
	Heartbeats           uint64
	Catalogs             uint64
	CatalogBytes         uint64 // CATALOG datagrams queued (original, not repairs)
	StreamsExpired       uint64 // streams forgotten after StreamIdle
	StreamsEvicted       uint64 // streams forgotten early to stay within MaxStreams
	NAKs                 uint64 // NAK datagrams accepted
	NAKsDropped          uint64 // rate-limited, replayed, wrong session, malformed
	NAKsIgnored          uint64 // sequences asked again just after their repair, or already queued
	NCFs                 uint64
	Repairs              uint64 // RDATA datagrams
	RepairBytes          uint64
	Losses               uint64 // LOSS datagrams
	Lost                 uint64 // datagram sequences announced unrepairable (NCF gone or LOSS)
	NAKsRefused          uint64 // sequences not answered: over a source's budget or past MaxNAKSequences
	SourcesEvicted       uint64 // NAK sources forgotten to make room (least recently heard)
	NAKSources           int    // NAK sources tracked now
	AuthFailures         uint64
	HistoryRequests      uint64        // history requests (late join) accepted
	HistoryAnswers       uint64        // HISTORY datagrams sent
	HistoryRefused       uint64        // history requests not answered: too soon after the last, or over the byte budget
	RateLimited          time.Duration // time original data waited for the rate limit
	Trailing, Leading    uint64
	WindowBytes, Streams int
}

type senderStream struct {
	id    uint32
	topic string
	seq   uint64 // last stream sequence assigned
	first uint64 // a datagram sequence at or before the stream's first record (its first CATALOG)
	// Catalog state: a stream is listed (in the periodic catalog, the catalog answers and the
	// heartbeats) from its first message until it has been idle for StreamIdle and its last
	// record has left the window; then it is forgotten.
	last   time.Time // last message
	lastDg uint64    // datagram sequence of its last record (0 while it is being packed)
	listed int       // index in SenderCore.listed + 1; 0 when not listed
	curGen uint64    // the DATA datagram being packed has a record of it when equal to SenderCore.curGen+1
	// Least recently used order of the streams (SenderCore.lru), for MaxStreams.
	lruPrev, lruNext *senderStream
}

// repairItem is a queued repair and the source it is charged to.
type repairItem struct {
	seq uint64
	src *nakSource
}

// SenderCore is the sans-IO sender: it packs published messages into DATA datagrams, answers NAKs
// with NCF and RDATA, sends HEARTBEATs and CATALOGs. It has no socket, clock or goroutine; the caller
// passes time in and multicasts whatever Ready returns. Not safe for concurrent use.
//
// The caller's duties:
//  1. Call Publish for each message, then Flush when it has nothing more queued right now.
//  2. Call Step with every datagram received on the sender's socket (NAKs).
//  3. Call Tick at Deadline (or earlier).
//  4. After each call, multicast every datagram Ready returns, in order, before the next call.
type SenderCore struct {
	cfg     SenderCoreConfig
	t       timing
	session uint64
	win     *window

	streams map[string]*senderStream
	lru     senderStream // sentinel: lru.lruNext is the most recently used stream
	lastID  uint32
	listed  []*senderStream // streams in the catalog (all of streams once packed)
	pending []*senderStream // announced by the next CATALOG delta, just before the current DATA
	cur1    []*senderStream // streams with a record in the DATA datagram being packed
	curGen  uint64
	hbNext  int // rotation through listed for heartbeats
	catNext int // rotation through listed for the periodic catalog

	cur     []byte // DATA datagram being filled (header written, seq not yet)
	curRecs int
	queue   [][]byte // finished DATA/CATALOG datagrams waiting for the rate limit
	qBytes  int
	rate    bucket
	limited time.Time // when the head of the queue started waiting

	repairQ    []repairItem
	repairSet  map[uint64]struct{}
	repairRate bucket
	repaired   map[uint64]time.Time
	repairedQ  []uint64

	sources *sourceTable
	srcRate float64 // bytes per second per source

	hbIvl       time.Duration
	hbAt        time.Time
	catalogAt   time.Time
	lastCatalog time.Time
	histAt      []time.Time // when the last history answers went out (at most historyBurst per CatalogInterval)

	out  [][]byte
	hold bool // HoldBuffers
	pkt  Packet
	seqs []uint64
	rngs []Range
	c    SenderCounters
}

// NewSenderCore returns a sender with a fresh session id.
func NewSenderCore(cfg SenderCoreConfig) (*SenderCore, error) {
	if cfg.Rand == nil {
		return nil, fmt.Errorf("sender core: nil Rand: %w", ErrBadConfig)
	}
	if err := cfg.Profile.validate(); err != nil {
		return nil, err
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.MTU < HeaderSize+TagSize+64 || cfg.MTU > MaxDatagram {
		return nil, fmt.Errorf("MTU %d: %w", cfg.MTU, ErrBadConfig)
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.RepairRate == 0 {
		cfg.RepairRate = DefaultRepairRate
	}
	if cfg.CatalogInterval == 0 {
		cfg.CatalogInterval = DefaultCatalogInterval
	}
	if cfg.StreamIdle == 0 {
		cfg.StreamIdle = DefaultStreamIdle
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.SourceRepairRate == 0 {
		cfg.SourceRepairRate = max(cfg.RepairRate/4, 1)
	}
	if cfg.RateLimit < 0 || cfg.RepairRate < 0 || cfg.Window < 0 || cfg.SourceRepairRate < 0 || cfg.NAKSources < 0 || cfg.StreamIdle < 0 || cfg.MaxStreams < 0 {
		return nil, fmt.Errorf("negative rate or window: %w", ErrBadConfig)
	}
	s := &SenderCore{
		cfg:       cfg,
		t:         cfg.Profile.timing(),
		session:   uint64(uint32(cfg.Start.Unix()))<<32 | uint64(cfg.Rand.Uint32()),
		win:       newWindow(cfg.Window, 1),
		streams:   make(map[string]*senderStream),
		repairSet: make(map[uint64]struct{}),
		repaired:  make(map[uint64]time.Time),
		sources:   newSourceTable(cmp.Or(cfg.NAKSources, DefaultNAKSources)),
		hbIvl:     MinHeartbeatInterval,
		hbAt:      cfg.Start.Add(MinHeartbeatInterval),
		catalogAt: cfg.Start.Add(cfg.CatalogInterval),
	}
	burst := func(r int64) float64 { return max(float64(r)/50, 4*MaxDatagram) }
	repairBurst := max(float64(cfg.RepairRate)/50, float64(4*cfg.MTU))
	s.rate = newBucket(float64(cfg.RateLimit), burst(cfg.RateLimit), cfg.Start)
	s.repairRate = newBucket(float64(cfg.RepairRate), repairBurst, cfg.Start)
	s.srcRate = float64(cfg.SourceRepairRate)
	return s, nil
}

// Session returns the session id.
func (s *SenderCore) Session() uint64 { return s.session }

// Counters returns the counts so far.
func (s *SenderCore) Counters() SenderCounters {
	c := s.c
	c.Trailing, c.Leading = s.win.trailing(), s.win.next()-1
	c.WindowBytes, c.Streams = s.win.bytes, len(s.listed)
	c.NAKSources, c.SourcesEvicted = len(s.sources.m), s.sources.evicted
	return c
}

// TopSources returns the k NAK sources with the most repair bytes.
func (s *SenderCore) TopSources(k int) []NAKSourceStats { return s.sources.top(k) }

// sourceBurst is the byte budget a source may spend at once: its rate over a quarter of the
// profile's budget, the longest a receiver waits between two NAKs of a sequence (retryWait), at
// least four datagrams. A receiver asking at that pace (backed off, or behind its socket) then
// gets its whole rate. With 1/50 s of it (20 ms), a receiver asking every 50 ms got at most
// 40% of its rate (160 kB per NAK round of the default 8 MiB/s), fell behind under 10% loss and
// lost datagrams to MaxHole. The channel's bucket still paces what is sent.
func (s *SenderCore) sourceBurst() float64 {
	return max(s.srcRate*(s.t.budget/4).Seconds(), float64(4*s.cfg.MTU))
}

// Backlog is the number of bytes waiting for the rate limit.
func (s *SenderCore) Backlog() int { return s.qBytes }

// Ready returns the datagrams to multicast, in order. The slice and the buffers are valid until the
// next call on the core (after HoldBuffers(true): the slice until the next call, the buffers
// until Recycle).
func (s *SenderCore) Ready() [][]byte {
	if !s.hold {
		s.win.recycle()
	}
	o := s.out
	s.out = s.out[:0]
	return o
}

func (s *SenderCore) maxPayload() int {
	n := s.cfg.MTU
	if s.cfg.Seal != nil {
		n -= SealOverhead
	} else if s.cfg.Auth != nil {
		n -= TagSize
	}
	return n
}

// Publish adds one message (payload as built by AppendMessage) on topic. Datagrams that fill up go
// out at once (subject to the rate limit); call Flush when no more messages are queued.
func (s *SenderCore) Publish(now time.Time, topic string, payload []byte) error {
	if topic == "" {
		return ErrEmptyTopic
	}
	need := RecordHeader + len(payload)
	if len(payload) > MaxMessage {
		return fmt.Errorf("%d byte message on %s (at most %d): %w", len(payload), topic, MaxMessage, ErrTooLarge)
	}
	frag := HeaderSize+2+need > s.maxPayload() // too large for one datagram: fragments
	st := s.streams[topic]
	if st == nil {
		if s.lastID == 1<<32-1 {
			return fmt.Errorf("%d stream ids used in this session: %w", s.lastID, ErrTooLarge)
		}
		s.lastID++
		st = &senderStream{id: s.lastID, topic: topic}
		s.streams[topic] = st
		s.lruPush(st)
		s.evictStreams()
	} else if s.lru.lruNext != st {
		s.lruUnlink(st)
		s.lruPush(st)
	}
	if s.cur != nil && (frag || len(s.cur)+need > s.maxPayload()) {
		s.flushCur(now)
	}
	if st.listed == 0 {
		// A CATALOG delta with its entry goes just before the DATA with its record.
		s.listed = append(s.listed, st)
		st.listed = len(s.listed)
		s.pending = append(s.pending, st)
	}
	st.last = now
	if frag {
		s.publishFragments(now, st, payload)
		return nil
	}
	s.noteRecord(st)
	if s.cur == nil {
		s.cur = s.win.buffer(max(s.cfg.MTU, HeaderSize+2+need+TagSize))
		s.cur = appendHeader(s.cur, &PacketHeader{Type: TypeData, Session: s.session})
		s.cur = append(s.cur, 0, 0)
		s.curRecs = 0
	}
	st.seq++
	s.cur = appendRecord(s.cur, st.id, st.seq, payload)
	s.curRecs++
	s.c.Messages++
	if s.curRecs == 0xffff {
		s.flushCur(now)
	}
	return nil
}

// noteRecord notes that the DATA datagram being packed holds a record of st.
func (s *SenderCore) noteRecord(st *senderStream) {
	if st.curGen != s.curGen+1 {
		st.curGen = s.curGen + 1
		st.lastDg = 0
		s.cur1 = append(s.cur1, st)
	}
}

// fragmentData is how many bytes of a message one fragment datagram carries.
func (s *SenderCore) fragmentData() int {
	return s.maxPayload() - HeaderSize - 2 - RecordHeader - FragmentHeader
}

// publishFragments sends a message too large for one datagram as fragments: one DATA datagram
// each (flag FlagFragment), all with the message's stream sequence, so each is sequenced and
// repaired like any datagram. The datagram being packed was flushed before.
func (s *SenderCore) publishFragments(now time.Time, st *senderStream, payload []byte) {
	st.seq++
	s.c.Messages++
	s.c.Fragmented++
	chunk := s.fragmentData()
	for off := 0; off < len(payload); off += chunk {
		end := min(off+chunk, len(payload))
		s.noteRecord(st)
		// Every fragment buffer is MTU-sized (the tag goes on a copy), so the window reuses them.
		b := s.win.buffer(s.cfg.MTU)
		b = appendHeader(b, &PacketHeader{Type: TypeData, Flags: FlagFragment, Session: s.session})
		b = append(b, 1, 0)
		s.cur = appendFragment(b, st.id, st.seq, uint32(len(payload)), uint32(off), payload[off:end])
		s.curRecs = 1
		s.c.Fragments++
		s.flushCur(now)
	}
}

// nextQueuedSeq is the sequence the next queued datagram will get minus one.
func (s *SenderCore) nextQueuedSeq() uint64 { return s.win.next() - 1 + uint64(len(s.queue)) }

// HoldBuffers(true) keeps the buffers Ready returns valid until Recycle is called, for a caller
// that writes them while it makes further calls on the core.
func (s *SenderCore) HoldBuffers(on bool) { s.hold = on }

// Recycle lets the core reuse the buffers of datagrams that have left the window: call it (after
// HoldBuffers(true)) when every datagram Ready returned has been written.
func (s *SenderCore) Recycle() { s.win.recycle() }

// Packing reports whether a DATA datagram is being filled (Flush would send it).
func (s *SenderCore) Packing() bool { return s.cur != nil }

// Flush sends the partly filled datagram, if any: call it when the publish queue drains.
func (s *SenderCore) Flush(now time.Time) {
	s.flushCur(now)
	s.release(now)
}

func (s *SenderCore) flushCur(now time.Time) {
	if s.cur == nil {
		return
	}
	binary.LittleEndian.PutUint16(s.cur[HeaderSize:], uint16(s.curRecs))
	if len(s.pending) > 0 {
		first := s.nextQueuedSeq() + 1
		for _, st := range s.pending {
			if st.first == 0 {
				st.first = first
			}
		}
		s.enqueueCatalog(s.pending)
		clear(s.pending)
		s.pending = s.pending[:0]
	}
	seq := s.nextQueuedSeq() + 1
	for _, st := range s.cur1 {
		st.lastDg = seq
	}
	clear(s.cur1)
	s.cur1 = s.cur1[:0]
	s.curGen++
	s.enqueue(s.cur)
	s.cur = nil
	s.release(now)
}

func (s *SenderCore) enqueue(b []byte) {
	if len(s.queue) == 0 {
		s.limited = time.Time{}
	}
	s.queue = append(s.queue, b)
	s.qBytes += len(b)
}

// enqueueCatalog queues CATALOG datagrams with the entries of sts (split as needed) and returns
// how many.
func (s *SenderCore) enqueueCatalog(sts []*senderStream) int {
	var p Packet
	p.Type = TypeCatalog
	p.Session = s.session
	size, k := HeaderSize+2, 0
	flush := func() {
		// Sized to fit: the window counts what it holds by capacity.
		b, _ := AppendPacket(make([]byte, 0, size+TagSize), &p)
		s.enqueue(b)
		s.c.Catalogs++
		s.c.CatalogBytes += uint64(len(b))
		p.Catalog, size = p.Catalog[:0], HeaderSize+2
		k++
	}
	for _, st := range sts {
		n := 14 + len(st.topic)
		if len(p.Catalog) > 0 && size+n > s.maxPayload() {
			flush()
		}
		p.Catalog = append(p.Catalog, CatalogEntry{Stream: st.id, First: st.first, Topic: st.topic})
		size += n
	}
	if len(p.Catalog) > 0 {
		flush()
	}
	return k
}

// fullCatalog queues the whole catalog (the answer to a catalog request).
func (s *SenderCore) fullCatalog(now time.Time) {
	s.enqueueCatalog(s.listed)
	s.lastCatalog = now
}

// periodicCatalog queues the next part of the catalog: at most catalogChunk bytes of entries per
// catalog interval (so the periodic catalog costs at most that much per interval however many
// streams there are), rotating through the listed streams; it forgets streams idle for
// StreamIdle whose last record has left the window.
func (s *SenderCore) periodicCatalog(now time.Time) {
	s.catalogAt = now.Add(s.cfg.CatalogInterval)
	budget := s.catalogChunk()
	var part []*senderStream
	bytes := 0
	trailing := s.win.trailing()
	for seen := len(s.listed); seen > 0 && len(s.listed) > 0 && bytes < budget; seen-- {
		if s.catNext >= len(s.listed) {
			s.catNext = 0
		}
		st := s.listed[s.catNext]
		if now.Sub(st.last) >= s.cfg.StreamIdle && st.lastDg != 0 && st.lastDg < trailing {
			s.unlist(st)
			s.c.StreamsExpired++
			continue
		}
		part = append(part, st)
		bytes += 14 + len(st.topic)
		s.catNext++
	}
	if len(part) > 0 {
		s.enqueueCatalog(part)
	}
}

// catalogChunk is the periodic catalog's budget in entry bytes per interval: eight MTUs, or 1%
// of the rate limit when that is less, at least one MTU.
func (s *SenderCore) catalogChunk() int {
	n := 8 * (s.maxPayload() - HeaderSize - 2)
	if r := s.cfg.RateLimit; r > 0 {
		n = min(n, int(float64(r)*s.cfg.CatalogInterval.Seconds()/100))
	}
	return max(n, s.maxPayload()-HeaderSize-2)
}

// unlist takes st out of the catalog and forgets it: its topic's next message starts a new
// stream.
func (s *SenderCore) unlist(st *senderStream) {
	i := st.listed - 1
	last := s.listed[len(s.listed)-1]
	s.listed[i] = last
	last.listed = i + 1
	s.listed[len(s.listed)-1] = nil
	s.listed = s.listed[:len(s.listed)-1]
	st.listed = 0
	delete(s.streams, st.topic)
	s.lruUnlink(st)
}

func (s *SenderCore) lruPush(st *senderStream) {
	if s.lru.lruNext == nil {
		s.lru.lruNext, s.lru.lruPrev = &s.lru, &s.lru
	}
	st.lruPrev, st.lruNext = &s.lru, s.lru.lruNext
	s.lru.lruNext.lruPrev = st
	s.lru.lruNext = st
}

func (s *SenderCore) lruUnlink(st *senderStream) {
	st.lruPrev.lruNext, st.lruNext.lruPrev = st.lruNext, st.lruPrev
	st.lruPrev, st.lruNext = nil, nil
}

// evictStreams forgets least recently used streams past MaxStreams, as long as their data has
// left the window.
func (s *SenderCore) evictStreams() {
	trailing := s.win.trailing()
	for len(s.streams) > s.cfg.MaxStreams {
		old := s.lru.lruPrev
		if old == &s.lru || old.lastDg == 0 || old.lastDg >= trailing {
			return // every older stream still has data to repair: the window bounds them
		}
		s.unlist(old)
		s.c.StreamsEvicted++
	}
}

// release sends queued datagrams as the rate limit allows.
func (s *SenderCore) release(now time.Time) {
	sent := 0
	for sent < len(s.queue) {
		b := s.queue[sent]
		if !s.rate.take(now, float64(len(b))) {
			if s.limited.IsZero() {
				s.limited = now
			}
			break
		}
		if !s.limited.IsZero() {
			s.c.RateLimited += now.Sub(s.limited)
			s.limited = time.Time{}
		}
		sent++
		s.qBytes -= len(b)
		seq := s.win.next()
		binary.LittleEndian.PutUint64(b[16:], seq)
		s.win.push(b, now)
		binary.LittleEndian.PutUint64(b[24:], s.win.trailing())
		if Type(b[3]) == TypeData {
			s.c.DataDatagrams++
		}
		s.emit(b, false)
		s.hbIvl = MinHeartbeatInterval
		s.hbAt = now.Add(s.hbIvl)
	}
	switch {
	case sent == 0:
	case len(s.queue) == sent && cap(s.queue) <= 1024:
		clear(s.queue)
		s.queue = s.queue[:0] // keep a small backing array: no allocation per datagram
	default:
		clear(s.queue[:sent])
		s.queue = s.queue[sent:]
		if len(s.queue) == 0 {
			s.queue = s.queue[:0:0]
		}
	}
}

// emit signs a copy (or b itself when copyIt is false and no tag is needed) and queues it for Ready.
func (s *SenderCore) emit(b []byte, copyIt bool) {
	if s.cfg.Seal != nil {
		b = s.cfg.Seal.Seal(b) // a sealed copy: the window keeps the plain datagram
	} else if s.cfg.Auth != nil || copyIt {
		c := make([]byte, len(b), len(b)+TagSize)
		copy(c, b)
		b = s.cfg.Auth.Sign(c)
	}
	s.out = append(s.out, b)
	s.c.Datagrams++
	s.c.Bytes += uint64(len(b))
}

func (s *SenderCore) emitPacket(p *Packet) {
	p.Session = s.session
	if p.Seq == 0 {
		p.Seq = s.win.next() - 1
	}
	p.Trailing = s.win.trailing()
	b, err := AppendPacket(make([]byte, 0, s.cfg.MTU), p)
	if err != nil {
		panic(err) // our own packets always encode
	}
	s.emit(b, false)
}

// Step handles one datagram received by the sender (a NAK from a receiver).
func (s *SenderCore) Step(now time.Time, from netip.AddrPort, b []byte) error {
	if len(b) >= HeaderSize && b[4]&FlagSealed != 0 {
		return nil // a sealed datagram (ours looped back, or another sender's): never a NAK
	}
	if !s.cfg.Auth.Verify(b) && (s.cfg.PrevAuth == nil || !s.cfg.PrevAuth.Verify(b)) {
		s.c.AuthFailures++
		return ErrAuth
	}
	p := &s.pkt
	if err := Decode(b, p); err != nil {
		s.c.NAKsDropped++
		return err
	}
	if p.Type != TypeNAK && p.Type != TypeHistoryRequest {
		return nil // our own multicast looped back, or another sender: not ours to handle
	}
	if p.Session != s.session {
		s.c.NAKsDropped++
		return nil
	}
	src := s.sources.get(from.Addr().Unmap(), func() *nakSource {
		return &nakSource{naks: newBucket(s.t.nakRate, s.t.nakBurst, now), bytes: newBucket(s.srcRate, s.sourceBurst(), now)}
	})
	if !src.naks.take(now, 1) || !src.accept(p.Receiver, p.Seq) {
		s.c.NAKsDropped++ // over the per-source NAK rate, or replayed
		src.st.NAKsDropped++
		return nil
	}
	if p.Type == TypeHistoryRequest {
		s.historyRequest(now, src, p)
		return nil
	}
	s.c.NAKs++
	src.st.NAKs++
	s.expireRepaired(now)
	var will, delayed, gone []uint64
	leading := s.win.next() - 1
	trailing := s.win.trailing()
	n := 0 // sequences considered, at most MaxNAKSequences
	refused := uint64(0)
	exhausted := false // the source's byte budget is spent
	var goneRanges []Range
	for _, r := range p.Ranges {
		if r.From == 0 { // a catalog request from a receiver that joined late
			s.catalogRequest(now, src)
			if r.To == 0 {
				continue
			}
			r.From = 1
		}
		if r.From < trailing { // outside the window: one range, whatever its length
			g := Range{r.From, min(r.To, trailing-1)}
			if k := len(goneRanges); k > 0 && goneRanges[k-1].To+1 >= g.From {
				goneRanges[k-1].To = max(goneRanges[k-1].To, g.To)
			} else {
				goneRanges = append(goneRanges, g)
			}
			if r.To < trailing {
				continue
			}
			r.From = trailing
		}
		for q := r.From; q <= r.To && q <= leading; q++ {
			if n >= MaxNAKSequences || exhausted {
				// The rest is refused without looking at it: a source past its budget costs
				// the sender O(ranges), not O(sequences).
				refused += min(r.To, leading) - q + 1
				break
			}
			n++
			b := s.win.get(q)
			if b == nil {
				gone = append(gone, q)
				continue
			}
			if _, ok := s.repairSet[q]; ok {
				s.c.NAKsIgnored++
				continue
			}
			if t, ok := s.repaired[q]; ok && now.Sub(t) < s.t.repairHold {
				s.c.NAKsIgnored++
				continue
			}
			if !src.bytes.take(now, float64(len(b))) {
				refused++ // over the source's byte budget: no answer, the receiver asks again
				exhausted = true
				continue
			}
			s.repairSet[q] = struct{}{}
			s.repairQ = append(s.repairQ, repairItem{q, src})
			if len(s.repairQ) > s.t.delayedAfter {
				delayed = append(delayed, q)
			} else {
				will = append(will, q)
			}
		}
		if r.To == ^uint64(0) {
			break
		}
	}
	s.c.NAKsRefused += refused
	src.st.Refused += refused
	s.sendNCF(NCFWillSend, will)
	s.sendNCF(NCFDelayed, delayed)
	s.sendNCF(NCFGone, gone)
	s.sendNCFRanges(NCFGone, goneRanges)
	s.sendRepairs(now)
	return nil
}

// catalogRequest answers a catalog request (a NAK range 0-0): at most once per catalog interval
// per source and ten times per catalog interval in all, charged to the source's repair budget.
func (s *SenderCore) catalogRequest(now time.Time, src *nakSource) {
	if !src.catalogAt.IsZero() && now.Sub(src.catalogAt) < s.cfg.CatalogInterval {
		src.st.CatalogRefused++
		return
	}
	if s.cur != nil || (!s.lastCatalog.IsZero() && now.Sub(s.lastCatalog) < s.cfg.CatalogInterval/10) {
		return // one just went out, or data is being packed: the receiver asks again
	}
	size := s.catalogBytes()
	if !src.bytes.take(now, float64(size)) {
		src.st.CatalogRefused++
		return
	}
	src.catalogAt = now
	src.st.Repairs++
	src.st.RepairBytes += uint64(size)
	s.fullCatalog(now)
	s.release(now)
}

// catalogBytes is the size of a full catalog (all datagrams).
func (s *SenderCore) catalogBytes() int {
	n := 0
	for _, st := range s.listed {
		n += 14 + len(st.topic)
	}
	dg := max((n+s.maxPayload()-HeaderSize-3)/(s.maxPayload()-HeaderSize-2), 1)
	return n + dg*(HeaderSize+2)
}

func (s *SenderCore) sendNCFRanges(st NCFStatus, rs []Range) {
	// Counted up to MaxNAKSequences per NAK: one NAK for 1-2^40 must not make a loss alert fire.
	var n uint64
	for _, r := range rs {
		n += r.To - r.From + 1
	}
	s.c.Lost += min(n, MaxNAKSequences)
	for len(rs) > 0 {
		k := min(len(rs), maxRanges)
		s.emitPacket(&Packet{PacketHeader: PacketHeader{Type: TypeNCF}, Status: st, Ranges: rs[:k]})
		s.c.NCFs++
		rs = rs[k:]
	}
}

func (s *SenderCore) sendNCF(st NCFStatus, seqs []uint64) {
	if st == NCFGone {
		s.c.Lost += uint64(len(seqs))
	}
	rs := toRanges(s.rngs[:0], seqs)
	for len(rs) > 0 {
		k := min(len(rs), maxRanges)
		s.emitPacket(&Packet{PacketHeader: PacketHeader{Type: TypeNCF}, Status: st, Ranges: rs[:k]})
		s.c.NCFs++
		rs = rs[k:]
	}
}

func (s *SenderCore) sendRepairs(now time.Time) {
	var lost []uint64
	for len(s.repairQ) > 0 {
		it := s.repairQ[0]
		q := it.seq
		b := s.win.get(q)
		if b == nil {
			lost = append(lost, q)
		} else {
			if !s.repairRate.take(now, float64(len(b))) {
				break
			}
			c := make([]byte, len(b), len(b)+TagSize)
			copy(c, b)
			t := Type(c[3])
			if t == TypeData {
				t = TypeRData
			}
			putHeaderFields(c, t, FlagRepair|c[4]&FlagFragment, 0, s.win.trailing())
			s.emit(c, false)
			s.c.Repairs++
			s.c.RepairBytes += uint64(len(c))
			it.src.st.Repairs++
			it.src.st.RepairBytes += uint64(len(c))
			s.repaired[q] = now
			s.repairedQ = append(s.repairedQ, q)
		}
		delete(s.repairSet, q)
		s.repairQ = s.repairQ[1:]
	}
	if len(s.repairQ) == 0 {
		s.repairQ = s.repairQ[:0:0]
	}
	if len(lost) > 0 {
		s.c.Lost += uint64(len(lost))
		rs := toRanges(nil, lost)
		for len(rs) > 0 {
			k := min(len(rs), maxRanges)
			s.emitPacket(&Packet{PacketHeader: PacketHeader{Type: TypeLoss}, Reason: ReasonGone, Ranges: rs[:k]})
			s.c.Losses++
			rs = rs[k:]
		}
	}
}

func (s *SenderCore) expireRepaired(now time.Time) {
	for len(s.repairedQ) > 0 {
		q := s.repairedQ[0]
		if t, ok := s.repaired[q]; ok && now.Sub(t) < s.t.repairHold {
			break
		}
		if t, ok := s.repaired[q]; ok && now.Sub(t) >= s.t.repairHold {
			delete(s.repaired, q)
		}
		s.repairedQ = s.repairedQ[1:]
	}
}

// Tick advances time: rate-limited data, repairs, heartbeats and the periodic catalog.
func (s *SenderCore) Tick(now time.Time) {
	s.release(now)
	s.sendRepairs(now)
	s.expireRepaired(now)
	if len(s.listed) > 0 && !now.Before(s.catalogAt) && s.cur == nil {
		s.periodicCatalog(now)
		s.release(now)
	}
	if !now.Before(s.hbAt) {
		s.heartbeat()
		s.hbIvl = min(2*s.hbIvl, MaxHeartbeatInterval)
		s.hbAt = now.Add(s.hbIvl)
	}
}

func (s *SenderCore) heartbeat() {
	p := Packet{PacketHeader: PacketHeader{Type: TypeHeartbeat}, Leading: s.win.next() - 1}
	room := (s.maxPayload() - HeaderSize - 10) / 12
	n := min(room, len(s.listed))
	if s.cur != nil || len(s.queue) > 0 {
		n = 0 // stream sequences not yet sent must not be announced
	}
	for i := 0; i < n; i++ {
		st := s.listed[(s.hbNext+i)%len(s.listed)]
		p.Streams = append(p.Streams, StreamSeq{Stream: st.id, Seq: st.seq})
	}
	if len(s.listed) > 0 {
		s.hbNext = (s.hbNext + n) % len(s.listed)
	}
	s.emitPacket(&p)
	s.c.Heartbeats++
}

// Deadline is when Tick should next be called.
func (s *SenderCore) Deadline() time.Time {
	d := s.hbAt
	if len(s.listed) > 0 && s.catalogAt.Before(d) {
		d = s.catalogAt
	}
	if len(s.queue) > 0 {
		if r := s.rate.ready(s.rate.last); r.Before(d) {
			d = r
		}
	}
	if len(s.repairQ) > 0 {
		if r := s.repairRate.ready(s.repairRate.last); r.Before(d) {
			d = r
		}
	}
	return d
}
