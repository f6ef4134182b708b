package appliance_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// BenchmarkWeb_Subscriber: one publisher over TCP, one topic, a TCP
// subscriber and a WebSocket subscriber on it in the same run. Each
// reports the rate at which it received all b.N messages (from the first
// send to its last message) and its latency; ws/tcp is the ratio of the
// rates (1 = as fast).
func BenchmarkWeb_Subscriber(b *testing.B) {
	tb := mustStartBroker(b, func(c *appliance.Config) {
		c.Topics.SubscriberBuffer = 1 << 20
		c.Topics.SubscriberBufferBytes = 1 << 30
	})
	addr, err := tb.B.ListenWeb("127.0.0.1:0", nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tcp, err := client.Dial(ctx, tb.Addr, client.Options{SubscriptionBuffer: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	defer tcp.Close()
	ws, _, err := websocket.Dial(ctx, "ws://"+addr.String()+"/stomp", &websocket.DialOptions{Subprotocols: appliance.WebSubprotocols})
	if err != nil {
		b.Fatal(err)
	}
	ws.SetReadLimit(-1)
	wsc, err := client.Handshake(ctx, appliance.NewWebSocketConn(ws, &net.TCPAddr{}, &net.TCPAddr{}), "127.0.0.1", client.Options{SubscriptionBuffer: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	defer wsc.Close()
	names := []string{"tcp", "ws"}
	subs := make([]*client.Subscription, 2)
	for i, c := range []*client.Conn{tcp, wsc} {
		if subs[i], err = c.SubscribeReceipt(ctx, "/topic/bench", "auto"); err != nil {
			b.Fatal(err)
		}
	}
	p, err := client.Dial(ctx, tb.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	body := make([]byte, 100)
	var wg sync.WaitGroup
	lat := make([][]time.Duration, 2)
	done := make([]time.Time, 2)
	b.ResetTimer()
	start := time.Now()
	for i := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]time.Duration, 0, b.N)
			for range b.N {
				m := <-subs[i].C()
				ts, _ := strconv.ParseInt(m.Get("ts"), 10, 64)
				l = append(l, time.Duration(time.Now().UnixNano()-ts))
			}
			lat[i], done[i] = l, time.Now()
		}()
	}
	for range b.N {
		p.Send("/topic/bench", body, stomp.Header{Key: "ts", Value: strconv.FormatInt(time.Now().UnixNano(), 10)})
	}
	wg.Wait()
	b.StopTimer()
	rate := make([]float64, 2)
	for i, name := range names {
		rate[i] = float64(b.N) / done[i].Sub(start).Seconds()
		slices.Sort(lat[i])
		b.ReportMetric(rate[i], name+"-msgs/s")
		b.ReportMetric(float64(lat[i][len(lat[i])/2].Microseconds()), name+"-p50-µs")
		b.ReportMetric(float64(lat[i][len(lat[i])*99/100].Microseconds()), name+"-p99-µs")
	}
	b.ReportMetric(rate[1]/rate[0], "ws/tcp")
}
