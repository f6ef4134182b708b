package multicast

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// BenchmarkLoopback compares, over loopback multicast in a namespace of its own, a bare Go UDP
// sender (one 64-byte datagram per WriteTo, the usual naive peer) with Herald's Sender publishing
// 64-byte messages (natural batching), both read by one receiver. Reported: messages received per
// second. Needs root; skipped otherwise.
func BenchmarkLoopback(b *testing.B) {
	tp := newTopo(b, "h")
	sh(b, "ip", "-n", tp.NS["h"], "link", "set", "lo", "multicast", "on")
	sh(b, "ip", "-n", tp.NS["h"], "route", "add", "239.255.0.0/16", "dev", "lo")
	body := make([]byte, 64)

	b.Run("raw", func(b *testing.B) {
		group := netip.MustParseAddrPort("239.255.9.1:7490")
		var rc *net.UDPConn
		var sc *net.UDPConn
		tp.in("h", func() {
			lo, _ := net.InterfaceByName("lo")
			lc := net.ListenConfig{Control: receiverControl}
			c, err := lc.ListenPacket(context.Background(), "udp4", group.String())
			if err != nil {
				b.Fatal(err)
			}
			rc = c.(*net.UDPConn)
			ipv4.NewPacketConn(rc).JoinGroup(lo, &net.UDPAddr{IP: group.Addr().AsSlice()})
			raw, _ := rc.SyscallConn()
			setRcvBuf(raw, DefaultRcvBuf)
			sc, _ = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			p := ipv4.NewPacketConn(sc)
			p.SetMulticastInterface(lo)
			p.SetMulticastLoopback(true)
		})
		defer rc.Close()
		defer sc.Close()
		got := make(chan int)
		go func() {
			n := 0
			buf := make([]byte, 2048)
			for n < b.N {
				rc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				if _, _, err := rc.ReadFromUDPAddrPort(buf); err != nil {
					break
				}
				n++
			}
			got <- n
		}()
		b.SetBytes(int64(len(body)))
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			sc.WriteToUDPAddrPort(body, group)
		}
		n := <-got
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
		b.ReportMetric(float64(b.N-n)/float64(b.N)*100, "%lost")
	})

	b.Run("herald", func(b *testing.B) {
		const group = "239.255.9.2:7491"
		var r *Receiver
		tp.in("h", func() {
			var err error
			r, err = NewReceiver(ReceiverConfig{Group: group, Interface: "lo", Logger: testLogger(b)})
			if err != nil {
				b.Fatal(err)
			}
			if err := r.Open(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
		defer r.Close()
		s := tp.startSender("h", SenderConfig{Group: group, Interface: "lo"})
		defer s.Close()
		got := make(chan int)
		go func() {
			n := 0
			timeout := time.NewTimer(time.Hour)
			for n < b.N {
				timeout.Reset(2 * time.Second)
				select {
				case e := <-r.Events():
					if _, ok := e.(Message); ok {
						n++
					}
				case <-timeout.C:
					got <- n
					return
				}
			}
			got <- n
		}()
		b.SetBytes(int64(len(body)))
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			s.Publish("bench", nil, body)
		}
		n := <-got
		el := time.Since(start)
		st := s.Stats()
		b.ReportMetric(float64(n)/el.Seconds(), "msgs/s")
		b.ReportMetric(float64(st.Datagrams)/el.Seconds(), "datagrams/s")
		b.ReportMetric(float64(b.N-n)/float64(b.N)*100, "%lost")
	})
}
