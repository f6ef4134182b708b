package appliance_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testcert"
)

// tlsBench is a broker without users (loopback, full access) listening on
// plain TCP and TLS, so the two transports compare in the same run.
func tlsBench(b *testing.B) (plain, tlsAddr string, tc *tls.Config) {
	certs := testcert.New(b)
	tb := mustStartBroker(b, func(c *appliance.Config) {
		c.Topics.SubscriberBuffer = 1 << 20
		c.Topics.SubscriberBufferBytes = 1 << 30
	})
	stc, err := appliance.TLSConfig(appliance.StompConfig{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := tb.B.ListenTLS("127.0.0.1:0", stc)
	if err != nil {
		b.Fatal(err)
	}
	return tb.Addr, ln.String(), certs.ClientTLS(b, "", "")
}

// BenchmarkTLS_Connect: TCP (+ TLS handshake) + CONNECT/CONNECTED + close,
// one after another: connections per second, TLS against plain TCP.
func BenchmarkTLS_Connect(b *testing.B) {
	plain, tlsAddr, tc := tlsBench(b)
	for _, tr := range []struct {
		name string
		addr string
		tc   *tls.Config
	}{{"tcp", plain, nil}, {"tls", tlsAddr, tc}} {
		b.Run(tr.name, func(b *testing.B) {
			for b.Loop() {
				c, err := client.Dial(context.Background(), tr.addr, client.Options{TLS: tr.tc, DialTimeout: 5 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
		})
	}
}

// BenchmarkTLS_Throughput: 1 KiB topic messages from one publisher to one
// subscriber, both over the same transport: TLS against plain TCP.
func BenchmarkTLS_Throughput(b *testing.B) {
	plain, tlsAddr, tc := tlsBench(b)
	for _, size := range []int{1024, 16384} {
		for _, tr := range []struct {
			name string
			addr string
			tc   *tls.Config
		}{{"tcp", plain, nil}, {"tls", tlsAddr, tc}} {
			b.Run(fmt.Sprintf("size=%d/%s", size, tr.name), func(b *testing.B) {
				opts := client.Options{TLS: tr.tc, DialTimeout: 5 * time.Second, SubscriptionBuffer: 1 << 16}
				sc, err := client.Dial(context.Background(), tr.addr, opts)
				if err != nil {
					b.Fatal(err)
				}
				defer sc.Close()
				topic := "/topic/bench." + tr.name + fmt.Sprint(size)
				sub, err := sc.SubscribeReceipt(context.Background(), topic, "auto")
				if err != nil {
					b.Fatal(err)
				}
				pc, err := client.Dial(context.Background(), tr.addr, opts)
				if err != nil {
					b.Fatal(err)
				}
				defer pc.Close()
				body := make([]byte, size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				done := make(chan error, 1)
				n := b.N
				go func() {
					for i := 0; i < n; i++ {
						select {
						case <-sub.C():
						case <-time.After(10 * time.Second):
							done <- fmt.Errorf("message %d of %d not received", i, n)
							return
						}
					}
					done <- nil
				}()
				for i := 0; i < n; i++ {
					if err := pc.Send(topic, body); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
