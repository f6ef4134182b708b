package multicast

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// bigBody is the deterministic body of message seq of n bytes: "seq:" then a pattern that
// depends on seq and the offset, so a misplaced or missing fragment changes it.
func bigBody(seq uint64, n int) []byte {
	b := []byte(strconv.FormatUint(seq, 10) + ":")
	for i := len(b); i < n; i++ {
		b = append(b, byte('a'+(uint64(i)*7+seq)%26))
	}
	return b[:max(n, len(b))]
}

// checkBigBody reports whether body is bigBody of its own sequence prefix.
func checkBigBody(seq uint64, body []byte) bool {
	return bytes.Equal(body, bigBody(seq, len(body)))
}

// A message larger than one datagram goes as fragments: each its own DATA datagram within the
// MTU, flag FRAGMENT, all with the message's stream sequence; the small messages around it are
// packed as before; a receiver core gets the message back whole, in order.
func TestSenderCore_Fragments(t *testing.T) {
	for _, auth := range []*Auth{nil, NewAuth([]byte("k"), 3)} {
		t.Run(fmt.Sprintf("auth=%v", auth != nil), func(t *testing.T) {
			s := mustSenderCore(t, SenderCoreConfig{Profile: ProfileLowLatency, Auth: auth})
			r := mustReceiverCore(t, ReceiverCoreConfig{Auth: auth})
			big := bigBody(2, 200_000)
			pb, _ := AppendMessage(nil, []Header{{"k", "v"}}, big)
			if err := s.Publish(t0, "t", msg("1")); err != nil {
				t.Fatal(err)
			}
			if err := s.Publish(t0, "t", pb); err != nil {
				t.Fatal(err)
			}
			if err := s.Publish(t0, "t", msg("3")); err != nil {
				t.Fatal(err)
			}
			s.Flush(t0)
			out := s.Ready()
			var frags, total int
			for _, b := range out {
				if len(b) > DefaultMTU {
					t.Fatalf("datagram of %d bytes, MTU %d", len(b), DefaultMTU)
				}
				var p Packet
				if err := Decode(b, &p); err != nil {
					t.Fatal(err)
				}
				if p.Flags&FlagFragment != 0 {
					frags++
					if len(p.Records) != 1 || !p.Records[0].Frag || p.Records[0].Seq != 2 || p.Records[0].Total != uint32(len(pb)) {
						t.Fatalf("fragment datagram %d: %+v", p.Seq, p.Records)
					}
					total += len(p.Records[0].Payload)
				}
				if err := r.Handle(t0, sndAddr, b); err != nil {
					t.Fatal(err)
				}
			}
			want := (len(pb) + s.fragmentData() - 1) / s.fragmentData()
			if frags != want || total != len(pb) {
				t.Errorf("%d fragments carrying %d bytes, want %d carrying %d", frags, total, want, len(pb))
			}
			evs, _ := r.Ready()
			var got []string
			for _, e := range evs {
				if m, ok := e.(Message); ok {
					if m.StreamSeq == 2 && (!bytes.Equal(m.Body, big) || len(m.Headers) != 1 || m.Headers[0] != (Header{"k", "v"})) {
						t.Fatalf("message 2: %d bytes, headers %v", len(m.Body), m.Headers)
					}
					got = append(got, fmt.Sprint(m.StreamSeq))
				}
			}
			if strings.Join(got, " ") != "1 2 3" {
				t.Errorf("delivered %v, want 1 2 3", got)
			}
			if c := s.Counters(); c.Fragmented != 1 || c.Fragments != uint64(want) {
				t.Errorf("sender counters %+v", c)
			}
			if c := r.Counters(); c.Reassembled != 1 || c.Fragments != uint64(want) || r.State().Reassembly != 0 {
				t.Errorf("receiver counters %+v, reassembly %d bytes left", c, r.State().Reassembly)
			}
		})
	}
	s := mustSenderCore(t, SenderCoreConfig{})
	if err := s.Publish(t0, "t", make([]byte, MaxMessage+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a message above MaxMessage: got %v, want ErrTooLarge", err)
	}
}

// A repaired fragment keeps its FRAGMENT flag (the RDATA is the same datagram).
func TestSenderCore_FragmentRepairKeepsFlag(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{Profile: ProfileLowLatency})
	s.Publish(t0, "t", make([]byte, 5000))
	s.Flush(t0)
	ps := decodeAll(t, s.Ready())
	var fragSeq uint64
	for _, p := range ps {
		if p.Flags&FlagFragment != 0 {
			fragSeq = p.Seq
			break
		}
	}
	nak, _ := AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeNAK, Session: s.Session(), Seq: 1}, Receiver: 9, Ranges: []Range{{fragSeq, fragSeq}}})
	if err := s.Step(t0.Add(time.Millisecond), sndAddr, nak); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range decodeAll(t, s.Ready()) {
		if p.Type == TypeRData && p.Seq == fragSeq {
			found = true
			if p.Flags != FlagRepair|FlagFragment || !p.Records[0].Frag {
				t.Errorf("RDATA flags %#x records %+v, want REPAIR|FRAGMENT", p.Flags, p.Records)
			}
		}
	}
	if !found {
		t.Fatal("no RDATA for the fragment")
	}
}

