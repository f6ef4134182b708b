package bridge

import (
	"fmt"
	"slices"
)

// Sequencer is the deterministic order keeper of direction in from a
// JetStream consumer: it passes the consumer's messages on to the local
// side in stream-sequence order, holding back those that arrive before
// an earlier one. It has no goroutines, clock, sockets or I/O; the shell
// feeds it events with the time in nanoseconds and carries out the
// actions it returns, in order.
//
// Why messages arrive out of order: a pull consumer delivers each message
// once in stream order, but a message delivered to a connection that was
// lost stays pending at the server until its ack wait passes, and the
// reconnected consumer meanwhile gets later messages first.
//
// A session (a consume context on one connection) cannot tell from the
// consumer's state alone what it will miss: pull requests of the lost
// connection stay at the server until they expire, and the server goes on
// serving them (first, as the older requests) while the stream fills, so
// messages after any sequence read at the session's start can still go to
// the dead connection.
//
// What the sequencer knows:
//   - next, the stream sequence of the last message passed on in order
//     (at a consume session's start, at least the consumer's ack floor:
//     every earlier message of the consumer is acknowledged, because the
//     bridge acknowledges in the order it passes messages on);
//   - for a message, its predecessor, when the deliveries prove it: the
//     server numbers every delivery (first or again) with one consumer
//     sequence, and delivers first deliveries in stream order. A first
//     delivery whose consumer sequence follows, without a hole, the
//     deliveries this session received since the previous first delivery
//     has that one as its predecessor: no message of the consumer lies
//     between them. A hole means a delivery went elsewhere (a lost
//     connection's request) and proves nothing.
//
// Rules: a message passes on if it is at next+1, or its predecessor is
// at or below next, or the stream said it follows next. Otherwise it is
// held and the shell asks the stream which message of the consumer's
// subjects follows next (Probe; the stream's sequences have holes where
// other subjects are); the held message that is the answer goes on; an
// answer at or below the consumer's ack floor was passed on already (by
// an earlier run whose acknowledgements reached the server out of order)
// and is gone past; otherwise they wait for the missing one to be
// redelivered. In a session that misses nothing every first delivery has
// its predecessor, so nothing is held and nothing asked. A message at or
// below next is a redelivery of one passed on already and is passed on
// again (the local side keeps one copy by its dedup id).
//
// Nothing is skipped silently: if a probe repeated after RegapAfter finds
// the awaited message gone from the stream (a deletion), or the stream's
// first sequence has moved past next (retention), or the consumer's ack
// floor has moved past next while this sequencer ran (the server passes
// over removed messages), the sequencer reports a Gap and goes on. What it
// cannot see: messages removed while the bridge was not running (a new
// sequencer starts at the ack floor), and a message removed from the
// middle of the stream before it was delivered in a session without
// anything missing (the server's consumer passes over it). A message that
// was on its way to the bridge when it was removed, and reported as a gap
// before it arrived, is passed on when it arrives, out of order, and
// counted as Late (losing it would be worse).
type Sequencer struct {
	cfg       SequencerConfig
	next      uint64 // last stream sequence passed on in order
	known     bool   // next is this sequencer's own (a session started)
	held      []uint64
	heldBytes map[uint64]int
	pred      map[uint64]uint64 // of held messages, where proven
	bytes     int64
	// the session's delivery chain: the last consumer sequence received,
	// the stream sequence of the last first delivery, and whether every
	// delivery since that one was received (no hole)
	lastDlv   uint64
	lastFirst uint64
	chainOK   bool
	// probing: a probe for probeAfter is out; expect is the last answer
	// for next (0: none yet); the next probe is due at probeDue.
	probing    bool
	probeAfter uint64
	expect     uint64
	probeDue   int64
	gaps       [][2]uint64 // the latest gaps reported (to recognise a late arrival)
	stats      SequencerStats
	// waitSince: since when (as Tick saw it) messages are held while next
	// stays waitNext; 0 when nothing is held.
	waitSince int64
	waitNext  uint64
}

// SequencerConfig are the sequencer's settings.
type SequencerConfig struct {
	// MaxBytes bounds the bytes held back; a message that would pass it is
	// dropped unacknowledged (ActSeqDrop: it comes again after its ack
	// wait). The shell names the setting in its error.
	MaxBytes int64
	// RegapAfter: while waiting this long for a missing message, ask the
	// stream again whether it is still there (ns).
	RegapAfter int64
}

// SequencerStats are the sequencer's counters.
type SequencerStats struct {
	Held, HeldBytes     int64  // now
	HeldTotal, Probes   uint64 // since start
	Dropped, Gaps, Late uint64
	Next                uint64
}

// SeqActionKind says what the shell must do.
type SeqActionKind uint8

const (
	ActSeqPass  SeqActionKind = iota + 1 // pass message Seq on to the local side (the core)
	ActSeqProbe                          // find the consumer's first message after Seq in the stream; answer ProbeResult
	ActSeqDrop                           // forget message Seq unacknowledged (over MaxBytes)
	ActSeqGap                            // messages From..To of the stream are gone: report it
)

