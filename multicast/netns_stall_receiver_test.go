package multicast

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// TestNetns_ReceiverStalledGivesUpNothingUnread: a receiver process that gets no CPU for longer
// than the repair budget (400 ms here; 300 ms of a race-built `herald listen` measured under load
// in TestMulticastE2E/LossyLink) must not give up a hole whose repair waits unread in its
// socket. Before, its timer goroutine could run first after the stall and give up (a Gap,
// "expired") with the repair already there; now a datagram waiting in the socket (SIOCINQ)
// counts as being behind, as a full read batch does. The stall is injected (Receiver.stallRead)
// where the scheduler would take it.
func TestNetns_ReceiverStalledGivesUpNothingUnread(t *testing.T) {
	tp := newTopo(t, "h")
	sh(t, "ip", "-n", tp.NS["h"], "link", "set", "lo", "multicast", "on")
	sh(t, "ip", "-n", tp.NS["h"], "route", "add", "239.255.0.0/16", "dev", "lo")
	group := netip.MustParseAddrPort("239.255.9.8:7498")
	r, err := NewReceiver(ReceiverConfig{Group: group.String(), Interface: "lo", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var sc *net.UDPConn
	tp.in("h", func() {
		if err := r.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if sc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			t.Fatal(err)
		}
		p := ipv4.NewPacketConn(sc)
		if err := p.SetMulticastInterface(lo); err != nil {
			t.Fatal(err)
		}
		p.SetMulticastLoopback(true)
	})
	t.Cleanup(func() { r.Close(); sc.Close() })

	sess := uint64(time.Now().Unix())<<32 | 0x5a11
	dg := func(p Packet) []byte {
		p.Session = sess
		p.Trailing = 1
		b, err := AppendPacket(nil, &p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rec := func(q uint64) []Record {
		m, _ := AppendMessage(nil, nil, []byte("m"))
		return []Record{{Stream: 1, Seq: q, Payload: m}}
	}
	send := func(b []byte) {
		if _, err := sc.WriteToUDPAddrPort(b, group); err != nil {
			t.Fatal(err)
		}
	}
	send(dg(Packet{PacketHeader: PacketHeader{Type: TypeCatalog, Seq: 1}, Catalog: []CatalogEntry{{Stream: 1, First: 1, Topic: "t"}}}))
	send(dg(Packet{PacketHeader: PacketHeader{Type: TypeData, Seq: 2}, Records: rec(1)}))
	// Datagram 3 (stream sequence 2) is lost; 4 makes it a hole, NAKed after about 1 ms.
	send(dg(Packet{PacketHeader: PacketHeader{Type: TypeData, Seq: 4}, Records: rec(3)}))
	next := func(within time.Duration) Event {
		select {
		case e := <-r.Events():
			return e
		case <-time.After(within):
			return nil
		}
	}
	for e := next(5 * time.Second); ; e = next(5 * time.Second) {
		if e == nil {
			t.Fatal("the first message did not arrive")
		}
		if m, ok := e.(Message); ok && m.StreamSeq == 1 {
			break
		}
	}
	time.Sleep(20 * time.Millisecond) // not synchronisation: the first NAK goes out
	// The receiver's read goroutine stalls for 400 ms after its next read (a duplicate wakes it);
	// the repair comes during the stall and waits in the socket.
	r.stallRead.Store(int64(400 * time.Millisecond))
	send(dg(Packet{PacketHeader: PacketHeader{Type: TypeData, Seq: 2}, Records: rec(1)}))
	time.Sleep(20 * time.Millisecond) // not synchronisation: the read goroutine is in its stall
	if r.stallRead.Load() != 0 {
		t.Fatal("the read goroutine did not take the stall")
	}
	repair := dg(Packet{PacketHeader: PacketHeader{Type: TypeRData, Flags: FlagRepair, Seq: 3}, Records: rec(2)})
	send(repair)
	var got []Event
	for len(got) < 2 {
		e := next(3 * time.Second)
		if e == nil {
			break
		}
		got = append(got, e)
	}
	if len(got) != 2 {
		t.Fatalf("got %v, want the messages 2 and 3", got)
	}
	for i, e := range got {
		if m, ok := e.(Message); !ok || m.StreamSeq != uint64(i+2) {
			t.Errorf("event %d: %v, want message %d (a gap means the receiver gave up a repair that waited unread)", i, e, i+2)
		}
	}
	if st := r.Stats(); st.Gaps != 0 || st.NAKs == 0 {
		t.Errorf("gaps %d, NAKs %d; want 0 gaps and the hole NAKed", st.Gaps, st.NAKs)
	}
}
