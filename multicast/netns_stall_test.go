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

// stallRig is a sender on lo in a namespace of its own, a socket in the group, and a socket to
// send NAKs from; first is the DATA datagram of a first message, src where it came from.
type stallRig struct {
	t     *testing.T
	s     *Sender
	rc    *net.UDPConn
	nc    *net.UDPConn
	buf   []byte
	first Packet
	src   netip.AddrPort
	naks  uint64
}

func newStallRig(t *testing.T, inline bool) *stallRig {
	tp := newTopo(t, "h")
	sh(t, "ip", "-n", tp.NS["h"], "link", "set", "lo", "multicast", "on")
	sh(t, "ip", "-n", tp.NS["h"], "route", "add", "239.255.0.0/16", "dev", "lo")
	group := netip.MustParseAddrPort("239.255.9.7:7497")
	r := &stallRig{t: t, buf: make([]byte, MaxDatagram)}
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
		r.rc = c.(*net.UDPConn)
		if err := ipv4.NewPacketConn(r.rc).JoinGroup(lo, &net.UDPAddr{IP: group.Addr().AsSlice()}); err != nil {
			t.Fatal(err)
		}
		if r.nc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { r.rc.Close(); r.nc.Close() })
	r.s = tp.startSender("h", SenderConfig{Group: group.String(), Interface: "lo", LoneInline: inline})
	if err := r.s.Publish("t", nil, []byte("first")); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if r.first, r.src, ok = r.read(TypeData, 5*time.Second); !ok {
		t.Fatal("the first DATA datagram did not arrive")
	}
	return r
}

// read returns the next datagram of type want (others are skipped) and where it came from.
func (r *stallRig) read(want Type, within time.Duration) (Packet, netip.AddrPort, bool) {
	deadline := time.Now().Add(within)
	for {
		r.rc.SetReadDeadline(deadline)
		n, from, err := r.rc.ReadFromUDPAddrPort(r.buf)
		if err != nil {
			return Packet{}, netip.AddrPort{}, false
		}
		var p Packet
		if Decode(r.buf[:n], &p) == nil && p.Type == want {
			return p, from, true
		}
	}
}

// nak asks for the first message's datagram again.
func (r *stallRig) nak() {
	r.t.Helper()
	r.naks++
	b, err := AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeNAK, Session: r.first.Session, Seq: r.naks},
		Receiver: 0x5eed, Ranges: []Range{{From: r.first.Seq, To: r.first.Seq}}})
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.nc.WriteToUDPAddrPort(b, r.src); err != nil {
		r.t.Fatal(err)
	}
}

// repairTook sends a NAK and reports how long its RDATA took, failing if none came within
// within.
func (r *stallRig) repairTook(within time.Duration) time.Duration {
	r.t.Helper()
	sent := time.Now()
	r.nak()
	rd, _, ok := r.read(TypeRData, within)
	took := time.Since(sent)
	if !ok {
		r.t.Fatalf("no RDATA within %v of the NAK", within)
	}
	if rd.Seq != r.first.Seq {
		r.t.Errorf("RDATA for sequence %d, want %d", rd.Seq, r.first.Seq)
	}
	return took
}

func testStalledWrite(t *testing.T, inline bool) {
	const stall = 400 * time.Millisecond
	r := newStallRig(t, inline)
	// The next write stalls; the message that makes it is published from a goroutine of its own
	// (Publish itself may be the writer).
	r.s.stall.Store(int64(stall))
	go r.s.Publish("t", nil, []byte("second"))
	time.Sleep(20 * time.Millisecond) // not synchronisation: let the write start and stall
	if r.s.stall.Load() != 0 {
		t.Fatal("no write took the stall")
	}
	took := r.repairTook(2 * stall)
	t.Logf("%s: RDATA %v after the NAK, during a %v stalled write", wayName(inline), took.Round(time.Microsecond), stall)
	if took > stall/4 {
		t.Errorf("the NAK was answered %v after it came, during a write stalled for %v: NAK handling waits for writes", took.Round(time.Millisecond), stall)
	}
	// The stalled message is not lost: it follows once the write ends.
	if p, _, ok := r.read(TypeData, 2*stall); !ok || len(p.Records) != 1 || string(p.Records[0].Payload) == "" {
		t.Errorf("the message of the stalled write did not follow (got %v)", ok)
	}
}

// TestNetns_NAKReaderDoesNotWriteData: the goroutine that reads NAKs never becomes the one that
// writes queued data. It used to, when no write was under way as a NAK came: it then wrote
// sendq until it was empty, which publishers can keep from happening for as long as they
// publish, and NAKs waited unread meanwhile. In the throughput benchmark with 10% loss at one
// receiver on two loaded cores, NAKs waited 150-200 ms and the low-latency receiver gave the
// repairs up (expired gaps). Here the write of sendq after the NAK stalls (Sender.stall, as
// the kernel may): the RDATA must not wait for it, and neither must the next NAK's.
func TestNetns_NAKReaderDoesNotWriteData(t *testing.T) {
	const stall = 400 * time.Millisecond
	r := newStallRig(t, false)
	r.s.stall.Store(int64(stall)) // the next write of sendq, whoever makes it
	took := r.repairTook(2 * stall)
	t.Logf("RDATA %v after the NAK, the next write of sendq stalled for %v", took.Round(time.Microsecond), stall)
	if took > stall/4 {
		t.Errorf("the NAK was answered %v after it came: the NAK reader wrote queued datagrams (and waited on them) before its repair", took.Round(time.Millisecond))
	}
	// A second NAK (after the sender's hold on repeat NAKs) while that write may still stall.
	time.Sleep(5 * time.Millisecond)
	took = r.repairTook(2 * stall)
	if took > stall/4 {
		t.Errorf("the second NAK was answered %v after it came: the NAK reader was held by a write of queued datagrams", took.Round(time.Millisecond))
	}
	// What the NAK queued for the writer (its NCF) is written, not left in sendq.
	if p, _, ok := r.read(TypeNCF, 2*stall); !ok || p.Status != NCFWillSend {
		t.Errorf("the NAK's NCF was not written (got %v, status %v)", ok, p.Status)
	}
}

func wayName(inline bool) string { return map[bool]string{true: "inline", false: "queued"}[inline] }
