package multicast

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// TestNetns_NAKAnsweredDuringStalledWrite: while one goroutine's write to the group is stalled
// (on a loaded host a thread can wait 5-120 ms inside sendmsg: measured in heraldd under -race
// during TestMulticastE2E/LossyLink), a NAK that arrives meanwhile is still answered at once.
// Before, every write was made holding the lock the NAK reader needs, so the answer waited for
// the stalled write; with LoneInline many more writes are made (one per lone message, by the
// publishing goroutine), and a stall of 250 ms outlasted the low-latency receivers' 200 ms
// repair budget: TestMulticastE2E/LossyLink gave up repairs (expired gaps). The stall here is
// injected (Sender.stall) where the kernel would take it. Both ways of sending are checked.
func TestNetns_NAKAnsweredDuringStalledWrite(t *testing.T) {
	for _, inline := range []bool{true, false} {
		name := map[bool]string{true: "inline", false: "queued"}[inline]
		t.Run(name, func(t *testing.T) { testStalledWrite(t, inline) })
	}
}

func testStalledWrite(t *testing.T, inline bool) {
	const stall = 400 * time.Millisecond
	tp := newTopo(t, "h")
	sh(t, "ip", "-n", tp.NS["h"], "link", "set", "lo", "multicast", "on")
	sh(t, "ip", "-n", tp.NS["h"], "route", "add", "239.255.0.0/16", "dev", "lo")
	group := netip.MustParseAddrPort("239.255.9.7:7497")
	var rc *net.UDPConn
	tp.in("h", func() {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		lc := net.ListenConfig{Control: receiverControl}
		c, err := lc.ListenPacket(context.Background(), "udp4", group.String())
		if err != nil {
			t.Fatal(err)
		}
		rc = c.(*net.UDPConn)
		if err := ipv4.NewPacketConn(rc).JoinGroup(lo, &net.UDPAddr{IP: group.Addr().AsSlice()}); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { rc.Close() })
	s := tp.startSender("h", SenderConfig{Group: group.String(), Interface: "lo", LoneInline: inline})

	// read returns the next datagram of type want (others are skipped) and where it came from.
	buf := make([]byte, MaxDatagram)
	read := func(want Type, within time.Duration) (Packet, netip.AddrPort, bool) {
		deadline := time.Now().Add(within)
		for {
			rc.SetReadDeadline(deadline)
			n, from, err := rc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return Packet{}, netip.AddrPort{}, false
			}
			var p Packet
			if Decode(buf[:n], &p) == nil && p.Type == want {
				return p, from, true
			}
		}
	}
	if err := s.Publish("t", nil, []byte("first")); err != nil {
		t.Fatal(err)
	}
	first, src, ok := read(TypeData, 5*time.Second)
	if !ok {
		t.Fatal("the first DATA datagram did not arrive")
	}
	// The next write stalls; the message that makes it is published from a goroutine of its own
	// (Publish itself may be the writer).
	s.stall.Store(int64(stall))
	go s.Publish("t", nil, []byte("second"))
	time.Sleep(20 * time.Millisecond) // not synchronisation: let the write start and stall
	if s.stall.Load() != 0 {
		t.Fatal("no write took the stall")
	}
	var nc *net.UDPConn
	tp.in("h", func() {
		var err error
		if nc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			t.Fatal(err)
		}
	})
	defer nc.Close()
	nak, err := AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeNAK, Session: first.Session, Seq: 1},
		Receiver: 0x5eed, Ranges: []Range{{From: first.Seq, To: first.Seq}}})
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	if _, err := nc.WriteToUDPAddrPort(nak, src); err != nil {
		t.Fatal(err)
	}
	rd, _, ok := read(TypeRData, 2*stall)
	took := time.Since(sent)
	if !ok {
		t.Fatalf("no RDATA within %v of the NAK", 2*stall)
	}
	if rd.Seq != first.Seq {
		t.Errorf("RDATA for sequence %d, want %d", rd.Seq, first.Seq)
	}
	t.Logf("%s: RDATA %v after the NAK, during a %v stalled write", wayName(inline), took.Round(time.Microsecond), stall)
	if took > stall/4 {
		t.Errorf("the NAK was answered %v after it came, during a write stalled for %v: NAK handling waits for writes", took.Round(time.Millisecond), stall)
	}
	// The stalled message is not lost: it follows once the write ends.
	if p, _, ok := read(TypeData, 2*stall); !ok || len(p.Records) != 1 || string(p.Records[0].Payload) == "" {
		t.Errorf("the message of the stalled write did not follow (got %v)", ok)
	}
}

func wayName(inline bool) string { return map[bool]string{true: "inline", false: "queued"}[inline] }
