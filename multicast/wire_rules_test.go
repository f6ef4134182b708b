package multicast

import (
	"encoding/binary"
	"errors"
	"testing"
)

// Protocol revision 2 (docs/multicast-protocol.md): flag bits this version does not define make
// a datagram malformed (bits 2, FRAGMENT, and 3, SEALED, are defined since revision 3), and a HEARTBEAT carries
// one leading edge (header seq = body).
func TestWire_UnknownFlagsAndHeartbeatEdge(t *testing.T) {
	g := dgb{session: 9}
	d := g.data(3, 1, rec(1, 1, "x"))
	var p Packet
	for bit := 4; bit < 8; bit++ {
		b := append([]byte(nil), d...)
		b[4] |= 1 << bit
		if err := Decode(b, &p); !errors.Is(err, ErrMalformed) {
			t.Errorf("flag bit %d: got %v, want %v", bit, err, ErrMalformed)
		}
	}
	if err := Decode(d, &p); err != nil {
		t.Errorf("known flags: %v", err)
	}
	// SEALED (revision 3): the body is opaque until opened.
	sealed := append([]byte(nil), d...)
	sealed[4] |= FlagSealed
	if err := Decode(sealed, &p); !errors.Is(err, ErrSealed) {
		t.Errorf("sealed datagram: got %v, want %v", err, ErrSealed)
	}
	// FRAGMENT: only on DATA and RDATA; a record with the fragment bit needs the flag.
	withFlag := append([]byte(nil), d...)
	withFlag[4] |= FlagFragment
	if err := Decode(withFlag, &p); err != nil {
		t.Errorf("DATA with the fragment flag and a whole record: %v", err)
	}
	hbf := g.hb(12, 2)
	hbf[4] |= FlagFragment
	if err := Decode(hbf, &p); !errors.Is(err, ErrMalformed) {
		t.Errorf("HEARTBEAT with the fragment flag: got %v, want %v", err, ErrMalformed)
	}
	fd := g.fdata(3, 1, false, frags(1, 1, "a fragmented message", 2)...)
	if err := Decode(fd, &p); err != nil || len(p.Records) != 2 || !p.Records[1].Frag || p.Records[1].Offset == 0 {
		t.Errorf("fragments: %v %+v", err, p.Records)
	}
	fd[4] &^= FlagFragment
	if err := Decode(fd, &p); !errors.Is(err, ErrMalformed) {
		t.Errorf("fragment record without the flag: got %v, want %v", err, ErrMalformed)
	}
	short := g.fdata(3, 1, false, Record{Stream: 1, Seq: 1, Frag: true, Total: 4, Payload: []byte("ab")})
	binary.LittleEndian.PutUint32(short[HeaderSize+2+12:], 7|FragmentBit) // shorter than its u32 total, u32 offset
	if err := Decode(short[:len(short)-3], &p); !errors.Is(err, ErrMalformed) {
		t.Errorf("fragment record of 7 bytes: got %v, want %v", err, ErrMalformed)
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
