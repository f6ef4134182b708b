package multicast

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func mustSenderCore(t *testing.T, cfg SenderCoreConfig) *SenderCore {
	t.Helper()
	cfg.Rand = rand.New(rand.NewPCG(1, 2))
	cfg.Start = t0
	s, err := NewSenderCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decodeAll(t *testing.T, bs [][]byte) []Packet {
	t.Helper()
	var out []Packet
	for _, b := range bs {
		var p Packet
		if err := Decode(b, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func types(ps []Packet) []Type {
	var ts []Type
	for _, p := range ps {
		ts = append(ts, p.Type)
	}
	return ts
}

func msg(body string) []byte {
	b, _ := AppendMessage(nil, nil, []byte(body))
	return b
}

func TestSenderCore_NaturalBatching(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{})
	for i := 0; i < 3; i++ {
		s.Publish(t0, "a", msg("x"))
	}
	if got := decodeAll(t, s.Ready()); len(got) != 0 {
		t.Fatalf("before Flush got %v, want nothing (records wait while more are queued)", types(got))
	}
	s.Flush(t0)
	got := decodeAll(t, s.Ready())
	if len(got) != 2 || got[0].Type != TypeCatalog || len(got[1].Records) != 3 {
		t.Fatalf("after Flush got %v, want CATALOG and one DATA with 3 records", types(got))
	}
	big := make([]byte, 300)
	for i := 0; i < 100; i++ {
		s.Publish(t0, "a", big)
	}
	s.Flush(t0)
	for _, b := range s.Ready() {
		if len(b) > DefaultMTU {
			t.Errorf("got a %d byte datagram, want <= %d", len(b), DefaultMTU)
		}
	}
}

func TestSenderCore_HeartbeatBackoff(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{})
	s.Publish(t0, "a", msg("x"))
	s.Flush(t0)
	s.Ready()
	var at []time.Duration
	// The periodic catalog at 1 s is data too and restarts the schedule: look before it.
	for now := t0; now.Before(t0.Add(999 * time.Millisecond)); now = now.Add(time.Millisecond) {
		s.Tick(now)
		for _, p := range decodeAll(t, s.Ready()) {
			if p.Type == TypeHeartbeat {
				at = append(at, now.Sub(t0))
				if p.Leading != 2 || len(p.Streams) != 1 || p.Streams[0].Seq != 1 {
					t.Fatalf("heartbeat %+v, want leading 2 and stream 1 at seq 1", p)
				}
			}
		}
	}
	want := []time.Duration{2, 6, 14, 30, 62, 126, 254, 510}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if len(at) != len(want) {
		t.Fatalf("got heartbeats at %v, want %v", at, want)
	}
	for i := range want {
		if at[i] != want[i] {
			t.Fatalf("got heartbeats at %v, want %v", at, want)
		}
	}
}

func nak(t *testing.T, session, counter uint64, auth *Auth, rs ...Range) []byte {
	b, err := AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeNAK, Session: session, Seq: counter}, Receiver: 7, Ranges: rs})
	if err != nil {
		t.Fatal(err)
	}
	return auth.Sign(b)
}

var rcvAddr = netip.MustParseAddrPort("198.18.1.1:40000")

func TestSenderCore_NAK(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{Window: 8 * DefaultMTU})
	for i := 0; i < 20; i++ {
		s.Publish(t0, "a", msg("x"))
		s.Flush(t0)
	}
	s.Ready()
	now := t0.Add(time.Millisecond)
	// seqs: 1 catalog, 2..21 data; the window holds the last 8
	s.Step(now, rcvAddr, nak(t, s.Session(), 1, nil, Range{15, 16}))
	got := decodeAll(t, s.Ready())
	if ts := types(got); len(ts) != 3 || ts[0] != TypeNCF || ts[1] != TypeRData || ts[2] != TypeRData {
		t.Fatalf("got %v, want NCF then two RDATA", ts)
	}
	if got[0].Status != NCFWillSend || got[1].Seq != 15 || got[1].Flags&FlagRepair == 0 {
		t.Errorf("got %+v, %+v", got[0], got[1])
	}
	t.Run("repeat ignored", func(t *testing.T) {
		s.Step(now, rcvAddr, nak(t, s.Session(), 2, nil, Range{15, 16}))
		if got := s.Ready(); len(got) != 0 {
			t.Errorf("got %v, want nothing for a range just repaired", types(decodeAll(t, got)))
		}
	})
	t.Run("replayed counter dropped", func(t *testing.T) {
		before := s.Counters().NAKsDropped
		s.Step(now.Add(time.Second), rcvAddr, nak(t, s.Session(), 2, nil, Range{17, 17}))
		if got := s.Counters().NAKsDropped; got != before+1 || len(s.Ready()) != 0 {
			t.Errorf("got %d dropped, want %d", got, before+1)
		}
	})
	t.Run("gone", func(t *testing.T) {
		s.Step(now.Add(time.Second), rcvAddr, nak(t, s.Session(), 3, nil, Range{2, 3}))
		got := decodeAll(t, s.Ready())
		if len(got) != 1 || got[0].Type != TypeNCF || got[0].Status != NCFGone || got[0].Ranges[0] != (Range{2, 3}) {
			t.Errorf("got %+v, want NCF gone 2-3", got)
		}
	})
	t.Run("rate limited per source", func(t *testing.T) {
		before := s.Counters().NAKsDropped
		for i := 0; i < 1000; i++ {
			s.Step(now.Add(2*time.Second), rcvAddr, nak(t, s.Session(), uint64(10+i), nil, Range{20, 20}))
			s.Ready()
		}
		if got := s.Counters().NAKsDropped - before; got < 700 {
			t.Errorf("got %d of 1000 NAKs dropped in one instant, want most", got)
		}
	})
}

