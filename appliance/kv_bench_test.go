package appliance_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// BenchmarkKVPut: puts with receipts to distinct keys, by 1 and 4 writers,
// beside queue SENDs with receipts (the peer in the same run: queues share
// group commits, key-value writes take one commit each, kv.go), and
// compare-and-set puts of one counter key by 4 writers racing (conflicts
// counted, not timed apart).
//
//	go test -run '^$' -bench BenchmarkKVPut ./appliance
func BenchmarkKVPut(b *testing.B) {
	for _, writers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("kv-put/writers=%d", writers), func(b *testing.B) {
			benchWriters(b, writers, func(c *client.Conn, w, i int) error {
				_, err := c.SendReceipt(context.Background(), "/kv/bench.w"+strconv.Itoa(w)+".k"+strconv.Itoa(i%100), []byte("value-0123456789"))
				return err
			})
		})
		b.Run(fmt.Sprintf("queue-send/writers=%d", writers), func(b *testing.B) {
			benchWriters(b, writers, func(c *client.Conn, w, i int) error {
				_, err := c.SendReceipt(context.Background(), "/queue/bench", []byte("value-0123456789"))
				return err
			})
		})
	}
	b.Run("kv-cas/writers=4", func(b *testing.B) {
		var mu sync.Mutex
		conflicts := 0
		benchWriters(b, 4, func(c *client.Conn, w, i int) error {
			// Read-free CAS loop: a conflict tells the current revision.
			rev := "0"
			for {
				r, err := c.SendReceipt(context.Background(), "/kv/bench.ctr", []byte("x"), stomp.Header{Key: "if-revision", Value: rev})
				if err != nil {
					return err
				}
				cur := r.Get("kv-conflict")
				if cur == "" {
					return nil
				}
				mu.Lock()
				conflicts++
				mu.Unlock()
				rev = cur
			}
		})
		b.ReportMetric(float64(conflicts)/float64(b.N), "conflicts/op")
	})
}

func benchWriters(b *testing.B, writers int, op func(c *client.Conn, w, i int) error) {
	tb := mustStartBroker(b, func(c *appliance.Config) { c.Journal.Sync = "full"; c.KV.MaxKeys = 2000 })
	conns := make([]*client.Conn, writers)
	for i := range conns {
		c, err := client.Dial(context.Background(), tb.Addr, client.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/writers + 1
	errs := make(chan error, writers)
	for w, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if err := op(c, w, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(per*writers)/b.Elapsed().Seconds(), "ops/s")
	if st := tb.B.KVStats(); st.Groups > 0 {
		b.ReportMetric(float64(st.Puts+st.Deletes)/float64(st.Groups), "writes/commit")
	}
}

// BenchmarkKVWatchFanout: one put (with receipt) and its arrival at 20
// watchers, per op; beside the same for a topic with 20 subscribers (the
// peer in the same run: no journal, no revision).
//
//	go test -run '^$' -bench BenchmarkKVWatchFanout ./appliance
func BenchmarkKVWatchFanout(b *testing.B) {
	const watchers = 20
	for _, kind := range []string{"kv", "topic"} {
		b.Run(kind+"/watchers=20", func(b *testing.B) {
			tb := mustStartBroker(b, func(c *appliance.Config) { c.Journal.Sync = "full" })
			subDest, dest := "/kv/fan.>", "/kv/fan.k"
			if kind == "topic" {
				subDest, dest = "/topic/fan.>", "/topic/fan.k"
			}
			subs := make([]*client.Subscription, watchers)
			for i := range subs {
				c, err := client.Dial(context.Background(), tb.Addr, client.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				if subs[i], err = c.SubscribeReceipt(context.Background(), subDest, "auto"); err != nil {
					b.Fatal(err)
				}
				if kind == "kv" {
					<-subs[i].C() // the snapshot marker of the empty bucket
				}
			}
			w, err := client.Dial(context.Background(), tb.Addr, client.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			body := []byte("value-0123456789")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := w.SendReceipt(context.Background(), dest, body); err != nil {
					b.Fatal(err)
				}
				for _, s := range subs {
					<-s.C()
				}
			}
		})
	}
}
