package multicast

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/herald-mq/herald/internal/testenv"
)

func mustReceiverCore(t *testing.T, cfg ReceiverCoreConfig) *ReceiverCore {
	t.Helper()
	cfg.Rand = rand.New(rand.NewPCG(3, 4))
	r, err := NewReceiverCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var sndAddr = netip.MustParseAddrPort("198.18.0.1:7400")

// feed publishes bodies on topic through s and hands every datagram to r, returning r's events.
func feed(t *testing.T, s *SenderCore, r *ReceiverCore, now time.Time, topic string, bodies ...string) []Event {
	t.Helper()
	for _, b := range bodies {
		s.Publish(now, topic, msg(b))
	}
	s.Flush(now)
	var evs []Event
	for _, d := range s.Ready() {
		r.Handle(now, sndAddr, d)
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	return evs
}

func TestReceiverCore_AuthAndReplay(t *testing.T) {
	key := []byte("k")
	s := mustSenderCore(t, SenderCoreConfig{Auth: NewAuth(key, 1)})
	r := mustReceiverCore(t, ReceiverCoreConfig{Auth: NewAuth(key, 1)})
	evs := feed(t, s, r, t0, "a", "1", "2")
	if len(evs) != 3 { // SessionChange, 2 messages
		t.Fatalf("got %d events, want 3: %v", len(evs), evs)
	}
	// A forged datagram: valid layout, wrong key.
	forger := mustSenderCore(t, SenderCoreConfig{Auth: NewAuth([]byte("guess"), 1)})
	forger.Publish(t0, "a", msg("forged"))
	forger.Flush(t0)
	for _, d := range forger.Ready() {
		if err := r.Handle(t0, sndAddr, d); err != ErrAuth {
			t.Errorf("forged datagram: got %v, want %v", err, ErrAuth)
		}
	}
	// A replay of an older session (signed with the right key, recorded earlier).
	old := mustSenderCore(t, SenderCoreConfig{Auth: NewAuth(key, 1)})
	old.session = s.session - 1<<32 // started a second earlier
	old.Publish(t0, "a", msg("old"))
	old.Flush(t0)
	for _, d := range old.Ready() {
		r.Handle(t0, sndAddr, d)
	}
	if ev, _ := r.Ready(); len(ev) != 0 || r.Session() != s.Session() {
		t.Errorf("replayed old session: got events %v, session %x; want none, %x", ev, r.Session(), s.Session())
	}
	c := r.Counters()
	if c.AuthFailures != 2 || c.Replays == 0 {
		t.Errorf("got %d auth failures and %d replays, want 2 and > 0", c.AuthFailures, c.Replays)
	}
	// Replay of a datagram already received: a duplicate, nothing delivered.
	s.Publish(t0, "a", msg("3"))
	s.Flush(t0)
	d := append([]byte(nil), s.Ready()[0]...)
	r.Handle(t0, sndAddr, d)
	r.Handle(t0, sndAddr, d)
	if ev, _ := r.Ready(); len(ev) != 1 {
		t.Errorf("datagram handled twice: got %d events, want 1", len(ev))
	}
}

func TestReceiverCore_TopicFilter(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{})
	r := mustReceiverCore(t, ReceiverCoreConfig{Filter: topicFilter([]string{"px.*", "ops.>"})})
	var got []string
	for _, topic := range []string{"px.eu", "px.eu.fast", "ops.a.b", "news", "px"} {
		for _, e := range feed(t, s, r, t0, topic, "1") {
			if m, ok := e.(Message); ok {
				got = append(got, m.Topic)
			}
		}
	}
	if len(got) != 2 || got[0] != "px.eu" || got[1] != "ops.a.b" {
		t.Errorf("got %v, want [px.eu ops.a.b]", got)
	}
}

func TestMatchTopic(t *testing.T) {
	tests := []struct {
		pattern, topic string
		want           bool
	}{
		{"", "a.b", true}, {"a.b", "a.b", true}, {"a.b", "a.c", false}, {"a.*", "a.b", true},
		{"a.*", "a.b.c", false}, {"a.>", "a.b.c", true}, {"a.>", "a", false}, {">", "a", true},
		{"*.b", "a.b", true}, {"*", "a.b", false}, {"a.*.c", "a.x.c", true},
	}
	for _, tt := range tests {
		if got := MatchTopic(tt.pattern, tt.topic); got != tt.want {
			t.Errorf("MatchTopic(%q, %q) got %v, want %v", tt.pattern, tt.topic, got, tt.want)
		}
	}
}

func TestShells_CloseIdempotentNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := NewSender(SenderConfig{Group: "239.255.42.1:7499", Interface: "lo", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReceiver(ReceiverConfig{Group: "239.255.42.1:7499", Interface: "lo", RcvBuf: 1 << 20, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(t.Context()); err != nil {
		testenv.Missing(t, testenv.RootTestsEnv, "needs multicast on lo (ip link set lo multicast on): "+err.Error())
	}
	if err := r.Open(t.Context()); err != nil {
		testenv.Missing(t, testenv.RootTestsEnv, "needs multicast on lo (ip link set lo multicast on): "+err.Error())
	}
	s.Publish("a", nil, []byte("x"))
	for _, c := range []func() error{s.Close, s.Close, r.Close, r.Close} {
		if err := c(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if err := s.Publish("a", nil, nil); err != ErrClosed {
		t.Errorf("Publish after Close: got %v, want %v", err, ErrClosed)
	}
	if _, ok := <-r.Events(); ok {
		// drain whatever arrived; the channel must end closed
		for range r.Events() {
		}
	}
	// Goroutines end shortly after Close returns: wait for them, up to 2s.
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("got %d goroutines 2s after Close, want at most %d", runtime.NumGoroutine(), before)
			break
		}
	}
}

func TestConfig_Validate(t *testing.T) {
	for _, g := range []string{"10.0.0.1:7400", "239.255.0.1", "nonsense", "[ff02::1]:7400"} {
		if _, err := NewSender(SenderConfig{Group: g}); err == nil {
			t.Errorf("group %q: got no error", g)
		}
		if _, err := NewReceiver(ReceiverConfig{Group: g}); err == nil {
			t.Errorf("group %q: got no error", g)
		}
	}
	if _, err := NewSender(SenderConfig{Profile: "fast"}); err == nil {
		t.Error("profile fast: got no error")
	}
}

// dgb builds datagrams of one session by hand, for scripted receiver tests and the conformance
// vectors.
type dgb struct {
	session uint64
	auth    *Auth
	seal    *Sealer // seals instead of signing
}

func (g dgb) enc(p *Packet) []byte {
	p.Session = g.session
	b, err := AppendPacket(nil, p)
	if err != nil {
		panic(err)
	}
	if g.seal != nil {
		return g.seal.Seal(b)
	}
	return g.auth.Sign(b)
}

func rec(stream uint32, seq uint64, body string) Record {
	p, _ := AppendMessage(nil, nil, []byte(body))
	return Record{Stream: stream, Seq: seq, Payload: p}
}

func (g dgb) data(seq, trailing uint64, rs ...Record) []byte {
	return g.enc(&Packet{PacketHeader: PacketHeader{Type: TypeData, Seq: seq, Trailing: trailing}, Records: rs})
}

// frags splits the message with body into n fragment records of stream seq (the last takes the rest).
func frags(stream uint32, seq uint64, body string, n int) []Record {
	p, _ := AppendMessage(nil, nil, []byte(body))
	var out []Record
	k := (len(p) + n - 1) / n
	for off := 0; off < len(p); off += k {
		end := min(off+k, len(p))
		out = append(out, Record{Stream: stream, Seq: seq, Frag: true, Total: uint32(len(p)), Offset: uint32(off), Payload: p[off:end]})
	}
	return out
}

// fdata is a DATA datagram (RDATA when repair) holding fragment records.
func (g dgb) fdata(seq, trailing uint64, repair bool, rs ...Record) []byte {
	h := PacketHeader{Type: TypeData, Flags: FlagFragment, Seq: seq, Trailing: trailing}
	if repair {
		h.Type, h.Flags = TypeRData, FlagFragment|FlagRepair
	}
	return g.enc(&Packet{PacketHeader: h, Records: rs})
}

func (g dgb) rdata(seq, trailing uint64, rs ...Record) []byte {
	return g.enc(&Packet{PacketHeader: PacketHeader{Type: TypeRData, Flags: FlagRepair, Seq: seq, Trailing: trailing}, Records: rs})
}

func (g dgb) hb(leading, trailing uint64, ss ...StreamSeq) []byte {
	return g.enc(&Packet{PacketHeader: PacketHeader{Type: TypeHeartbeat, Seq: leading, Trailing: trailing}, Leading: leading, Streams: ss})
}

func (g dgb) cat(seq, trailing uint64, es ...CatalogEntry) []byte {
	return g.enc(&Packet{PacketHeader: PacketHeader{Type: TypeCatalog, Seq: seq, Trailing: trailing}, Catalog: es})
}

func (g dgb) loss(leading, trailing uint64, reason Reason, rs ...Range) []byte {
	return g.enc(&Packet{PacketHeader: PacketHeader{Type: TypeLoss, Seq: leading, Trailing: trailing}, Reason: reason, Ranges: rs})
}

func (g dgb) ncf(leading, trailing uint64, st NCFStatus, rs ...Range) []byte {
	return g.enc(&Packet{PacketHeader: PacketHeader{Type: TypeNCF, Seq: leading, Trailing: trailing}, Status: st, Ranges: rs})
}

// evStrings renders events compactly: "msg topic seq body", "gap topic from-to reason",
// "session old new" (low 16 bits of the ids).
func evStrings(evs []Event) []string {
	var out []string
	for _, e := range evs {
		switch e := e.(type) {
		case Message:
			out = append(out, fmt.Sprintf("msg %s %d %s", e.Topic, e.StreamSeq, e.Body))
		case Gap:
			out = append(out, fmt.Sprintf("gap %s %d-%d %v", e.Topic, e.From, e.To, e.Reason))
		case SessionChange:
			out = append(out, fmt.Sprintf("session %x %x", e.Old&0xffff, e.New&0xffff))
		}
	}
	return out
}

// script hands each datagram to r at now (advancing by step, running Tick when due) and returns
// the events.
func script(r *ReceiverCore, now *time.Time, step time.Duration, dgs ...[]byte) []string {
	var evs []Event
	for _, d := range dgs {
		for d := r.Deadline(); !d.IsZero() && !d.After(*now); d = r.Deadline() {
			r.Tick(*now)
			e, _ := r.Ready()
			evs = append(evs, e...)
		}
		r.Handle(*now, sndAddr, d)
		e, _ := r.Ready()
		evs = append(evs, e...)
		*now = now.Add(step)
	}
	return evStrings(evs)
}

const tsess = 0x6567000011112222

// Late join (issue 11, found 1): the first datagram after the join point is lost and repaired
// later. Its records must be delivered (or reported as a gap), never dropped as duplicates.
func TestReceiverCore_LateJoinFirstDatagramRepaired(t *testing.T) {
	g := dgb{session: tsess}
	a := CatalogEntry{Stream: 1, First: 2, Topic: "a"}
	for _, tc := range []struct {
		name string
		dgs  [][]byte
		want []string
	}{
		{"join on heartbeat, catalog known, repair after", [][]byte{
			g.hb(100, 1, StreamSeq{1, 50}), // join: start after 100, stream a's 50 was before
			g.cat(102, 1, a),               // 101 (a 51) is lost
			g.data(103, 1, rec(1, 52, "52")),
			g.rdata(101, 1, rec(1, 51, "51")),
		}, []string{"session 0 2222", "msg a 51 51", "msg a 52 52"}},
		{"join on catalog, first data lost", [][]byte{
			g.cat(100, 1, a),
			g.data(102, 1, rec(1, 52, "52")), // 101 (a 51) is lost
			g.rdata(101, 1, rec(1, 51, "51")),
			g.data(103, 1, rec(1, 53, "53")),
		}, []string{"session 0 2222", "msg a 51 51", "msg a 52 52", "msg a 53 53"}},
		{"join on data of another stream, catalog later", [][]byte{
			g.data(100, 1, rec(2, 7, "b7")),
			g.data(102, 1, rec(1, 52, "52")), // 101 (a 51) is lost
			g.cat(103, 1, a, CatalogEntry{Stream: 2, First: 2, Topic: "b"}),
			g.rdata(101, 1, rec(1, 51, "51")),
		}, []string{"session 0 2222", "msg b 7 b7", "msg a 51 51", "msg a 52 52"}},
		{"lost for good, heartbeat before the join names the start", [][]byte{
			g.hb(100, 1, StreamSeq{1, 50}),
			g.cat(102, 1, a),
			g.data(103, 1, rec(1, 52, "52")),
			g.loss(103, 1, ReasonGone, Range{101, 101}),
		}, []string{"session 0 2222", "gap a 51-51 gone", "msg a 52 52"}},
		{"lost for good, nothing names the start: gap from 1", [][]byte{
			g.cat(100, 1, a),
			g.data(102, 1, rec(1, 52, "52")),
			g.ncf(102, 1, NCFGone, Range{101, 101}),
		}, []string{"session 0 2222", "gap a 1-51 gone", "msg a 52 52"}},
		{"only a heartbeat tail after the loss", [][]byte{
			g.hb(100, 1, StreamSeq{1, 50}),
			g.cat(102, 1, a),
			g.loss(102, 1, ReasonGone, Range{101, 101}),
			g.hb(102, 1, StreamSeq{1, 51}),
		}, []string{"session 0 2222", "gap a 51-51 gone"}},
		{"no loss: history before the join is not ours", [][]byte{
			g.hb(100, 1, StreamSeq{1, 40}),
			g.cat(101, 1, a),
			g.data(102, 1, rec(1, 52, "52")), // a 41-51 went out before the join, in datagrams < 100
			g.data(103, 1, rec(1, 53, "53")),
		}, []string{"session 0 2222", "msg a 52 52", "msg a 53 53"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustReceiverCore(t, ReceiverCoreConfig{})
			now := t0
			got := script(r, &now, time.Millisecond, tc.dgs...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// live starts r on session g with stream "a" known and messages 1..3 delivered, at *now.
func live(t *testing.T, r *ReceiverCore, g dgb, now *time.Time) uint64 {
	t.Helper()
	got := script(r, now, time.Millisecond,
		g.cat(1, 1, CatalogEntry{Stream: 1, First: 1, Topic: "a"}),
		g.data(2, 1, rec(1, 1, "1")), g.data(3, 1, rec(1, 2, "2")), g.data(4, 1, rec(1, 3, "3")))
	if len(got) != 4 {
		t.Fatalf("live session: got %q", got)
	}
	return 4
}

// Issue 11, found 6 / deliver 4: without a key, a host on the LAN sends datagrams far ahead of
// the window. They are not believed: counted, and the live traffic goes on without a gap.
func TestReceiverCore_ForgedJumpsNotBelieved(t *testing.T) {
	g := dgb{session: tsess}
	for _, tc := range []struct {
		name   string
		forged []byte
	}{
		{"heartbeat 2^40 ahead", g.hb(1<<40, 1<<40-5, StreamSeq{1, 1 << 40})},
		{"data 2^20 ahead", g.data(1<<20, 1, rec(1, 1<<20, "forged"))},
		{"data 2^40 ahead", g.data(1<<40, 1<<40, rec(1, 1<<40, "forged"))},
		{"loss 2^20 ahead", g.loss(1<<20, 1<<20, ReasonGone, Range{1, 1 << 20})},
		{"ncf with trailing edge 2^20 ahead", g.ncf(1<<20, 1<<20+1, NCFGone, Range{1, 1 << 20})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustReceiverCore(t, ReceiverCoreConfig{})
			now := t0
			live(t, r, g, &now)
			if err := r.Handle(now, sndAddr, tc.forged); err != ErrAhead {
				t.Errorf("forged datagram: got %v, want %v", err, ErrAhead)
			}
			got := script(r, &now, time.Millisecond, g.data(5, 1, rec(1, 4, "4")), g.data(6, 1, rec(1, 5, "5")),
				g.hb(6, 1, StreamSeq{1, 5}))
			if want := []string{"msg a 4 4", "msg a 5 5"}; !slices.Equal(got, want) {
				t.Errorf("after the forged datagram: got %q, want %q", got, want)
			}
			if c, st := r.Counters(), r.State(); c.Ahead != 1 || st.Tracked > 2 {
				t.Errorf("got %d ahead, %d sequences tracked; want 1 and at most 2", c.Ahead, st.Tracked)
			}
		})
	}
	// A receiver cut off for longer than the session timeout believes the jump: the real sender
	// moved on. What it missed is reported, not silently skipped.
	r := mustReceiverCore(t, ReceiverCoreConfig{})
	now := t0
	live(t, r, g, &now)
	now = now.Add(DefaultSessionTimeout)
	got := script(r, &now, time.Millisecond, g.data(1<<20, 1<<20, rec(1, 1<<20, "back")))
	if want := []string{"gap a 4-1048575 gone", "msg a 1048576 back"}; !slices.Equal(got, want) {
		t.Errorf("after a silence: got %q, want %q", got, want)
	}
}

// One unauthenticated datagram with a new session id does not retire the live session; a new
// session takes over once the old one has been silent for the session timeout, and what it sent
// meanwhile is kept and delivered then, without repairs.
func TestReceiverCore_SessionNeedsSilence(t *testing.T) {
	g, f := dgb{session: tsess}, dgb{session: tsess + 1<<32}
	r := mustReceiverCore(t, ReceiverCoreConfig{})
	now := t0
	live(t, r, g, &now)
	fc := CatalogEntry{Stream: 1, First: 1, Topic: "a"}
	if err := r.Handle(now, sndAddr, f.cat(1, 1, fc)); err != ErrOtherSession {
		t.Errorf("datagram of another session: got %v, want %v", err, ErrOtherSession)
	}
	got := script(r, &now, time.Millisecond, f.data(2, 1, rec(1, 1, "new 1")), g.data(5, 1, rec(1, 4, "4")))
	if want := []string{"msg a 4 4"}; !slices.Equal(got, want) || r.Session() != tsess {
		t.Errorf("got %q in session %x, want %q in %x", got, r.Session(), want, uint64(tsess))
	}
	// The old sender goes quiet; the new session's next datagram, after the timeout, takes over.
	now = now.Add(DefaultSessionTimeout)
	got = script(r, &now, time.Millisecond, f.data(3, 1, rec(1, 2, "new 2")), g.data(6, 1, rec(1, 5, "old, late")))
	want := []string{"session 2222 2222", "msg a 1 new 1", "msg a 2 new 2"}
	if r.Session() != f.session || !slices.Equal(got, want) {
		t.Errorf("after the silence: got %q, want %q", got, want)
	}
	if c := r.Counters(); c.OtherSession != 2 || c.Sessions != 2 || c.NAKs != 0 || c.Replays != 1 {
		t.Errorf("got %d datagrams of another session, %d sessions, %d NAKs, %d replays; want 2, 2, 0, 1",
			c.OtherSession, c.Sessions, c.NAKs, c.Replays)
	}
}

// Within a session, datagrams come from one source: others are dropped and counted.
func TestReceiverCore_ForeignSource(t *testing.T) {
	g := dgb{session: tsess}
	r := mustReceiverCore(t, ReceiverCoreConfig{})
	now := t0
	live(t, r, g, &now)
	x := netip.MustParseAddrPort("198.18.0.66:7400")
	if err := r.Handle(now, x, g.data(5, 1, rec(1, 4, "forged"))); err != ErrForeignSource {
		t.Errorf("got %v, want %v", err, ErrForeignSource)
	}
	if got := script(r, &now, time.Millisecond, g.data(5, 1, rec(1, 4, "4"))); !slices.Equal(got, []string{"msg a 4 4"}) {
		t.Errorf("got %q, want the real message 4", got)
	}
	if c := r.Counters(); c.ForeignSource != 1 {
		t.Errorf("got %d foreign datagrams, want 1", c.ForeignSource)
	}
}

// The receiver's memory stays within its stated bound whatever a keyless host sends: forged
// control datagrams (HEARTBEATs, NCFs, LOSS) of the live session from its source address, with
// leading edges and ranges anywhere, streams by the thousand, and data for unknown streams.
func TestReceiverCore_MemoryBoundForgedControl(t *testing.T) {
	const maxBytes = 8 << 20
	g := dgb{session: tsess}
	r := mustReceiverCore(t, ReceiverCoreConfig{MaxBytes: maxBytes})
	now := t0
	live(t, r, g, &now)
	rng := rand.New(rand.NewPCG(11, 12))
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	var maxState ReceiverState
	ss := make([]StreamSeq, 100)
	big := make([]byte, 60000)
	for i := 0; i < 2000; i++ {
		lead := r.leading + uint64(rng.IntN(MaxHole+10))
		if i%100 == 0 {
			lead = rng.Uint64() >> 1
		}
		var d []byte
		switch i % 5 {
		case 0:
			for k := range ss {
				ss[k] = StreamSeq{Stream: rng.Uint32(), Seq: rng.Uint64() >> 1}
			}
			d = g.hb(lead, r.next, ss...)
		case 1:
			d = g.ncf(lead, r.next, NCFStatus(1+rng.IntN(3)), Range{0, lead})
		case 2:
			d = g.loss(lead, r.next, Reason(rng.IntN(6)), Range{rng.Uint64() >> 40, lead})
		case 3:
			d = g.data(lead, r.next, Record{Stream: rng.Uint32(), Seq: rng.Uint64() >> 1, Payload: big})
		case 4:
			d = g.cat(lead, r.next, CatalogEntry{Stream: rng.Uint32(), First: 1, Topic: string(big[:50000])})
		}
		r.Handle(now, sndAddr, d)
		now = now.Add(50 * time.Microsecond)
		for dl := r.Deadline(); !dl.IsZero() && !dl.After(now); dl = r.Deadline() {
			r.Tick(now)
		}
		r.Ready()
		st := r.State()
		maxState.Tracked, maxState.Streams = max(maxState.Tracked, st.Tracked), max(maxState.Streams, st.Streams)
		maxState.Bytes, maxState.Held = max(maxState.Bytes, st.Bytes), max(maxState.Held, st.Held)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	heap := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("2,000 forged datagrams: peak %d sequences tracked, %d streams, %d bytes held in %d records; heap %+d kB now; counters %+v",
		maxState.Tracked, maxState.Streams, maxState.Bytes, maxState.Held, heap>>10, r.Counters())
	if maxState.Tracked > MaxHole || maxState.Streams > MaxStreams || maxState.Bytes > maxBytes {
		t.Errorf("state %+v exceeds the bound (%d sequences, %d streams, %d bytes)", maxState, MaxHole, MaxStreams, maxBytes)
	}
	// The bound in bytes: MaxBytes plus 256 bytes per tracked sequence.
	if limit := int64(maxBytes + MaxHole*256); heap > limit {
		t.Errorf("heap grew by %d bytes, want at most %d", heap, limit)
	}
}

// A receiver behind its socket asks again for a missing datagram only every quarter budget:
// the answer to its last NAK may wait unread among the datagrams, and each duplicate request is
// a repair the sender charges to this receiver's budget. Caught up, the retries back off from
// the profile's retry interval again.
func TestReceiverCore_RetriesWhileBehindWaitAQuarterBudget(t *testing.T) {
	g := dgb{session: tsess}
	r := mustReceiverCore(t, ReceiverCoreConfig{})
	now := t0
	live(t, r, g, &now)
	naks := func(until time.Time) []time.Time {
		var at []time.Time
		for d := r.Deadline(); !d.IsZero() && !d.After(until); d = r.Deadline() {
			r.Tick(d)
			if _, out := r.Ready(); len(out) > 0 {
				at = append(at, d)
			}
		}
		return at
	}
	script(r, &now, 0, g.data(6, 1, rec(1, 5, "5"))) // 5 is missing
	r.SetBehind(true)
	at := naks(now.Add(r.t.budget))
	if len(at) < 2 {
		t.Fatalf("%d NAKs in a budget while behind, want it to keep asking", len(at))
	}
	for i := 1; i < len(at); i++ {
		if d := at[i].Sub(at[i-1]); d < r.t.budget/4 {
			t.Errorf("behind: NAK %d came %v after the one before, want at least %v (a quarter budget)", i+1, d, r.t.budget/4)
		}
	}
	// Caught up, a new hole: the first retry comes after the retry interval, not a quarter budget.
	r.SetBehind(false)
	now = at[len(at)-1]
	script(r, &now, 0, g.rdata(5, 1, rec(1, 4, "4")), g.data(8, 1, rec(1, 7, "7"))) // 7 is missing
	at = naks(now.Add(r.t.budget / 4))
	if len(at) < 2 || at[1].Sub(at[0]) >= r.t.budget/4 {
		t.Errorf("caught up: NAKs at %v, want a retry within a quarter budget of the first", at)
	}
}

// Issue 11, found 10: give-up is counted from the first NAK, and not at all while the receiver
// is behind its socket (a repair may wait there unread): a receiver more than the budget behind
// still recovers what the sender holds.
func TestReceiverCore_GiveUpFromFirstNAKNotWhileBehind(t *testing.T) {
	g := dgb{session: tsess}
	r := mustReceiverCore(t, ReceiverCoreConfig{})
	now := t0
	live(t, r, g, &now)
	var evs []string
	run := func(until time.Time) {
		for d := r.Deadline(); !d.IsZero() && !d.After(until); d = r.Deadline() {
			r.Tick(d)
			e, _ := r.Ready()
			evs = append(evs, evStrings(e)...)
		}
	}
	start := now
	evs = append(evs, script(r, &now, 0, g.data(6, 1, rec(1, 5, "5")))...) // 5 is missing
	r.SetBehind(true)
	run(start.Add(time.Second))
	evs = append(evs, script(r, &now, 0, g.rdata(5, 1, rec(1, 4, "4")))...)
	if want := []string{"msg a 4 4", "msg a 5 5"}; !slices.Equal(evs, want) {
		t.Fatalf("behind the socket for 1 s: got %q, want %q (repaired, not given up)", evs, want)
	}
	if c := r.Counters(); c.NAKs < 5 {
		t.Errorf("got %d NAKs while behind, want it to keep asking", c.NAKs)
	}
	// Caught up: the budget runs from the first NAK.
	r.SetBehind(false)
	evs = nil
	now = now.Add(time.Millisecond)
	evs = append(evs, script(r, &now, 0, g.data(8, 1, rec(1, 7, "7")))...) // 7 is missing
	detected := now
	var firstNAK, lostAt time.Time
	for d := r.Deadline(); !d.IsZero() && lostAt.IsZero(); d = r.Deadline() {
		r.Tick(d)
		e, out := r.Ready()
		if len(out) > 0 && firstNAK.IsZero() {
			firstNAK = d
		}
		if len(e) > 0 {
			lostAt = d
			evs = append(evs, evStrings(e)...)
		}
	}
	if want := []string{"gap a 6-6 expired", "msg a 7 7"}; !slices.Equal(evs, want) {
		t.Errorf("got %q, want %q", evs, want)
	}
	if budget := r.t.budget; lostAt.Sub(firstNAK) != budget || firstNAK.Sub(detected) <= 0 {
		t.Errorf("detected at 0, first NAK at %v, given up at %v; want given up %v after the first NAK",
			firstNAK.Sub(detected), lostAt.Sub(detected), budget)
	}
	if c := r.Counters(); c.BudgetExpired != 1 || c.WindowExpired != 0 {
		t.Errorf("budget-expired %d window-expired %d, want 1 and 0", c.BudgetExpired, c.WindowExpired)
	}
}

// A hole the leading edge runs MaxHole past is given up (expired) and counted apart from the
// budget's give-ups (herald listen --stats: window-expired, budget-expired).
func TestReceiverCore_WindowExpiredCounted(t *testing.T) {
	g := dgb{session: tsess}
	r := mustReceiverCore(t, ReceiverCoreConfig{})
	now := t0
	live(t, r, g, &now)
	evs := script(r, &now, 0, g.data(6, 1, rec(1, 5, "5"))) // datagram 5 (message 4) is missing
	evs = append(evs, script(r, &now, 0, g.data(5+MaxHole, 1, rec(1, 6, "6")))...)
	if len(evs) == 0 || evs[0] != "gap a 4-4 expired" {
		t.Fatalf("got %q, want message 4 given up first (expired)", evs)
	}
	if c := r.Counters(); c.WindowExpired != 1 || c.BudgetExpired != 0 {
		t.Errorf("window-expired %d budget-expired %d, want 1 and 0", c.WindowExpired, c.BudgetExpired)
	}
}

// The window rule for control datagrams (issue 11, found 10: an off-by-one): their seq is the
// leading edge, and an empty window has trailing = leading + 1, which is valid; beyond that, or a
// sequenced datagram with trailing > seq, is not.
func TestReceiverCore_ControlWindowEdge(t *testing.T) {
	g := dgb{session: tsess}
	r := mustReceiverCore(t, ReceiverCoreConfig{})
	now := t0
	live(t, r, g, &now) // leading edge 4
	for _, tc := range []struct {
		name string
		d    []byte
		want error
	}{
		{"heartbeat, empty window (trailing = leading + 1)", g.hb(4, 5, StreamSeq{1, 3}), nil},
		{"ncf, empty window", g.ncf(4, 5, NCFGone, Range{4, 4}), nil},
		{"heartbeat, trailing = leading + 2", g.hb(4, 6), ErrStale},
		{"data, trailing = seq + 1", g.data(5, 6, rec(1, 4, "x")), ErrStale},
		{"data, seq 0", g.data(0, 0, rec(1, 4, "x")), ErrStale},
		{"heartbeat, trailing 2^24 + 2 behind", g.hb(1<<24+10, 8), ErrStale},
	} {
		if err := r.Handle(now, sndAddr, tc.d); err != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if got := script(r, &now, time.Millisecond, g.data(5, 5, rec(1, 4, "4"))); !slices.Equal(got, []string{"msg a 4 4"}) {
		t.Errorf("after: got %q, want message 4", got)
	}
}
