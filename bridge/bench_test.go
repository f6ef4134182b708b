package bridge_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// The bridge's throughput out to JetStream (1 KiB messages, durable at
// both ends: Herald's journal sync "full", a file stream with replicas 3)
// against a direct JetStream publisher with the same window on the same
// cluster in the same run. Compare ns/op of the two.
//
// BenchmarkHeraldQueueCycle is Herald's own share (the same queue traffic
// with a local consumer).
//
//	go test -run '^$' -bench . -benchtime 2000x ./bridge
func benchCluster(b *testing.B) *natstest.Cluster { return natstest.Start(b, 3) }

func BenchmarkDirectJetStream(b *testing.B) {
	cl := benchCluster(b)
	_, js := natstest.Connect(b, cl.URLs())
	ctx := context.Background()
	name := fmt.Sprintf("DIRECT%d", b.N)
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"direct." + name}, Replicas: 3, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	b.SetBytes(1024)
	b.ResetTimer()
	const window = 64
	futs := make([]jetstream.PubAckFuture, 0, window)
	for i := 0; i < b.N; i++ {
		f, err := js.PublishAsync("direct."+name, body, jetstream.WithMsgID("d:"+strconv.Itoa(i)))
		if err != nil {
			b.Fatal(err)
		}
		futs = append(futs, f)
		if len(futs) == window || i == b.N-1 {
			for _, f := range futs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
			futs = futs[:0]
		}
	}
}

func BenchmarkBridgeOut(b *testing.B) {
	cl := benchCluster(b)
	br := testbroker.Start(b, func(c *appliance.Config) { c.Journal.Sync = "full" })
	name := fmt.Sprintf("b%d", b.N)
	cfg := jsBridge("bench"+name, "site-a", "out", cl.URLs(), appliance.BridgeMap{Local: "/queue/" + name, Remote: "sites.bench." + name})
	cfg.MaxInFlight = 64
	cfg.AckTimeout = appliance.Duration{Duration: 10 * time.Second}
	cfg.Stream = "BENCH" + name
	cfg.StreamSubjects = []string{"sites.bench." + name}
	bb := startBridgeB(b, br, cfg)
	c := br.Dial(b)
	body := make([]byte, 1024)
	b.SetBytes(1024)
	b.ResetTimer()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := 0; i < b.N; i++ {
		ch, err := c.SendAsync("/queue/"+name, body)
		if err != nil {
			b.Fatal(err)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() { <-ch; <-sem; wg.Done() }()
	}
	wg.Wait()
	for {
		if v := bb.View().Directions[0]; v.Confirmed >= uint64(b.N) {
			break
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkHeraldQueueCycle is Herald's own part of BenchmarkBridgeOut: the
// same sends, consumed with client-individual acks and the same prefetch by
// a local consumer instead of the bridge (no JetStream).
func BenchmarkHeraldQueueCycle(b *testing.B) {
	br := testbroker.Start(b, func(c *appliance.Config) { c.Journal.Sync = "full" })
	name := fmt.Sprintf("c%d", b.N)
	prod, cons := br.Dial(b), br.Dial(b)
	sub, err := cons.SubscribeReceipt(context.Background(), "/queue/"+name, "client-individual", stomp.Header{Key: "prefetch-count", Value: "64"})
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	b.SetBytes(1024)
	b.ResetTimer()
	done := make(chan struct{})
	go func() {
		for i := 0; i < b.N; i++ {
			f := <-sub.C()
			cons.Ack(f)
		}
		close(done)
	}()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := 0; i < b.N; i++ {
		ch, err := prod.SendAsync("/queue/"+name, body)
		if err != nil {
			b.Fatal(err)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() { <-ch; <-sem; wg.Done() }()
	}
	wg.Wait()
	<-done
	for {
		if q, _ := br.B.Queue(name); q.Messages == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
}
