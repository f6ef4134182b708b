package multicast

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// Sealed round trip through the cores: the sender seals every datagram (nothing of the topic or
// body readable on the wire), one DATA is lost, the receiver NAKs it (HMAC under the same key),
// the sender verifies the NAK and sends the repair sealed under a fresh nonce; the receiver opens
// everything and delivers in order. A receiver without the key counts sealed datagrams and
// delivers nothing; one with another key counts authentication failures.
func TestSeal_RoundTripRepairAndStrangers(t *testing.T) {
	key := Key{ID: 7, Secret: []byte("a channel key of thirty-two byte")}
	s := mustSenderCore(t, SenderCoreConfig{Profile: ProfileLowLatency, Auth: NewAuth(key.Secret, key.ID), Seal: NewSealer(key)})
	r := mustReceiverCore(t, ReceiverCoreConfig{Keys: []Key{key}, Seal: true})
	stranger := mustReceiverCore(t, ReceiverCoreConfig{})
	wrong := mustReceiverCore(t, ReceiverCoreConfig{Keys: []Key{{ID: 7, Secret: []byte("not the key")}}, Seal: true})
	now := t0
	var wire [][]byte
	var evs []Event
	handed := uint64(0)
	handle := func(b []byte) {
		handed++
		r.Handle(now, sndAddr, b)
		e, out := r.Ready()
		evs = append(evs, e...)
		for _, o := range out {
			if err := s.Step(now, netip_198_18_1_1, o.B); err != nil {
				t.Fatalf("sender refused the receiver's NAK: %v", err)
			}
		}
		stranger.Handle(now, sndAddr, b)
		wrong.Handle(now, sndAddr, b)
	}
	bodies := []string{"confidential one", "confidential two", "confidential three"}
	for i, body := range bodies {
		s.Publish(now, "secret.topic", msg(body))
		s.Flush(now)
		for _, b := range s.Ready() {
			wire = append(wire, append([]byte(nil), b...))
			if i == 1 && Type(b[3]) == TypeData {
				continue // lost
			}
			handle(b)
		}
		now = now.Add(time.Millisecond)
	}
	for k := 0; k < 50; k++ { // NAK, repair
		now = now.Add(time.Millisecond)
		if d := r.Deadline(); !d.IsZero() && !d.After(now) {
			r.Tick(now)
			e, out := r.Ready()
			evs = append(evs, e...)
			for _, o := range out {
				if err := s.Step(now, netip_198_18_1_1, o.B); err != nil {
					t.Fatalf("sender refused the receiver's NAK: %v", err)
				}
			}
		}
		s.Tick(now)
		for _, b := range s.Ready() {
			wire = append(wire, append([]byte(nil), b...))
			handle(b)
		}
	}
	var got []string
	for _, e := range evs {
		if m, ok := e.(Message); ok {
			got = append(got, string(m.Body))
		}
	}
	if len(got) != 3 || got[0] != bodies[0] || got[1] != bodies[1] || got[2] != bodies[2] {
		t.Fatalf("delivered %q, want %q", got, bodies)
	}
	if c := r.Counters(); c.Repairs != 1 || c.AuthFailures != 0 {
		t.Errorf("receiver counters %+v: want 1 repair, no auth failure", c)
	}
	counters := map[uint64]bool{}
	for _, b := range wire {
		if b[4]&FlagSealed == 0 || b[4]&FlagAuth != 0 {
			t.Fatalf("a %v datagram with flags %#x on the wire, want SEALED only", Type(b[3]), b[4])
		}
		if bytes.Contains(b, []byte("confidential")) || bytes.Contains(b, []byte("secret.topic")) {
			t.Fatalf("plaintext on the wire: %q", b)
		}
		c := binary.LittleEndian.Uint64(b[HeaderSize:])
		if counters[c] {
			t.Fatalf("seal counter %d used twice: a nonce repeated", c)
		}
		counters[c] = true
	}
	if c := stranger.Counters(); c.Sealed != handed || c.Messages != 0 {
		t.Errorf("receiver without the key: %+v, want %d sealed, no message", c, handed)
	}
	if c := wrong.Counters(); c.AuthFailures != handed || c.Messages != 0 {
		t.Errorf("receiver with another key: %+v, want %d auth failures, no message", c, handed)
	}
}

var netip_198_18_1_1 = sndAddr

// Rotation: keys 1 and 2. Key 1 is accepted until 10 s (KeyOverlap) after the first datagram
// under key 2, then refused, also after more time passes; key 2 stays accepted. A datagram under
// an unknown id, or unsealed when sealing is required, is refused and does not change the state.
// (Each datagram accepted here is taken as new, as a receiver does with a datagram that fills a
// sequence: Accept.)
func TestSeal_KeyRotationOverlap(t *testing.T) {
	k1, k2 := Key{ID: 1, Secret: []byte("old key")}, Key{ID: 2, Secret: []byte("new key")}
	ring, err := NewKeyring([]Key{k1, k2}, true)
	if err != nil {
		t.Fatal(err)
	}
	s1, s2, s3 := NewSealer(k1), NewSealer(k2), NewSealer(Key{ID: 3, Secret: []byte("unknown")})
	d := dgb{session: 5}.data(2, 1, rec(1, 1, "x"))
	try := func(name string, s *Sealer, at time.Duration, want bool) {
		t.Helper()
		_, err := ring.Open(s.Seal(d), t0.Add(at))
		if err == nil {
			ring.Accept(t0.Add(at))
		}
		if (err == nil) != want {
			t.Errorf("%s at %v: got %v, want accepted %v", name, at, err, want)
		}
	}
	try("key 1", s1, 0, true)
	try("key 3 (unknown)", s3, time.Second, false)
	try("key 2 (the switch)", s2, 2*time.Second, true)
	try("key 1 in the overlap", s1, 11*time.Second, true)
	try("key 2", s2, 11*time.Second, true)
	try("key 1 after the overlap", s1, 12*time.Second, false)
	try("key 1 later", s1, time.Hour, false)
	try("key 2 later", s2, time.Hour, true)
	signed := NewAuth(k2.Secret, 2).Sign(append([]byte(nil), d...))
	if _, err := ring.Open(signed, t0.Add(time.Hour)); !errors.Is(err, ErrAuth) {
		t.Errorf("HMAC-signed datagram with seal required: got %v, want ErrAuth", err)
	}
	// Without seal required, the same ring accepts HMAC-signed datagrams of its keys.
	open, _ := NewKeyring([]Key{k2}, false)
	if _, err := open.Open(signed, t0); err != nil {
		t.Errorf("HMAC-signed datagram, seal not required: %v", err)
	}
	if _, err := NewKeyring(nil, true); !errors.Is(err, ErrBadConfig) {
		t.Errorf("seal without a key: got %v, want ErrBadConfig", err)
	}
	if _, err := NewKeyring([]Key{k1, {ID: 1, Secret: []byte("dup")}}, true); !errors.Is(err, ErrBadConfig) {
		t.Errorf("a key id twice: got %v, want ErrBadConfig", err)
	}
}
