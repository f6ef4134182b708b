package multicast

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

// FuzzSenderStep feeds arbitrary datagrams (and well-formed NAKs with arbitrary ranges) from a few
// sources to a sender core. Whatever arrives: no panic, and no source gets more repair bytes than
// its budget allows for the time that passed (docs/multicast-protocol.md, section 3).
//
// Input: a sequence of items; each is 1 byte source (mod 4), 1 byte milliseconds to advance,
// 1 byte kind (even: a NAK built from the following ranges, odd: raw bytes), 1 byte length n,
// then n bytes (kind even: n/16 ranges of two u64).
func FuzzSenderStep(f *testing.F) {
	le := binary.LittleEndian
	item := func(src, ms, kind byte, body []byte) []byte {
		return append([]byte{src, ms, kind, byte(len(body))}, body...)
	}
	rng := func(from, to uint64) []byte { return le.AppendUint64(le.AppendUint64(nil, from), to) }
	f.Add(item(0, 1, 0, rng(1, 1<<40)))
	f.Add(append(item(1, 0, 0, rng(0, 0)), item(1, 1, 0, append(rng(5, 9), rng(0, 0)...))...))
	f.Add(item(2, 3, 1, []byte("HM\x01\x04\x00\x00\x00\x00")))
	f.Add(append(item(0, 1, 2, []byte{5, 0}), item(0, 0, 6, []byte{0, 0})...)) // history requests, the second too soon
	f.Fuzz(func(t *testing.T, data []byte) {
		s := mustSenderCore(t, SenderCoreConfig{Window: 64 * DefaultMTU, RepairRate: 1 << 20})
		fillSender(t, s, 200, 600)
		srcs := []netip.AddrPort{
			netip.MustParseAddrPort("198.18.0.1:1"), netip.MustParseAddrPort("198.18.0.2:2"),
			netip.MustParseAddrPort("198.18.0.3:3"), netip.MustParseAddrPort("[::ffff:198.18.0.3]:4"),
		}
		now := t0
		counter := uint64(0)
		for len(data) >= 4 {
			src, ms, kind, n := srcs[data[0]%4], data[1], data[2], int(data[3])
			data = data[4:]
			n = min(n, len(data))
			body := data[:n]
			data = data[n:]
			now = now.Add(time.Duration(ms) * time.Millisecond)
			var b []byte
			if kind%4 == 2 && len(body) >= 2 {
				// A history request (late join): the last body[0] messages, within body[1] ms.
				counter++
				b, _ = AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeHistoryRequest, Session: s.Session(), Seq: counter},
					Receiver: uint64(kind), Before: 1 << 40, Count: uint32(body[0]), AgeMs: uint32(body[1])})
			} else if kind%2 == 0 {
				var rs []Range
				for ; len(body) >= 16; body = body[16:] {
					rs = append(rs, Range{le.Uint64(body), le.Uint64(body[8:])})
				}
				counter++
				var err error
				b, err = AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeNAK, Session: s.Session(), Seq: counter}, Receiver: uint64(kind), Ranges: rs})
				if err != nil {
					continue // not encodable (a range with from > to): not a NAK anyone can send
				}
			} else {
				b = body
			}
			s.Step(now, src, b)
			s.Ready()
			s.Tick(now)
			s.Ready()
		}
		elapsed := now.Sub(t0).Seconds()
		rate := float64(1<<20) / 4
		bound := s.sourceBurst() + rate*elapsed + DefaultMTU + float64(s.catalogBytes())
		for _, st := range s.TopSources(8) {
			if float64(st.RepairBytes) > bound {
				t.Fatalf("source %s got %d repair bytes in %.3f s, budget %.0f", st.Source, st.RepairBytes, elapsed, bound)
			}
		}
		if c := s.Counters(); c.NAKSources > 3 {
			t.Fatalf("%d NAK sources from 3 addresses (one IPv4-mapped)", c.NAKSources)
		}
	})
}
