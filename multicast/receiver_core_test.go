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
}

func (g dgb) enc(p *Packet) []byte {
	p.Session = g.session
	b, err := AppendPacket(nil, p)
	if err != nil {
		panic(err)
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