// A message whose fragments do not fit MaxReassembly is dropped and reported as a gap of its
// stream sequence, never a partial delivery; the next message is delivered.
func TestReceiverCore_ReassemblyBound(t *testing.T) {
	const bound = 16 << 10
	s := mustSenderCore(t, SenderCoreConfig{Profile: ProfileLowLatency})
	r := mustReceiverCore(t, ReceiverCoreConfig{MaxReassembly: bound})
	now := t0
	var evs []Event
	for i, size := range []int{10, 12_000, 40_000, 10} {
		seq := uint64(i + 1)
		p, _ := AppendMessage(nil, nil, bigBody(seq, size))
		s.Publish(now, "t", p)
		s.Flush(now)
		for _, b := range s.Ready() {
			r.Handle(now, sndAddr, b)
			if st := r.State(); st.Reassembly > bound {
				t.Fatalf("reassembly holds %d bytes, bound %d", st.Reassembly, bound)
			}
			e, _ := r.Ready()
			evs = append(evs, e...)
		}
		now = now.Add(time.Millisecond)
	}
	var got []string
	for _, e := range evs[1:] {
		switch e := e.(type) {
		case Message:
			if !checkBigBody(e.StreamSeq, e.Body) {
				t.Fatalf("message %d: body of %d bytes is not its own", e.StreamSeq, len(e.Body))
			}
			got = append(got, fmt.Sprintf("msg %d (%d bytes)", e.StreamSeq, len(e.Body)))
		case Gap:
			got = append(got, fmt.Sprintf("gap %d-%d %v", e.From, e.To, e.Reason))
		}
	}
	want := "msg 1 (10 bytes), msg 2 (12000 bytes), gap 3-3 expired, msg 4 (10 bytes)"
	if strings.Join(got, ", ") != want {
		t.Errorf("events %q, want %q", strings.Join(got, ", "), want)
	}
	if c := r.Counters(); c.ReassemblyDrops != 1 || c.Gaps != 1 {
		t.Errorf("counters %+v: want 1 reassembly drop, 1 gap", c)
	}
	if st := r.State(); st.Reassembly != 0 || st.Partials != 0 {
		t.Errorf("after the gap: %+v, want no reassembly left", st)
	}
}

