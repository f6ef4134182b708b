package main

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/multicast"
)

// Benchmarks of multicast through the appliance, between network namespaces (root; skipped
// otherwise): heraldd in "app", the receiver (multicast.Receiver, in this process, its sockets
// in namespace "r1") across the bridge.
//
//	go test ./cmd/heraldd -run '^$' -bench MulticastE2E -benchtime 2s
//
// BenchmarkMulticastE2EThroughput/raw-udp is the path's limit for one 64-byte message per
// datagram (a bare Go UDP sender and receiver); /appliance is one STOMP publisher sending 64-byte
// bodies to a mapped topic, received as multicast messages. Both report msgs/s received; the ratio
// is logged. BenchmarkMulticastE2ELatency paces 10,000 messages/s and reports the latency from
// just before the STOMP SEND to the receiver's event (p50, p99, max).

// mcBenchReceiver opens a multicast.Receiver on group in host's namespace.
func mcBenchReceiver(b *testing.B, n *mcNet, host, group string) *multicast.Receiver {
	b.Helper()
	r, err := multicast.NewReceiver(multicast.ReceiverConfig{Group: group, Interface: "eth0",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		b.Fatal(err)
	}
	if err := n.in(host, func() error { return r.Open(context.Background()) }); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}

func BenchmarkMulticastE2EThroughput(b *testing.B) {
	n := newMCNet(b, "app", "r1")
	body := make([]byte, 64)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	var raw, app float64

	b.Run("raw-udp", func(b *testing.B) {
		group := netip.MustParseAddrPort("239.255.78.11:7811")
		var rc, sc *net.UDPConn
		err := n.in("r1", func() error {
			ifi, err := net.InterfaceByName("eth0")
			if err != nil {
				return err
			}
			if rc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(group)); err != nil {
				return err
			}
			rc.SetReadBuffer(16 << 20)
			return ipv4.NewPacketConn(rc).JoinGroup(ifi, &net.UDPAddr{IP: group.Addr().AsSlice()})
		})
		if err == nil {
			err = n.in("app", func() error {
				ifi, err := net.InterfaceByName("eth0")
				if err != nil {
					return err
				}
				if sc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(n.Addr["app"].String())}); err != nil {
					return err
				}
				return ipv4.NewPacketConn(sc).SetMulticastInterface(ifi)
			})
		}
		if err != nil {
			b.Fatal(err)
		}
		defer rc.Close()
		defer sc.Close()
		var got atomic.Int64
		var last atomic.Int64 // unix ns of the last datagram received
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 2048)
			for {
				if _, _, err := rc.ReadFromUDPAddrPort(buf); err != nil {
					return
				}
				got.Add(1)
				last.Store(time.Now().UnixNano())
			}
		}()
		sent := 0
		start := time.Now()
		for b.Loop() {
			if _, err := sc.WriteToUDPAddrPort(body, group); err == nil {
				sent++
			}
		}
		sendTime := time.Since(start)
		waitIdle(&got, 300*time.Millisecond)
		rc.Close()
		<-done
		elapsed := time.Duration(last.Load() - start.UnixNano())
		raw = float64(got.Load()) / elapsed.Seconds()
		b.ReportMetric(raw, "msgs/s")
		b.ReportMetric(float64(sent)/sendTime.Seconds(), "sent/s")
		b.ReportMetric(100*float64(int64(sent)-got.Load())/float64(max(sent, 1)), "loss%")
	})

	b.Run("appliance", func(b *testing.B) {
		const group = "239.255.78.10:7810"
		d := n.startDaemon(b, "app", writeDaemonConfig(b, b.TempDir(), n.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"}}))
		r := mcBenchReceiver(b, n, "r1", group)
		pub := n.dialStomp(b, "app", d.stomp)
		var got, gaps atomic.Int64
		var last atomic.Int64
		go func() {
			for e := range r.Events() {
				switch e.(type) {
				case multicast.Message:
					got.Add(1)
					last.Store(time.Now().UnixNano())
				case multicast.Gap:
					gaps.Add(1)
				}
			}
		}()
		sent := 0
		start := time.Now()
		for b.Loop() {
			if err := pub.Send("/topic/metrics.bench", body); err != nil {
				b.Fatal(err)
			}
			sent++
		}
		sendTime := time.Since(start)
		for deadline := time.Now().Add(30 * time.Second); got.Load() < int64(sent) && time.Now().Before(deadline); {
			if waitIdle(&got, 2*time.Second) {
				break // nothing more is coming
			}
		}
		elapsed := time.Duration(last.Load() - start.UnixNano())
		app = float64(got.Load()) / elapsed.Seconds()
		st := r.Stats()
		b.ReportMetric(app, "msgs/s")
		b.ReportMetric(float64(sent)/sendTime.Seconds(), "sent/s")
		b.ReportMetric(float64(st.Datagrams), "datagrams")
		if raw > 0 {
			b.ReportMetric(app/raw, "x-raw") // ratio to raw-udp's msgs/s, measured just before
		}
		if got.Load() != int64(sent) || gaps.Load() != 0 {
			b.Errorf("received %d of %d messages, %d gaps (NAKs %d, kernel drops %d)", got.Load(), sent, gaps.Load(), st.NAKs, st.KernelDrops)
		}
		b.Logf("%d messages of 64 B in %d datagrams (%.1f per datagram); NAKs %d, repairs %d, kernel drops %d",
			sent, st.Datagrams, float64(sent)/float64(max(st.Datagrams, 1)), st.NAKs, st.Repairs, st.KernelDrops)
	})
	if raw > 0 && app > 0 {
		b.Logf("64-byte messages/s received: appliance %.0f, raw UDP (one per datagram) %.0f: ratio %.2f", app, raw, app/raw)
	}
}

// waitIdle waits until c has not moved for d; it reports whether it stopped moving.
func waitIdle(c *atomic.Int64, d time.Duration) bool {
	prev := c.Load()
	for {
		time.Sleep(d)
		cur := c.Load()
		if cur == prev {
			return true
		}
		prev = cur
	}
}

func BenchmarkMulticastE2ELatency(b *testing.B) {
	const group, rate = "239.255.78.12:7812", 10000
	n := newMCNet(b, "app", "r1")
	d := n.startDaemon(b, "app", writeDaemonConfig(b, b.TempDir(), n.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"}}))
	r := mcBenchReceiver(b, n, "r1", group)
	pub := n.dialStomp(b, "app", d.stomp)
	lat := make(chan []time.Duration)
	var got atomic.Int64
	go func() {
		var l []time.Duration
		for e := range r.Events() {
			if m, ok := e.(multicast.Message); ok {
				now := time.Now().UnixNano()
				for _, h := range m.Headers {
					if h.Key == "sent-ns" {
						ts, _ := strconv.ParseInt(h.Value, 10, 64)
						l = append(l, time.Duration(now-ts))
						break
					}
				}
				got.Add(1)
			}
		}
		lat <- l
	}()
	body := make([]byte, 64)
	// Warm up: connection, catalog, first allocations.
	for i := 0; i < 100; i++ {
		pub.Send("/topic/metrics.warmup", body, stomp.Header{Key: "sent-ns", Value: "0"})
	}
	waitIdle(&got, 200*time.Millisecond)
	warm := got.Load()
	sent := 0
	start := time.Now()
	for b.Loop() {
		if wait := time.Duration(sent)*time.Second/rate - time.Since(start); wait > 0 {
			time.Sleep(wait) // not synchronisation: the publishing rate
		}
		if err := pub.Send("/topic/metrics.lat", body, stomp.Header{Key: "sent-ns", Value: strconv.FormatInt(time.Now().UnixNano(), 10)}); err != nil {
			b.Fatal(err)
		}
		sent++
	}
	achieved := float64(sent) / time.Since(start).Seconds()
	for got.Load() < warm+int64(sent) && !waitIdle(&got, time.Second) {
	}
	r.Close()
	l := <-lat
	l = l[warm:]
	if len(l) != sent {
		b.Errorf("received %d of %d messages", len(l), sent)
	}
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	q := func(p float64) time.Duration { return l[min(len(l)-1, int(p*float64(len(l))))] }
	b.ReportMetric(float64(q(0.50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(q(0.99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(l[len(l)-1].Microseconds()), "max-µs")
	b.ReportMetric(achieved, "sent/s")
	b.Logf("%d messages at %.0f/s: latency STOMP SEND -> multicast receiver p50 %v, p90 %v, p99 %v, p99.9 %v, max %v",
		len(l), achieved, q(0.5), q(0.9), q(0.99), q(0.999), l[len(l)-1])
}
