package multicast

import (
	"errors"
	"testing"
)

// Protocol revision 2 (docs/multicast-protocol.md): flag bits this version does not define make
// a datagram malformed, and a HEARTBEAT carries one leading edge (header seq = body).
func TestWire_UnknownFlagsAndHeartbeatEdge(t *testing.T) {
	g := dgb{session: 9}
	d := g.data(3, 1, rec(1, 1, "x"))
	var p Packet
	for bit := 2; bit < 8; bit++ {
		b := append([]byte(nil), d...)
		b[4] |= 1 << bit
		if err := Decode(b, &p); !errors.Is(err, ErrMalformed) {
			t.Errorf("flag bit %d: got %v, want %v", bit, err, ErrMalformed)
		}
	}
	if err := Decode(d, &p); err != nil {
		t.Errorf("known flags: %v", err)
	}
	hb := g.hb(12, 2, StreamSeq{1, 4})
	if err := Decode(hb, &p); err != nil {
		t.Errorf("heartbeat: %v", err)
	}
	hb[HeaderSize] = 13 // body leading edge 13, header 12
	if err := Decode(hb, &p); !errors.Is(err, ErrMalformed) {
		t.Errorf("heartbeat with two leading edges: got %v, want %v", err, ErrMalformed)
	}
}
