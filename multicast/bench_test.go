package multicast

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// Budget (docs/design.md, performance targets): the core must not be what limits 1M msg/s of 64-byte messages
// on one core, i.e. well under 1 us per message; encode and decode are a small part of that.

// 64000: a message that went alone in one IP-fragmented datagram before revision 3 and goes as
// 48 fragments of one MTU since.
var benchSizes = []int{64, 512, 1024, 64000}

func BenchmarkSenderCore(b *testing.B) {
	for _, size := range benchSizes {
		for _, batch := range []int{1, 16} {
			b.Run(fmt.Sprintf("size=%d/batch=%d", size, batch), func(b *testing.B) {
				s, _ := NewSenderCore(SenderCoreConfig{Rand: rand.New(rand.NewPCG(1, 1)), Start: t0})
				payload, _ := AppendMessage(nil, []Header{{"k", "v"}}, make([]byte, size))
				now := t0
				b.SetBytes(int64(len(payload)))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					s.Publish(now, "metrics.cpu", payload)
					if i%batch == batch-1 {
						s.Flush(now)
						s.Ready()
					}
				}
			})
		}
	}
}

func BenchmarkReceiverCore(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			s, _ := NewSenderCore(SenderCoreConfig{Rand: rand.New(rand.NewPCG(1, 1)), Start: t0})
			payload, _ := AppendMessage(nil, nil, make([]byte, size))
			r, _ := NewReceiverCore(ReceiverCoreConfig{Rand: rand.New(rand.NewPCG(1, 2))})
			from := netip.MustParseAddrPort("198.18.0.1:7400")
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			n := 0
			var dgs [][]byte
			// The datagrams are made (untimed) 1,024 messages at a time: 64 KB messages would not
			// fit in memory all at once.
			for i := 0; i < b.N; {
				b.StopTimer()
				dgs = dgs[:0]
				for k := 0; k < 1024 && i < b.N; k, i = k+1, i+1 {
					s.Publish(t0, "metrics.cpu", payload)
					if i%16 == 15 || i == b.N-1 || k == 1023 {
						s.Flush(t0)
						for _, d := range s.Ready() {
							dgs = append(dgs, append([]byte(nil), d...))
						}
					}
				}
				b.StartTimer()
				for _, d := range dgs {
					r.Handle(t0, from, d)
					ev, _ := r.Ready()
					n += len(ev)
				}
			}
			if n < b.N {
				b.Fatalf("got %d events, want %d", n, b.N)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			payload, _ := AppendMessage(nil, []Header{{"k", "v"}}, make([]byte, size))
			var p Packet
			p.Type = TypeData
			for len(p.Records) == 0 || HeaderSize+2+(len(p.Records)+1)*(RecordHeader+len(payload)) <= DefaultMTU {
				p.Records = append(p.Records, Record{Stream: 1, Seq: uint64(len(p.Records) + 1), Payload: payload})
			}
			d, _ := AppendPacket(nil, &p)
			var q Packet
			b.SetBytes(int64(len(d)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := Decode(d, &q); err != nil {
					b.Fatal(err)
				}
				for _, r := range q.Records {
					DecodeMessage(r.Payload)
				}
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			payload := make([]byte, size)
			buf := make([]byte, 0, 2048)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				buf, _ = AppendMessage(buf[:0], []Header{{"k", "v"}}, payload)
				buf = appendRecord(buf, 1, uint64(i), payload)
			}
		})
	}
}

func BenchmarkAuth(b *testing.B) {
	a := NewAuth([]byte("0123456789abcdef0123456789abcdef"), 1)
	d := make([]byte, DefaultMTU-TagSize, DefaultMTU)
	b.SetBytes(int64(len(d)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		d = a.Sign(d[:DefaultMTU-TagSize])
	}
	_ = time.Second
}

// BenchmarkSenderCoreNAK: what a NAK costs the sender. "honest" asks for one sequence (the peer);
// "hostile" asks for the whole window from a source whose repair budget is spent: it must cost
// about as little (O(ranges), not O(sequences)), or a host NAKing every millisecond takes the
// sender's CPU even when its repairs are refused.
func BenchmarkSenderCoreNAK(b *testing.B) {
	for _, kind := range []string{"honest", "hostile"} {
		b.Run(kind, func(b *testing.B) {
			s, _ := NewSenderCore(SenderCoreConfig{Rand: rand.New(rand.NewPCG(1, 1)), Start: t0})
			payload := make([]byte, 900)
			for i := 0; i < 6000; i++ {
				s.Publish(t0, "metrics.cpu", payload)
				s.Flush(t0)
			}
			s.Ready()
			from := netip.MustParseAddrPort("198.18.5.5:40000")
			nakb := func(counter uint64, r Range) []byte {
				p, _ := AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeNAK, Session: s.Session(), Seq: counter}, Receiver: 1, Ranges: []Range{r}})
				return p
			}
			now := t0
			if kind == "hostile" {
				s.Step(now, from, nakb(1, Range{1, 1 << 40})) // spends the source's budget
				s.Ready()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now = now.Add(time.Millisecond) // one NAK per ms, as the hostile host of TestNetns_HostileNAKer
				r := Range{3000 + uint64(i%2000), 3000 + uint64(i%2000)}
				if kind == "hostile" {
					r = Range{1, 1 << 40}
				}
				s.Step(now, from, nakb(uint64(i+2), r))
				s.Ready()
			}
		})
	}
}