// SeqAction is one step for the shell.
type SeqAction struct {
	Kind     SeqActionKind
	Seq      uint64
	From, To uint64 // ActSeqGap: stream sequences (To inclusive) skipped as gone
}

func (a SeqAction) String() string {
	switch a.Kind {
	case ActSeqPass:
		return fmt.Sprintf("pass %d", a.Seq)
	case ActSeqProbe:
		return fmt.Sprintf("probe after %d", a.Seq)
	case ActSeqDrop:
		return fmt.Sprintf("drop %d", a.Seq)
	case ActSeqGap:
		return fmt.Sprintf("gap %d..%d", a.From, a.To)
	}
	return "?"
}

// NewSequencer returns a sequencer that has passed nothing on.
func NewSequencer(cfg SequencerConfig) *Sequencer {
	if cfg.MaxBytes < 1 {
		cfg.MaxBytes = 1
	}
	if cfg.RegapAfter < 1 {
		cfg.RegapAfter = 1
	}
	return &Sequencer{cfg: cfg, heldBytes: map[uint64]int{}, pred: map[uint64]uint64{}}
}

// Stats returns the counters.
func (s *Sequencer) Stats() SequencerStats {
	st := s.stats
	st.Held, st.HeldBytes, st.Next = int64(len(s.held)), s.bytes, s.next
	return st
}

// Next is the stream sequence of the last message passed on in order.
func (s *Sequencer) Next() uint64 { return s.next }

// Start: a consume session starts; ackFloor is the consumer's
// acknowledged floor and streamFirst the stream's first sequence, read
// before the session's first pull.
func (s *Sequencer) Start(ackFloor, streamFirst uint64, now int64) []SeqAction {
	var acts []SeqAction
	if s.known && ackFloor > s.next {
		// The server moved the floor over messages never passed on: they
		// were removed from the stream while pending.
		acts = s.gap(s.next+1, ackFloor, acts)
	}
	s.next = max(s.next, ackFloor)
	s.known = true
	s.lastDlv, s.lastFirst, s.chainOK = 0, 0, false
	s.expect = 0
	s.probeDue = 0
	acts = s.firstMoved(streamFirst, acts)
	return s.release(now, acts)
}

// gap reports stream sequences from..to as removed before they were
// passed on, and moves next past them.
func (s *Sequencer) gap(from, to uint64, acts []SeqAction) []SeqAction {
	s.stats.Gaps++
	if len(s.gaps) >= 64 {
		s.gaps = s.gaps[1:]
	}
	s.gaps = append(s.gaps, [2]uint64{from, to})
	if to > s.next {
		s.advance(to)
	}
	return append(acts, SeqAction{Kind: ActSeqGap, From: from, To: to})
}

// firstMoved: the stream's first sequence is past next+1: what lies
// between was removed (retention).
func (s *Sequencer) firstMoved(streamFirst uint64, acts []SeqAction) []SeqAction {
	if streamFirst > s.next+1 {
		// Held messages below the stream's first were delivered before
		// their removal: they are passed on, the rest is the gap.
		to := streamFirst - 1
		if len(s.held) > 0 && s.held[0] <= to {
			to = s.held[0] - 1
		}
		if to > s.next {
			acts = s.gap(s.next+1, to, acts)
		}
	}
	return acts
}

// Arrive: the consumer delivered message seq of size bytes, with the
// consumer (delivery) sequence dseq; first: its first delivery (the
// shell keeps the message, replacing an earlier copy of the same seq).
// The message is either passed on or held until ActSeqPass or ActSeqDrop
// names it.
func (s *Sequencer) Arrive(seq, dseq uint64, first bool, bytes int, now int64) []SeqAction {
	var pred uint64
	if s.lastDlv == 0 || dseq != s.lastDlv+1 {
		s.chainOK = false // a delivery went elsewhere, or the session's first
	}
	if first {
		if s.chainOK {
			pred = s.lastFirst
		}
		s.lastFirst, s.chainOK = seq, true
	}
	if dseq > s.lastDlv {
		s.lastDlv = dseq
	}
	if seq <= s.next {
		for _, g := range s.gaps {
			if seq >= g[0] && seq <= g[1] {
				s.stats.Late++
			}
		}
		return []SeqAction{{Kind: ActSeqPass, Seq: seq}} // a redelivery
	}
	if _, ok := s.heldBytes[seq]; ok {
		if pred != 0 {
			s.pred[seq] = pred
		}
		return s.release(now, nil) // held already; the shell keeps the newer copy
	}
	if s.passes(seq, pred) {
		acts := []SeqAction{{Kind: ActSeqPass, Seq: seq}}
		s.advance(seq)
		return s.release(now, acts)
	}
	if s.bytes+int64(bytes) > s.cfg.MaxBytes && len(s.held) > 0 {
		s.stats.Dropped++
		return s.release(now, []SeqAction{{Kind: ActSeqDrop, Seq: seq}})
	}
	i, _ := slices.BinarySearch(s.held, seq)
	s.held = slices.Insert(s.held, i, seq)
	s.heldBytes[seq] = bytes
	if pred != 0 {
		s.pred[seq] = pred
	}
	s.bytes += int64(bytes)
	s.stats.HeldTotal++
	return s.release(now, nil)
}

