package appliance_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// BenchmarkQueueDrain measures an acked drain: b.N messages of 1 KiB are
// journaled first, then 4 consumers (client-individual, prefetch 1000) take
// and ACK every one. Only the drain is timed. grouped puts the messages in
// 64 message groups (one in flight per group).
func BenchmarkQueueDrain(b *testing.B) {
	for _, grouped := range []bool{false, true} {
		b.Run(fmt.Sprintf("grouped=%v", grouped), func(b *testing.B) { benchDrain(b, grouped) })
	}
}

func benchDrain(b *testing.B, grouped bool) {
	tb := mustStartBroker(b, func(c *appliance.Config) { c.Journal.Sync = "full" })
	body := make([]byte, 1024)
	p, err := client.Dial(context.Background(), tb.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var chs []<-chan client.Result
	for i := 0; i < b.N; i++ {
		var ch <-chan client.Result
		if grouped {
			ch, err = p.SendAsync("/queue/drain", body, hdr("JMSXGroupID", fmt.Sprint(i%64)))
		} else {
			ch, err = p.SendAsync("/queue/drain", body)
		}
		if err != nil {
			b.Fatal(err)
		}
		chs = append(chs, ch)
		if len(chs) == 256 {
			for _, ch := range chs {
				if r := <-ch; r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			chs = chs[:0]
		}
	}
	for _, ch := range chs {
		if r := <-ch; r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	b.SetBytes(1024)
	b.ReportAllocs()
	// HERALD_DRAIN_CPUPROFILE=FILE profiles the drain alone (-cpuprofile
	// would include the fill).
	if path := os.Getenv("HERALD_DRAIN_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	b.ResetTimer()
	var left atomic.Int64
	left.Store(int64(b.N))
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for range 4 {
		c, err := client.Dial(context.Background(), tb.Addr, client.Options{SubscriptionBuffer: 2048})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		sub, err := c.Subscribe("/queue/drain", "client-individual", hdr("prefetch-count", "1000"))
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case f := <-sub.C():
					if err := c.Ack(f); err != nil {
						b.Error(err)
						return
					}
					if left.Add(-1) == 0 {
						once.Do(func() { close(done) })
					}
				case <-done:
					return
				}
			}
		}()
	}
	<-done
	b.StopTimer()
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
