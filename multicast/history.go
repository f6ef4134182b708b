package multicast

import (
	"slices"
	"time"
)

// Late join (docs/multicast-protocol.md, section 3, "History (late join)" and 4.10).
const (
	// historyInterval: a source's history requests are answered at most once per this long.
	historyInterval = DefaultCatalogInterval / 10
	// historyBurst: at most this many history requests are answered per CatalogInterval in all
	// (each costs a walk over the retransmit window).
	historyBurst = 10
)

// historyStream is one stream's part of a history answer being built.
type historyStream struct {
	id     uint32
	n      uint32 // messages counted
	first  uint64 // lowest stream sequence counted
	full   bool   // n reached the request's count: only fragments of first are taken now
	active int    // order in which the walk (newest first) met it
}

// historyRequest answers a history request: which datagrams below its Before hold the last
// Count messages (or those younger than AgeMs) of each listed stream matching its patterns.
// Rate-limited per source and in all; the answer's bytes are charged to the source's repair
// budget like a repair. The receiver then NAKs the datagrams named.
func (s *SenderCore) historyRequest(now time.Time, src *nakSource, p *Packet) {
	s.c.HistoryRequests++
	if !src.historyAt.IsZero() && now.Sub(src.historyAt) < historyInterval {
		s.c.HistoryRefused++
		src.st.HistoryRefused++
		return
	}
	k := 0
	for _, t := range s.histAt {
		if now.Sub(t) < s.cfg.CatalogInterval {
			s.histAt[k] = t
			k++
		}
	}
	s.histAt = s.histAt[:k]
	if k >= historyBurst || !src.bytes.take(now, float64(s.cfg.MTU)) {
		s.c.HistoryRefused++
		src.st.HistoryRefused++
		return // the receiver asks again
	}
	src.historyAt = now
	s.histAt = append(s.histAt, now)
	ans := s.buildHistory(now, p)
	ans.Receiver, ans.Request = p.Receiver, p.Seq
	ans.Type = TypeHistory
	s.emitPacket(&ans)
	s.c.HistoryAnswers++
	src.st.Repairs++
	src.st.RepairBytes += uint64(s.cfg.MTU)
}

// buildHistory walks the window from the newest datagram below p.Before back to the trailing
// edge and collects, per stream whose topic matches p.Patterns, the datagrams holding its last
// p.Count messages sent within p.AgeMs. The answer fits one datagram: at most
// MaxHistoryStreams streams (those met first, the most recently active) and the datagram ranges
// merged across their smallest gaps until they fit (a receiver NAKs a few datagrams too many,
// never too few).
func (s *SenderCore) buildHistory(now time.Time, p *Packet) Packet {
	var ans Packet
	byID := make(map[uint32]*historyStream)
	topics := make(map[uint32]*senderStream, len(s.listed))
	for _, st := range s.listed {
		topics[st.id] = st
	}
	match := func(id uint32) bool {
		st := topics[id]
		if st == nil {
			return false
		}
		if len(p.Patterns) == 0 {
			return true
		}
		for _, pat := range p.Patterns {
			if MatchTopic(pat, st.topic) {
				return true
			}
		}
		return false
	}
	skip := make(map[uint32]bool)
	var dgs []uint64
	top := min(p.Before, s.win.next())
	var oldest time.Time
	if p.AgeMs > 0 {
		oldest = now.Add(-time.Duration(p.AgeMs) * time.Millisecond)
	}
	var rec Packet
	for q := top; q > s.win.trailing(); {
		q--
		b := s.win.get(q)
		if b == nil || Type(b[3]) != TypeData {
			continue
		}
		if !oldest.IsZero() && s.win.sentAt(q).Before(oldest) {
			break
		}
		// The window holds DATA with its record count written: decode its records.
		if Decode(b, &rec) != nil {
			continue
		}
		took := false
		for i := len(rec.Records) - 1; i >= 0; i-- { // newest first within the datagram too
			r := &rec.Records[i]
			if skip[r.Stream] {
				continue
			}
			hs := byID[r.Stream]
			if hs == nil {
				if !match(r.Stream) || len(byID) >= MaxHistoryStreams {
					skip[r.Stream] = true
					continue
				}
				hs = &historyStream{id: r.Stream, active: len(byID)}
				byID[r.Stream] = hs
			}
			switch {
			case hs.n > 0 && r.Seq == hs.first:
				took = true // another fragment of the oldest message counted
			case hs.full || (hs.n > 0 && r.Seq > hs.first):
				continue
			default:
				hs.n++
				hs.first = r.Seq
				hs.full = p.Count > 0 && hs.n >= p.Count
				took = true
			}
		}
		if took {
			dgs = append(dgs, q)
		}
	}
	hss := make([]*historyStream, 0, len(byID))
	for _, hs := range byID {
		if hs.n > 0 {
			hss = append(hss, hs)
		}
	}
	slices.SortFunc(hss, func(a, b *historyStream) int { return a.active - b.active })
	for _, hs := range hss {
		ans.Streams = append(ans.Streams, StreamSeq{Stream: hs.id, Seq: hs.first})
	}
	slices.Reverse(dgs)
	rs := toRanges(nil, dgs)
	room := (s.maxPayload() - HeaderSize - 8 - 8 - 2 - 2 - 12*len(ans.Streams)) / 16
	ans.Ranges = mergeRanges(rs, max(room, 1))
	return ans
}