// passes reports whether message seq, with predecessor pred (0: not
// proven), may be passed on now.
func (s *Sequencer) passes(seq, pred uint64) bool {
	return seq <= s.next+1 || (pred != 0 && pred <= s.next) || seq == s.expect
}

// advance records seq as passed on in order.
func (s *Sequencer) advance(seq uint64) {
	s.next = seq
	s.expect = 0
	s.probeDue = 0
}

func (s *Sequencer) pass(seq uint64, acts []SeqAction) []SeqAction {
	s.bytes -= int64(s.heldBytes[seq])
	delete(s.heldBytes, seq)
	delete(s.pred, seq)
	s.held = s.held[1:]
	if seq > s.next {
		s.advance(seq)
	}
	return append(acts, SeqAction{Kind: ActSeqPass, Seq: seq})
}

// release passes on the held messages that may go, and asks for a probe
// when the first held one waits for an answer.
func (s *Sequencer) release(now int64, acts []SeqAction) []SeqAction {
	for len(s.held) > 0 {
		h := s.held[0]
		if s.passes(h, s.pred[h]) {
			acts = s.pass(h, acts)
			continue
		}
		break
	}
	if len(s.held) > 0 && !s.probing && now >= s.probeDue {
		s.probing = true
		s.probeAfter = s.next
		s.stats.Probes++
		acts = append(acts, SeqAction{Kind: ActSeqProbe, Seq: s.next})
	}
	return acts
}

// ProbeResult answers ActSeqProbe: first is the stream sequence of the
// consumer's first message after the probe's sequence, found false when
// the stream has none; ackFloor is the consumer's ack floor, read before
// the stream (0: unknown); failed: the probe could not be made (it is
// asked again a little later).
//
// A first message found at or below the ack floor is acknowledged, not
// removed (it was in the stream after the floor was read): passed on
// already, by an earlier run of the bridge whose acknowledgement of an
// earlier message was lost (sent to a NATS node killed with it, or
// published while the connection was reconnecting) and which ended before
// that one came again. The server never delivers it again: the sequencer
// goes past it (no gap: the local side has it) and asks about the next.
// Before, it waited for it forever, holding what came after (and, the
// consumer's max ack pending reached, the server delivered nothing more),
// with nothing logged: TestBridgeKillNine stalled at site B.
func (s *Sequencer) ProbeResult(after, first, streamFirst, ackFloor uint64, found, failed bool, now int64) []SeqAction {
	if !s.probing || after != s.probeAfter {
		return nil
	}
	s.probing = false
	if failed {
		s.probeDue = now + s.cfg.RegapAfter/4
		return nil
	}
	if after != s.next {
		return s.release(now, nil) // moved on meanwhile: ask about the new place
	}
	if len(s.held) == 0 {
		return nil
	}
	acts := s.firstMoved(streamFirst, nil)
	if after != s.next {
		return s.release(now, acts)
	}
	if !found || first > s.held[0] {
		// The first held message is itself gone from the stream since it
		// was delivered, and nothing of the consumer's lies before it.
		first = s.held[0]
	}
	if s.expect != 0 && first > s.expect {
		// The message waited for is gone from the stream (a deletion): it
		// will not come again. Say so, and go on.
		acts = s.gap(s.expect, first-1, acts)
	}
	if first < s.held[0] && first <= ackFloor {
		// Found in the stream (below the first held message) and
		// acknowledged: an earlier run passed it on, and it will not
		// come again. Go past it; release asks about the next at once.
		s.advance(first)
		return s.release(now, acts)
	}
	s.expect = first
	s.probeDue = now + s.cfg.RegapAfter
	return s.release(now, acts)
}

// Tick advances time: a wait for a missing message longer than RegapAfter
// asks the stream again.
func (s *Sequencer) Tick(now int64) []SeqAction {
	switch {
	case len(s.held) == 0:
		s.waitSince = 0
	case s.waitSince == 0 || s.waitNext != s.next:
		s.waitSince, s.waitNext = now, s.next
	}
	if len(s.held) == 0 || s.probing {
		return nil
	}
	return s.release(now, nil)
}

// Waiting reports, as of the last Tick, how long messages have been held
// back while the sequencer waits for the one after sequence after (0: none
// held, or the wait began at that Tick), and how many are held. A wait
// that lasts is a stall the shell logs: every probe answered, every
// heartbeat received, nothing passed on.
func (s *Sequencer) Waiting(now int64) (waited int64, after uint64, held int) {
	if s.waitSince == 0 || len(s.held) == 0 || s.waitNext != s.next {
		return 0, s.next, len(s.held)
	}
	return now - s.waitSince, s.next, len(s.held)
}