func TestSenderCore_Auth(t *testing.T) {
	a := NewAuth([]byte("k1"), 1)
	s := mustSenderCore(t, SenderCoreConfig{Auth: a})
	s.Publish(t0, "a", msg("x"))
	s.Flush(t0)
	for _, b := range s.Ready() {
		if !NewAuth([]byte("k1"), 1).Verify(b) {
			t.Fatal("sender datagram does not verify")
		}
	}
	if err := s.Step(t0, rcvAddr, nak(t, s.Session(), 1, nil, Range{2, 2})); err != ErrAuth {
		t.Errorf("unsigned NAK: got %v, want %v", err, ErrAuth)
	}
	if err := s.Step(t0, rcvAddr, nak(t, s.Session(), 1, NewAuth([]byte("forged"), 1), Range{2, 2})); err != ErrAuth {
		t.Errorf("forged NAK: got %v, want %v", err, ErrAuth)
	}
	if got := s.Counters().AuthFailures; got != 2 || len(s.Ready()) != 0 {
		t.Errorf("got %d auth failures, want 2 and no response", got)
	}
	s.Step(t0, rcvAddr, nak(t, s.Session(), 1, NewAuth([]byte("k1"), 1), Range{2, 2}))
	if got := types(decodeAll(t, s.Ready())); len(got) != 2 {
		t.Errorf("signed NAK: got %v, want NCF and RDATA", got)
	}
}

func TestSenderCore_RateLimit(t *testing.T) {
	const rate = 1 << 20
	s := mustSenderCore(t, SenderCoreConfig{RateLimit: rate})
	payload := make([]byte, 1000)
	var sent int
	now := t0
	for i := 0; i < 4000; i++ { // ~4 MB
		s.Publish(now, "a", payload)
	}
	s.Flush(now)
	for now.Before(t0.Add(2 * time.Second)) {
		for _, b := range s.Ready() {
			if Type(b[3]) == TypeData {
				sent += len(b)
			}
		}
		now = now.Add(time.Millisecond)
		s.Tick(now)
	}
	burst := max(rate/50, 4*MaxDatagram)
	if sent > 2*rate+burst+DefaultMTU || sent < 2*rate-DefaultMTU {
		t.Errorf("sent %d bytes in 2 s at %d B/s, want about %d", sent, rate, 2*rate+burst)
	}
	if s.Counters().RateLimited == 0 || s.Backlog() == 0 {
		t.Errorf("got rate-limited time %v and backlog %d, want both > 0", s.Counters().RateLimited, s.Backlog())
	}
}

func TestSenderCore_LossWhenRepairLeavesWindow(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{Window: 4 * DefaultMTU, RepairRate: 1}) // 1 B/s: repairs wait
	for i := 0; i < 5; i++ {
		s.Publish(t0, "a", msg("x"))
		s.Flush(t0)
	}
	s.Ready()
	now := t0.Add(time.Millisecond)
	s.repairRate.tokens = -1e6
	s.Step(now, rcvAddr, nak(t, s.Session(), 1, nil, Range{5, 5}))
	if got := types(decodeAll(t, s.Ready())); len(got) != 1 || got[0] != TypeNCF {
		t.Fatalf("got %v, want an NCF and the repair held back by its budget", got)
	}
	for i := 0; i < 10; i++ { // seq 5 leaves the 4-datagram window
		s.Publish(now, "a", msg("y"))
		s.Flush(now)
	}
	s.Ready()
	s.Tick(now.Add(time.Millisecond))
	var loss *Packet
	for _, p := range decodeAll(t, s.Ready()) {
		if p.Type == TypeLoss {
			loss = &p
		}
	}
	if loss == nil || loss.Reason != ReasonGone || loss.Ranges[0] != (Range{5, 5}) {
		t.Fatalf("got %+v, want LOSS gone 5-5", loss)
	}
}

func TestSenderCore_IdleHeartbeatCap(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{})
	var last time.Time
	for now := t0; now.Before(t0.Add(10 * time.Second)); now = now.Add(time.Millisecond) {
		s.Tick(now)
		if len(s.Ready()) > 0 {
			if !last.IsZero() && now.Sub(last) > MaxHeartbeatInterval {
				t.Fatalf("heartbeats %v apart, want at most %v", now.Sub(last), MaxHeartbeatInterval)
			}
			last = now
		}
	}
	if c := s.Counters().Heartbeats; c > 20 {
		t.Errorf("got %d heartbeats in 10 idle seconds, want about 18 (2, 4, ... ms, then 1 s)", c)
	}
}