// mergeRanges merges sorted, disjoint ranges across their smallest gaps until at most n remain.
func mergeRanges(rs []Range, n int) []Range {
	if len(rs) <= n {
		return rs
	}
	// Keep the n-1 largest gaps as separations.
	gaps := make([]int, len(rs)-1)
	for i := range gaps {
		gaps[i] = i
	}
	size := func(i int) uint64 { return rs[i+1].From - rs[i].To }
	slices.SortStableFunc(gaps, func(a, b int) int {
		switch sa, sb := size(a), size(b); {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return a - b
	})
	keep := make([]bool, len(rs)-1)
	for _, i := range gaps[:n-1] {
		keep[i] = true
	}
	out := []Range{rs[0]}
	for i := 1; i < len(rs); i++ {
		if keep[i-1] {
			out = append(out, rs[i])
		} else {
			out[len(out)-1].To = rs[i].To
		}
	}
	return out
}

// Receiver side of the late join.

// historyRetry is how often a receiver repeats an unanswered history request (the sender
// answers a source at most once per historyInterval).
const historyRetry = historyInterval

// historyWait is how long a receiver waits for a HISTORY answer before it joins without one
// (an older sender ignores the request): the profile's budget, at least one second.
func (r *ReceiverCore) historyWait() time.Duration { return max(r.t.budget, time.Second) }

// sendHistoryRequest queues a history request to the sender.
func (r *ReceiverCore) sendHistoryRequest() {
	r.nakSeq++
	if r.lj.firstReq == 0 {
		r.lj.firstReq = r.nakSeq
	}
	age := r.cfg.LateJoinAge.Milliseconds()
	if r.cfg.LateJoinAge > 0 && age == 0 {
		age = 1
	}
	p := &Packet{PacketHeader: PacketHeader{Type: TypeHistoryRequest, Session: r.session, Seq: r.nakSeq},
		Receiver: r.id, Before: r.join, Count: uint32(min(r.cfg.LateJoin, 1<<32-1)),
		AgeMs: uint32(min(age, 1<<32-1)), Patterns: r.cfg.Topics}
	if len(p.Patterns) > MaxHistoryPatterns || patternBytes(p.Patterns) > DefaultMTU-HeaderSize-TagSize-32 {
		p.Patterns = nil // too many to send: ask for every topic (Filter still applies)
	}
	b, err := AppendPacket(make([]byte, 0, DefaultMTU), p)
	if err != nil {
		return
	}
	auth := r.cfg.Auth
	if r.ring != nil {
		auth = r.ring.Auth()
	}
	r.out = append(r.out, Outgoing{To: r.src, B: auth.Sign(b)})
	r.c.HistoryRequests++
}

func patternBytes(ps []string) int {
	n := 0
	for _, p := range ps {
		n += 2 + len(p)
	}
	return n
}

// history takes a HISTORY answer addressed to this receiver: the streams' starts, and the
// datagrams below the join point to NAK (at most MaxHole of them, the newest).
func (r *ReceiverCore) history(now time.Time, p *Packet) {
	if !r.lj.pending || p.Receiver != r.id || p.Request < r.lj.firstReq || p.Request > r.nakSeq || r.lj.firstReq == 0 {
		return // not ours, or not asked in this session
	}
	r.lj.pending = false
	r.c.HistoryAnswers++
	for _, e := range p.Streams {
		if e.Seq == 0 {
			continue
		}
		st := r.streams[e.Stream]
		if st == nil {
			st = r.newStream(e.Stream, false)
		}
		if st == nil {
			r.c.Overflow++
			continue
		}
		if !st.started && st.ljStart == 0 {
			st.ljStart = e.Seq
		}
	}
	lo := max(p.Trailing, 1)
	if r.join > MaxHole {
		lo = max(lo, r.join-MaxHole)
	}
	for _, rg := range p.Ranges {
		for q := max(rg.From, lo); q <= rg.To && q < r.join; q++ {
			if r.lj.hist == nil {
				r.lj.hist = make(map[uint64]*hole)
			}
			r.lj.hist[q] = &hole{due: now} // ours alone to ask for: no back-off
		}
	}
	if len(r.lj.hist) == 0 {
		r.ljFinish()
		return
	}
	r.setDue(now)
}

// historyData takes a datagram below the join point that the history named: the records of
// the streams the answer started, from their start on.
func (r *ReceiverCore) historyData(p *Packet) {
	seq := p.Seq
	delete(r.lj.hist, seq)
	r.c.HistoryRepairs++
	if p.Flags&FlagRepair != 0 {
		r.lastRepair = r.now
	}
	repaired := p.Flags&FlagRepair != 0
	if p.Type == TypeCatalog {
		r.catalog(p.Catalog)
	} else {
		for _, rec := range p.Records {
			st := r.streams[rec.Stream]
			if st == nil || st.ljStart == 0 || st.started || rec.Seq < st.ljStart {
				continue
			}
			if !rec.Frag {
				r.record(st, rec.Seq, seq, rec.Payload, repaired, false)
			} else if pa := r.fragment(st, &rec, seq, repaired); pa != nil {
				r.record(st, rec.Seq, pa.dg, pa.assemble(), pa.repaired, true)
			}
		}
	}
	if len(r.lj.hist) == 0 {
		r.ljFinish()
	}
}

// histLose gives up a history datagram: its records become gaps of their streams.
func (r *ReceiverCore) histLose(q uint64, reason Reason) {
	if r.lj.hist[q] == nil {
		return
	}
	delete(r.lj.hist, q)
	r.c.LostDatagrams++
	r.lossReason, r.lossEver = reason, true
	if len(r.lj.hist) == 0 {
		r.ljFinish()
	}
}

// histTrail gives up the history datagrams below the sender's trailing edge t.
func (r *ReceiverCore) histTrail(t uint64) {
	for q := range r.lj.hist {
		if q < t {
			r.histLose(q, ReasonGone)
		}
	}
}

// eachHist gives up the history datagrams in rg (an NCF gone or a LOSS).
func (r *ReceiverCore) eachHist(rg Range, reason Reason) {
	for q := range r.lj.hist {
		if rg.Contains(q) {
			r.histLose(q, reason)
		}
	}
}

// eachHistHole calls f for the history holes in rg (an NCF will-send or delayed).
func (r *ReceiverCore) eachHistHole(rg Range, f func(*hole)) {
	if rg.To-rg.From < uint64(len(r.lj.hist)) {
		for q := rg.From; ; q++ {
			if m := r.lj.hist[q]; m != nil {
				f(m)
			}
			if q == rg.To {
				break
			}
		}
		return
	}
	for q, m := range r.lj.hist {
		if rg.Contains(q) && m != nil {
			f(m)
		}
	}
}

// ljFinish ends the late join: the streams that waited start (at the history's start when the
// answer named them, else by the rule of 4.3) and their holes are reported.
func (r *ReceiverCore) ljFinish() {
	r.lj.active, r.lj.pending, r.lj.hist = false, false, nil
	r.tried = 0 // make advance try the waiting streams again
	r.lossPassed = true
}
