package multicast

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// BenchmarkNetnsLatency: Sender.Publish to a Receiver's event, between network namespaces, one
// 64-byte message at a time at 10,000 messages/s (issue 11, deliver 11: a lone message must not
// wait behind a timer or a goroutine hand-off). Sub-benchmarks in the same run, interleaved:
// inline (Publish packs and sends the message itself when nothing is queued, the default) and
// queued (every message handed to the writer goroutine, as before). Reports p50, p90, p99 in µs.
//
//	go test ./multicast -run '^$' -bench NetnsLatency -benchtime 20000x
func BenchmarkNetnsLatency(b *testing.B) {
	tp := newTopo(b, "s", "r")
	const group, rate = "239.255.7.20:7420", 10000
	r, err := NewReceiver(ReceiverConfig{Group: group, Interface: "eth0", Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	tp.in("r", func() {
		if err := r.Open(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
	b.Cleanup(func() { r.Close() })
	// A plain socket on the same group in the receiver's namespace: when each DATA datagram is
	// read by a goroutine blocked in recvmsg, against when the Receiver's event is taken, is what
	// the Receiver adds (ReceiverCore, the hand-off to the consumer's goroutine).
	var rawc *net.UDPConn
	tp.in("r", func() {
		lc := net.ListenConfig{Control: receiverControl}
		c, err := lc.ListenPacket(context.Background(), "udp4", group)
		if err != nil {
			b.Fatal(err)
		}
		rawc = c.(*net.UDPConn)
		eth, _ := net.InterfaceByName("eth0")
		if err := ipv4.NewPacketConn(rawc).JoinGroup(eth, &net.UDPAddr{IP: net.ParseIP("239.255.7.20")}); err != nil {
			b.Fatal(err)
		}
	})
	b.Cleanup(func() { rawc.Close() })
	rawLat := map[string][]time.Duration{}
	rawDone := make(chan struct{})
	go func() {
		defer close(rawDone)
		buf := make([]byte, MaxDatagram)
		var p Packet
		for {
			n, err := rawc.Read(buf)
			now := time.Now()
			if err != nil {
				return
			}
			if Decode(buf[:n], &p) != nil || p.Type != TypeData {
				continue
			}
			for _, rec := range p.Records {
				hs, _, err := DecodeMessage(rec.Payload)
				if err != nil || len(hs) < 2 {
					continue
				}
				if ns, err := strconv.ParseInt(hs[0].Value, 10, 64); err == nil && ns != 0 {
					rawLat[hs[1].Value] = append(rawLat[hs[1].Value], now.Sub(time.Unix(0, ns)))
				}
			}
		}
	}()
	s := tp.startSender("s", SenderConfig{Group: group})
	body := make([]byte, 64)
	for i := 0; i < 200; i++ { // warm up: session, catalog
		s.Publish("lat", []Header{{"t", "0"}}, body)
	}
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); {
		select {
		case <-r.Events():
		case <-time.After(50 * time.Millisecond):
		}
	}
	// Rounds of 1,000 messages, alternating the two ways, so both see the same load. A
	// goroutine of its own takes the events as they come (header m says which way it went).
	lat := map[bool][]time.Duration{}
	call := map[bool][]time.Duration{} // how long Publish itself took: the sender's share
	var mu sync.Mutex
	got := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range r.Events() {
			now := time.Now()
			m, ok := e.(Message)
			if !ok || len(m.Headers) < 2 {
				continue
			}
			ns, err := strconv.ParseInt(m.Headers[0].Value, 10, 64)
			if err != nil || ns == 0 {
				continue
			}
			mu.Lock()
			q := m.Headers[1].Value == "queued"
			lat[q] = append(lat[q], now.Sub(time.Unix(0, ns)))
			got++
			n := got
			mu.Unlock()
			if n == b.N {
				return
			}
		}
	}()
	const round = 1000
	start := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if w := time.Duration(i)*time.Second/rate - time.Since(start); w > 0 {
			time.Sleep(w) // not synchronisation: the publishing rate
		}
		s.cfg.LoneInline = (i/round)%2 == 0
		way := map[bool]string{true: "inline", false: "queued"}[s.cfg.LoneInline]
		t0 := time.Now()
		if err := s.Publish("lat", []Header{{"t", strconv.FormatInt(t0.UnixNano(), 10)}, {"m", way}}, body); err != nil {
			b.Fatal(err)
		}
		call[!s.cfg.LoneInline] = append(call[!s.cfg.LoneInline], time.Since(t0))
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	b.StopTimer()
	rawc.Close()
	<-rawDone
	for way, l := range rawLat {
		slices.Sort(l)
		b.ReportMetric(float64(l[len(l)/2].Nanoseconds())/1e3, way+"-raw-socket-p50-µs")
		b.Logf("%s, at a plain socket on the group: %d messages: p50 %v p99 %v", way, len(l), l[len(l)/2], l[len(l)*99/100])
	}
	st := s.Stats()
	b.Logf("sender: %d messages in %d datagrams, %d packed by Publish itself", st.Messages, st.Datagrams, st.Inline)
	mu.Lock()
	defer mu.Unlock()
	if got != b.N {
		b.Fatalf("%d of %d messages", got, b.N)
	}
	for _, queued := range []bool{false, true} {
		l := lat[queued]
		if len(l) == 0 {
			continue
		}
		slices.Sort(l)
		q := func(p float64) time.Duration { return l[min(len(l)-1, int(p*float64(len(l))))] }
		name := map[bool]string{false: "inline", true: "queued"}[queued]
		b.ReportMetric(float64(q(0.5).Nanoseconds())/1e3, name+"-p50-µs")
		b.ReportMetric(float64(q(0.99).Nanoseconds())/1e3, name+"-p99-µs")
		c := call[queued]
		slices.Sort(c)
		b.ReportMetric(float64(c[len(c)/2].Nanoseconds())/1e3, name+"-publish-p50-µs")
		b.Logf("%s: %d messages at %d/s: p50 %v p90 %v p99 %v max %v; the Publish call itself p50 %v p99 %v", name, len(l), rate,
			q(0.5), q(0.9), q(0.99), l[len(l)-1], c[len(c)/2], c[len(c)*99/100])
	}
}