// Forged fragments from the sender's own address (no key): random streams, sequences, totals up
// to MaxMessage and offsets. The reassembly stays within MaxReassembly, the heap within it plus
// the other bounds, and a real fragmented message sent afterwards still arrives.
func TestReceiverCore_MemoryBoundForgedFragments(t *testing.T) {
	const maxRe = 8 << 20
	g := dgb{session: tsess}
	r := mustReceiverCore(t, ReceiverCoreConfig{MaxReassembly: maxRe, MaxBytes: 8 << 20})
	now := t0
	live(t, r, g, &now)
	rng := rand.New(rand.NewPCG(21, 22))
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	chunk := make([]byte, 1300)
	peak, peakPartials := 0, 0
	seq := r.leading
	for i := 0; i < 20000; i++ {
		seq++
		total := uint32(1 + rng.IntN(MaxMessage+MaxMessage/8)) // some above MaxMessage
		off := uint32(0)
		if total > 1300 {
			off = uint32(rng.IntN(int(total)))
		}
		n := min(int(total-min(off, total)), 1300)
		if i%7 == 0 {
			n = 1300 // sometimes past the total
		}
		rec := Record{Stream: uint32(2 + rng.IntN(3)), Seq: uint64(2 + rng.IntN(5000)), Frag: true, Total: total, Offset: off, Payload: chunk[:max(n, 1)]}
		r.Handle(now, sndAddr, g.fdata(seq, seq-100, false, rec))
		now = now.Add(20 * time.Microsecond)
		for dl := r.Deadline(); !dl.IsZero() && !dl.After(now); dl = r.Deadline() {
			r.Tick(now)
		}
		r.Ready()
		st := r.State()
		peak, peakPartials = max(peak, st.Reassembly), max(peakPartials, st.Partials)
		if st.Reassembly > maxRe {
			t.Fatalf("after %d forged fragments: reassembly %d bytes, bound %d", i+1, st.Reassembly, maxRe)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	heap := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	// The flood is over: a real 300 KB message on the live stream is reassembled (the oldest
	// forged partials make room).
	real := bigBody(4, 300_000)
	var evs []Event
	for _, f := range frags(1, 4, string(real), 230) {
		seq++
		r.Handle(now, sndAddr, g.fdata(seq, seq-100, false, f))
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	delivered := false
	for _, e := range evs {
		if m, ok := e.(Message); ok && m.Stream == 1 && m.StreamSeq == 4 && bytes.Equal(m.Body, real) {
			delivered = true
		}
	}
	if !delivered {
		t.Errorf("the real message after the flood was not delivered: %v", evStrings(evs))
	}
	if st := r.State(); st.Reassembly > maxRe {
		t.Errorf("reassembly %d bytes, bound %d", st.Reassembly, maxRe)
	}
	c := r.Counters()
	t.Logf("20,000 forged fragments: reassembly peak %d bytes in %d partial messages (bound %d); heap %+d kB; forged %d, reassembly drops %d, fragments taken %d",
		peak, peakPartials, maxRe, heap>>10, c.ForgedFragments, c.ReassemblyDrops, c.Fragments)
	if c.ForgedFragments == 0 || c.ReassemblyDrops == 0 {
		t.Errorf("counters %+v: want forged fragments and reassembly drops counted", c)
	}
	if limit := int64(maxRe + 8<<20 + MaxHole*256); heap > limit {
		t.Errorf("heap grew by %d bytes, want at most %d", heap, limit)
	}
}

// Seeded simulation: 200 KB and smaller messages among small ones, 10% loss per receiver plus
// bursts, ten receivers in both modes: every message arrives whole and in order, no gaps.
func TestSim_LargeMessagesLossy(t *testing.T) {
	for _, mode := range []Mode{Ordered, Skip} {
		t.Run(fmt.Sprintf("mode=%d", mode), func(t *testing.T) {
			s := newSim(t, 31, 10, SenderCoreConfig{Profile: ProfileLowLatency}, ReceiverCoreConfig{Profile: ProfileLowLatency, Mode: mode})
			for i := range s.loss {
				s.loss[i] = lossModel{p: 0.10, burstP: 0.002, burstLen: 20}
			}
			sizes := []int{200_000, 64_000, 1_500, 2, 150_000}
			count := map[string]uint64{}
			sent := 0
			pub := func(now time.Time) {
				if sent >= 60 {
					return
				}
				for _, topic := range []string{"files", "ticks"} {
					count[topic]++
					n := 8
					if topic == "files" {
						n = sizes[sent%len(sizes)]
					}
					body := bigBody(count[topic], n)
					p, _ := AppendMessage(nil, []Header{{"n", fmt.Sprint(count[topic])}}, body)
					if err := s.snd.Publish(now, topic, p); err != nil {
						t.Fatal(err)
					}
				}
				sent++
				s.snd.Flush(now)
			}
			s.run(s.now.Add(300*time.Millisecond), 2*time.Millisecond, pub)
			s.run(s.now.Add(2*time.Second), 0, nil)
			for i := range s.rcv {
				next := map[string]uint64{}
				got := map[string]uint64{}
				for _, e := range s.events[i] {
					switch e := e.(type) {
					case Gap:
						t.Fatalf("receiver %d: %v, want no gap (every loss repairable); counters %+v", i, e, s.rcv[i].Counters())
					case Message:
						if !checkBigBody(e.StreamSeq, e.Body) || e.Headers[0].Value != fmt.Sprint(e.StreamSeq) {
							t.Fatalf("receiver %d: %s %d: %d bytes, not the message sent", i, e.Topic, e.StreamSeq, len(e.Body))
						}
						if mode == Ordered && e.StreamSeq != next[e.Topic]+1 {
							t.Fatalf("receiver %d: %s %d after %d", i, e.Topic, e.StreamSeq, next[e.Topic])
						}
						next[e.Topic] = max(next[e.Topic], e.StreamSeq)
						got[e.Topic]++
					}
				}
				for topic, n := range count {
					if got[topic] != n {
						t.Fatalf("receiver %d: %s: %d messages, want %d", i, topic, got[topic], n)
					}
				}
			}
			c := s.snd.Counters()
			t.Logf("%d messages (%d fragmented into %d datagrams), %d losses at receivers, %d repairs", c.Messages, c.Fragmented, c.Fragments, s.losses, c.Repairs)
			if c.Fragmented < 40 || s.losses == 0 || c.Repairs == 0 {
				t.Errorf("counters %+v, %d losses: the test did not exercise fragments under loss", c, s.losses)
			}
		})
	}
}
